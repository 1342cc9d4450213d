/**
 * test/vectors/relay-auth.json: the committed vectors are what scripts/gen-relay-vectors.ts
 * produces, each vector's signed bytes follow the layout docs/PROTOCOL.md gives, and each
 * verdict is what the relay (auth proofs) and the client (welcomes) decide.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { buildRelayAuthVectors } from '../../scripts/gen-relay-vectors.js';
import { lengthPrefixed } from '../../src/envelope/bytes.js';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { signBytes, signingKeyFromSeed } from '../../src/identity/ed25519.js';
import { verifyAuth, verifyWelcome } from '../../src/wire/auth.js';

const vectorSchema = z.object({
  name: z.string().min(1),
  proof: z.enum(['auth', 'welcome']),
  valid: z.boolean(),
  seed_b64url: z.string(),
  relay_key: z.string(),
  relay_nonce: z.string(),
  client_nonce: z.string().optional(),
  route: z.string().optional(),
  signed_bytes_hex: z.string().regex(/^([0-9a-f]{2})+$/),
  sig: z.string(),
});
const URL_ = new URL('../vectors/relay-auth.json', import.meta.url);
const vectors = z.array(vectorSchema).parse(JSON.parse(readFileSync(URL_, 'utf8')));
const b = (text: string) => Buffer.from(text, 'base64url');

/** The layout of docs/PROTOCOL.md "Challenge and authentication", written out again here. */
function documentedBytes(v: z.infer<typeof vectorSchema>): Buffer {
  if (v.proof === 'auth') return Buffer.concat([Buffer.from('interlink-relay-auth-v2\0'), b(v.relay_key), b(v.relay_nonce), ...lengthPrefixed(v.route!)]);
  return Buffer.concat([Buffer.from('interlink-relay-welcome-v1\0'), b(v.relay_key), b(v.relay_nonce), b(v.client_nonce!)]);
}

describe('relay-auth vectors', () => {
  it('the committed file is exactly what scripts/gen-relay-vectors.ts produces', () => {
    expect(JSON.parse(JSON.stringify(buildRelayAuthVectors()))).toEqual(JSON.parse(readFileSync(URL_, 'utf8')));
  });

  it('cover valid and invalid proofs of both kinds', () => {
    expect(vectors.filter((v) => v.valid).map((v) => v.proof).sort()).toEqual(['auth', 'auth', 'welcome']);
    expect(vectors.filter((v) => !v.valid).map((v) => v.proof).sort()).toEqual(['auth', 'auth', 'welcome']);
  });

  it.each(vectors.map((v) => [v.name, v] as const))('%s', (_name, v) => {
    expect(documentedBytes(v).toString('hex')).toBe(v.signed_bytes_hex);
    const verdict = v.proof === 'auth' ? verifyAuth(v.relay_key, v.relay_nonce, v.route!, v.sig) : verifyWelcome(v.relay_key, v.relay_nonce, v.client_nonce!, v.sig);
    expect(verdict).toBe(v.valid);
    // A valid signature is the seed's, over exactly these bytes (Ed25519 is deterministic).
    const resigned = encodeBase64url(signBytes(signingKeyFromSeed(b(v.seed_b64url)), Buffer.from(v.signed_bytes_hex, 'hex')));
    expect(resigned === v.sig).toBe(v.valid);
  });
});
