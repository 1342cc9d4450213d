/**
 * Sealed bodies (src/envelope/seal.ts): the X25519 keys derived from Ed25519 identities
 * agree with node:crypto's own derivation, a body opens only for the two ends of its
 * direction and only under its own header, any changed byte is refused, the plaintext
 * reader turns any bytes into a body or a SealError, and sizes fall into Padmé classes.
 */
import { createPrivateKey, createPublicKey, diffieHellman } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  MIN_PADDED_BYTES,
  NONCE_BYTES,
  SealError,
  TAG_BYTES,
  bodyBytes,
  directionKey,
  montgomeryPublicKey,
  montgomerySecretKey,
  openBody,
  paddedLength,
  parseBodyBytes,
  sealBody,
  type SealHeader,
  type SealedBody,
} from '../../src/envelope/seal.js';
import { generateSigningKey, signingKeyFromSeed } from '../../src/identity/ed25519.js';

const X25519_PKCS8 = Buffer.from('302e020100300506032b656e04220420', 'hex');
const X25519_SPKI = Buffer.from('302a300506032b656e032100', 'hex');

const alice = generateSigningKey();
const bob = generateSigningKey();
const carol = generateSigningKey();
const [A, B, C] = [alice, bob, carol].map((k) => k.publicKey.toString('base64url')) as [string, string, string];
const HEADER: SealHeader = { to_session: 'main', ts: 1_767_225_600_000, kind: 'message', msg_id: '000102030405060708090a0b0c0d0e0f' };

const bodyArb: fc.Arbitrary<SealedBody> = fc.record(
  {
    text: fc.string({ unit: 'grapheme', maxLength: 400 }),
    status: fc.constantFrom('update', 'result', 'failed'),
    task_id: fc.string({ minLength: 1, maxLength: 40 }),
    in_reply_to: fc.constant('f0e0d0c0b0a090807060504030201000'),
    reply_session: fc.string({ minLength: 1, maxLength: 20 }),
  },
  { requiredKeys: ['text'] },
);

describe('keys', () => {
  it('maps an Ed25519 public key to the X25519 public key of the same secret scalar', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 32, maxLength: 32 }), (seed) => {
        const key = signingKeyFromSeed(seed);
        const fromScalar = createPublicKey(createPrivateKey({ key: Buffer.concat([X25519_PKCS8, montgomerySecretKey(seed)]), format: 'der', type: 'pkcs8' }))
          .export({ format: 'der', type: 'spki' })
          .subarray(X25519_SPKI.length);
        expect(montgomeryPublicKey(key.publicKey).equals(fromScalar)).toBe(true);
      }),
      { numRuns: 60 },
    );
  });

  it('gives both ends of a direction the same key, and each direction its own', () => {
    const ab = directionKey(alice, A, B);
    expect(directionKey(bob, A, B).equals(ab)).toBe(true);
    expect(directionKey(alice, B, A).equals(ab)).toBe(false);
    expect(directionKey(carol, A, C).equals(ab)).toBe(false);
    // The raw X25519 secret is symmetric; the direction key is not, so it is not just that.
    const shared = diffieHellman({
      privateKey: createPrivateKey({ key: Buffer.concat([X25519_PKCS8, montgomerySecretKey(alice.seed)]), format: 'der', type: 'pkcs8' }),
      publicKey: createPublicKey({ key: Buffer.concat([X25519_SPKI, montgomeryPublicKey(bob.publicKey)]), format: 'der', type: 'spki' }),
    });
    expect(ab.equals(shared)).toBe(false);
  });

  it('refuses keys that are not usable points', () => {
    expect(() => montgomeryPublicKey(Buffer.concat([Buffer.of(1), Buffer.alloc(31)]))).toThrow(RangeError);
    expect(() => montgomeryPublicKey(Buffer.alloc(31))).toThrow(RangeError);
    expect(() => montgomeryPublicKey(Buffer.alloc(32, 0xff))).toThrow(RangeError);
  });
});

