/** Shared test fixtures: identities, signed envelopes and temporary directories. */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Envelope } from '../../src/envelope/envelope.js';
import { signEnvelope, type EnvelopeFields } from '../../src/envelope/sign.js';
import { generateSigningKey, signingKeyFromSeed } from '../../src/identity/ed25519.js';
import { identityFromSigningKey, type Identity } from '../../src/identity/identity.js';

export function newIdentity(seedByte?: number): Identity {
  return identityFromSigningKey(seedByte === undefined ? generateSigningKey() : signingKeyFromSeed(Buffer.alloc(32, seedByte)));
}

export function message(from: Identity, to: Identity, fields: Partial<EnvelopeFields> = {}): Envelope {
  return signEnvelope(from.signingKey, { to: to.key, text: 'hello', ...fields });
}

export async function tempDir(prefix = 'interlink-test-'): Promise<{ path: string; remove: () => Promise<void> }> {
  const path = await mkdtemp(join(tmpdir(), prefix));
  return { path, remove: () => rm(path, { recursive: true, force: true }) };
}

