/** Shared test fixtures: identities, signed envelopes and temporary directories. */
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
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

/** A file's bytes and inode, or undefined when it is missing: to check that a refused edit left it untouched. */
export async function fileState(path: string): Promise<{ bytes: string; ino: number } | undefined> {
  try {
    const [bytes, info] = await Promise.all([readFile(path, 'utf8'), stat(path)]);
    return { bytes, ino: info.ino };
  } catch {
    return undefined;
  }
}
