/**
 * Seeded fuzzing of the signature check against the strict noble oracle
 * (helpers/noble-oracle.ts): valid (key, message, signature) triples with bits flipped in
 * any of the three, torsion and identity points and scalars at and past the group order
 * spliced in, lengths off by one, and random bytes. `verifyBytes` must never throw and must
 * agree with the oracle on every case; a flipped bit is never accepted.
 *
 * FUZZ_RUNS cases (default 500, as the oracle is slow; `npm run fuzz` runs 100,000).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { signBytes, signingKeyFromSeed, verifyBytes } from '../../src/identity/ed25519.js';
import { fuzzLabel, fuzzParameters, fuzzRuns, fuzzTimeout, flipBit } from '../helpers/fuzz.js';
import { L, numberToBytesLE, strictVerdict, torsionPoints } from '../helpers/noble-oracle.js';

const RUNS = fuzzRuns(500);

const torsion = torsionPoints().map((p) => Buffer.from(p.toBytes()));
const scalarsAtTheEdge = [0n, 1n, L - 1n, L, L + 1n, 2n ** 255n - 1n, 2n ** 253n].map((n) => Buffer.from(numberToBytesLE(n, 32)));

interface Triple {
  publicKey: Buffer;
  message: Buffer;
  signature: Buffer;
}

const honest = fc.tuple(fc.uint8Array({ minLength: 32, maxLength: 32 }), fc.uint8Array({ maxLength: 200 })).map(([seed, message]): Triple => {
  const key = signingKeyFromSeed(seed);
  return { publicKey: Buffer.from(key.publicKey), message: Buffer.from(message), signature: signBytes(key, message) };
});

type Edit = (t: Triple) => Triple;

const edit: fc.Arbitrary<Edit> = fc.oneof(
  fc.constant<Edit>((t) => t),
  fc.tuple(fc.constantFrom('publicKey' as const, 'message' as const, 'signature' as const), fc.nat(), fc.integer({ min: 0, max: 7 })).map(
    ([part, at, bit]): Edit =>
      (t) => ({ ...t, [part]: flipBit(t[part], at, bit) }),
  ),
  fc.constantFrom(...torsion).map((point): Edit => (t) => ({ ...t, publicKey: point })),
  fc.constantFrom(...torsion).map((point): Edit => (t) => ({ ...t, signature: Buffer.concat([point, t.signature.subarray(32)]) })),
  fc.constantFrom(...scalarsAtTheEdge).map((s): Edit => (t) => ({ ...t, signature: Buffer.concat([t.signature.subarray(0, 32), s]) })),
  fc.constantFrom(-1, 1).map((delta): Edit => (t) => ({ ...t, signature: delta < 0 ? t.signature.subarray(0, 63) : Buffer.concat([t.signature, Buffer.alloc(1)]) })),
  fc.constantFrom(-1, 1).map((delta): Edit => (t) => ({ ...t, publicKey: delta < 0 ? t.publicKey.subarray(0, 31) : Buffer.concat([t.publicKey, Buffer.alloc(1)]) })),
  fc.tuple(fc.uint8Array({ minLength: 32, maxLength: 32 }), fc.uint8Array({ minLength: 64, maxLength: 64 })).map(
    ([publicKey, signature]): Edit =>
      (t) => ({ ...t, publicKey: Buffer.from(publicKey), signature: Buffer.from(signature) }),
  ),
  fc.constant<Edit>((t) => ({ ...t, publicKey: Buffer.alloc(32, 0xff) })),
);

describe('the signature check under hostile input', () => {
  it(`agrees with the strict oracle, never throws, never accepts a changed triple ${fuzzLabel(RUNS)}`, () => {
    fc.assert(
      fc.property(honest, edit, (triple, change) => {
        const edited = change(triple);
        const node = verifyBytes(edited.publicKey, edited.message, edited.signature);
        const oracle = strictVerdict(edited.publicKey, edited.message, edited.signature);
        expect({ node, oracle: oracle === 'valid' }, oracle).toEqual({ node: oracle === 'valid', oracle: oracle === 'valid' });
        const unchanged = edited.publicKey.equals(triple.publicKey) && edited.message.equals(triple.message) && edited.signature.equals(triple.signature);
        expect(node).toBe(unchanged);
      }),
      fuzzParameters(RUNS),
    );
  }, fuzzTimeout(RUNS, 5));
});