describe('seal and open', () => {
  it('round-trips any body, for the recipient and for the sender, and for oneself', () => {
    fc.assert(
      fc.property(bodyArb, (body) => {
        const sealed = sealBody(alice, B, HEADER, body);
        expect(openBody(bob, A, B, HEADER, sealed)).toEqual(body);
        expect(openBody(alice, A, B, HEADER, sealed)).toEqual(body);
        const toSelf = sealBody(alice, A, HEADER, body);
        expect(openBody(alice, A, A, HEADER, toSelf)).toEqual(body);
      }),
      { numRuns: 150 },
    );
  });

  it('never uses a nonce twice for the same body', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 600; i++) seen.add(sealBody(alice, B, HEADER, { text: 'same' }).subarray(0, NONCE_BYTES).toString('hex'));
    expect(seen.size).toBe(600);
  });

  it('refuses any changed byte, another header, another recipient and another sender', () => {
    const body = { text: 'the build is green', task_id: 't-1' };
    const sealed = sealBody(alice, B, HEADER, body);
    fc.assert(
      fc.property(fc.nat({ max: sealed.length - 1 }), fc.integer({ min: 1, max: 255 }), (at, xor) => {
        const changed = Buffer.from(sealed);
        changed[at] = changed[at]! ^ xor;
        expect(() => openBody(bob, A, B, HEADER, changed)).toThrow(SealError);
      }),
      { numRuns: 200 },
    );
    for (const header of [{ ...HEADER, to_session: 'other' }, { ...HEADER, ts: HEADER.ts + 1 }, { ...HEADER, kind: 'pair_request' }, { ...HEADER, msg_id: 'f'.repeat(32) }]) {
      expect(() => openBody(bob, A, B, header, sealed)).toThrow(SealError);
    }
    // Carol cannot open it, and bob cannot be fooled into reading it as carol's.
    expect(() => openBody(carol, A, C, HEADER, sealed)).toThrow(SealError);
    expect(() => openBody(bob, C, B, HEADER, sealed)).toThrow(SealError);
    // Nor as one sent in the other direction.
    expect(() => openBody(bob, B, A, HEADER, sealed)).toThrow(SealError);
    expect(() => openBody(bob, A, B, HEADER, sealed.subarray(0, NONCE_BYTES + TAG_BYTES - 1))).toThrow(SealError);
  });
});

describe('the plaintext', () => {
  it('reads any bytes as a body or refuses them with a SealError', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 600 }), (bytes) => {
        try {
          const body = parseBodyBytes(Buffer.from(bytes));
          expect(typeof body.text).toBe('string');
        } catch (err) {
          expect(err).toBeInstanceOf(SealError);
        }
      }),
      { numRuns: 2_000 },
    );
  });

  it('refuses truncated fields, invalid UTF-8 and padding that is not zero', () => {
    const good = bodyBytes({ text: 'hi', status: 'result' });
    expect(parseBodyBytes(good)).toEqual({ text: 'hi', status: 'result' });
    const nonZero = Buffer.from(good);
    nonZero[nonZero.length - 1] = 1;
    expect(() => parseBodyBytes(nonZero)).toThrow(/padding/);
    const badUtf8 = Buffer.from(good);
    badUtf8[4] = 0xff;
    expect(() => parseBodyBytes(badUtf8)).toThrow(/not UTF-8/);
    const tooLong = Buffer.from(good);
    tooLong.writeUInt32LE(10_000, 0);
    expect(() => parseBodyBytes(tooLong)).toThrow(/ends inside text/);
    expect(() => parseBodyBytes(Buffer.alloc(3))).toThrow(/ends inside the length/);
  });

  it('pads to Padmé size classes: at least 256 bytes, never more than 12% over, never shorter', () => {
    expect(paddedLength(0)).toBe(MIN_PADDED_BYTES);
    expect(paddedLength(256)).toBe(256);
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 400_000 }), (length) => {
        const padded = paddedLength(length);
        expect(padded).toBeGreaterThanOrEqual(Math.max(length, MIN_PADDED_BYTES));
        if (length >= MIN_PADDED_BYTES) expect(padded).toBeLessThanOrEqual(length * 1.125);
        expect(paddedLength(padded)).toBe(padded);
        expect(paddedLength(length + 1)).toBeGreaterThanOrEqual(padded);
      }),
      { numRuns: 2_000 },
    );
    // Many lengths, few sizes: a relay learns the class, not the length.
    const classes = new Set(Array.from({ length: 4_000 }, (_, i) => paddedLength(i + 1)));
    expect(classes.size).toBeLessThan(200);
  });
});
