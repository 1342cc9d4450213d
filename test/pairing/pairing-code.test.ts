/**
 * The pairing verification code (src/pairing/code.ts), checked against the spec computed
 * here on its own: SHA-256 over 'interlink-pair-code-v1\0' || requester key (32 raw
 * bytes) || accepter key (32 raw bytes) || request id (UTF-8); the first 8 bytes as a
 * big-endian unsigned integer, written as 20 zero-padded decimal digits in groups of 5.
 */
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { throwsWith } from '../helpers/assert.js';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { CODE_DOMAIN, verificationCode } from '../../src/pairing/code.js';
import { newIdentity } from '../helpers/fixtures.js';

const FORMAT = /^\d{5}-\d{5}-\d{5}-\d{5}$/;

/** The spec, written out without the module under test. */
function specCode(requester: Uint8Array, accepter: Uint8Array, requestId: string): string {
  const digest = createHash('sha256')
    .update(Buffer.concat([Buffer.from('interlink-pair-code-v1\0', 'utf8'), requester, accepter, Buffer.from(requestId, 'utf8')]))
    .digest();
  let value = 0n;
  for (const byte of digest.subarray(0, 8)) value = value * 256n + BigInt(byte);
  const digits = value.toString(10).padStart(20, '0');
  return [0, 5, 10, 15].map((i) => digits.slice(i, i + 5)).join('-');
}

const alice = newIdentity(1);
const bob = newIdentity(2);
const ID = '0123456789abcdef0123456789abcdef';

describe('verificationCode', () => {
  it('uses the documented domain, with its NUL terminator', () => {
    expect(CODE_DOMAIN).toBe('interlink-pair-code-v1\0');
    expect(Buffer.from(CODE_DOMAIN, 'utf8').at(-1)).toBe(0);
  });

  it('the fixture keys are the Ed25519 public keys of the seeds 0x01.. and 0x02..', () => {
    // Pins the raw inputs of the literal vectors below.
    expect(Buffer.from(alice.signingKey.publicKey).toString('hex')).toBe('8a88e3dd7409f195fd52db2d3cba5d72ca6709bf1d94121bf3748801b40f6f5c');
    expect(Buffer.from(bob.signingKey.publicKey).toString('hex')).toBe('8139770ea87d175f56a35466c34c7ecccb8d8a91b4ee37a25df60f5b8fc9b394');
  });

  it('matches literal vectors computed outside this code base (Python hashlib), including a leading zero', () => {
    expect(verificationCode(alice.key, bob.key, ID)).toBe('12466-07077-95637-98294');
    expect(verificationCode(bob.key, alice.key, ID)).toBe('07313-46713-03903-74542');
    expect(verificationCode(alice.key, bob.key, '')).toBe('10479-20874-58585-94206');
    expect(verificationCode(bob.key, alice.key, '')).toBe('02662-31824-05874-87788');
  });

  it('matches the spec computed here for the fixture keys', () => {
    expect(verificationCode(alice.key, bob.key, ID)).toBe(specCode(alice.signingKey.publicKey, bob.signingKey.publicKey, ID));
    expect(specCode(alice.signingKey.publicKey, bob.signingKey.publicKey, ID)).toBe('12466-07077-95637-98294');
  });

  it('is deterministic and has the shown format', () => {
    const first = verificationCode(alice.key, bob.key, ID);
    expect(first).toMatch(FORMAT);
    expect(verificationCode(alice.key, bob.key, ID)).toBe(first);
  });

  it('depends on the order of the keys', () => {
    expect(verificationCode(alice.key, bob.key, ID)).not.toBe(verificationCode(bob.key, alice.key, ID));
  });

  it('hashes the request id as UTF-8', () => {
    for (const id of ['é', 'ñ日本', '\u{1F600}', 'a\0b']) {
      expect(verificationCode(alice.key, bob.key, id)).toBe(specCode(alice.signingKey.publicKey, bob.signingKey.publicKey, id));
    }
    // U+00E9 as UTF-8 is c3 a9; as latin1 it would be e9.
    expect(verificationCode(alice.key, bob.key, 'é')).not.toBe(specCode(alice.signingKey.publicKey, bob.signingKey.publicKey, '\u00c3\u00a9'));
  });

  it('agrees with the spec over random keys and ids', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 255 }), fc.integer({ min: 0, max: 255 }), fc.string({ unit: 'binary', maxLength: 64 }), (s1, s2, id) => {
        const requester = newIdentity(s1);
        const accepter = newIdentity(s2);
        const code = verificationCode(requester.key, accepter.key, id);
        expect(code).toMatch(FORMAT);
        expect(code).toBe(specCode(requester.signingKey.publicKey, accepter.signingKey.publicKey, id));
      }),
      { numRuns: 300 },
    );
  });

  it('gives distinct codes for distinct inputs (any key, either order, or the id changed)', () => {
    const identities = Array.from({ length: 256 }, (_, seed) => newIdentity(seed));
    fc.assert(
      fc.property(
        fc.uniqueArray(
          fc.tuple(fc.integer({ min: 0, max: 255 }), fc.integer({ min: 0, max: 255 }), fc.stringMatching(/^[0-9a-f]{0,32}$/)),
          { minLength: 2, maxLength: 40, selector: ([a, b, id]) => `${a} ${b} ${id}` },
        ),
        (inputs) => {
          const codes = inputs.map(([a, b, id]) => verificationCode(identities[a]!.key, identities[b]!.key, id));
          expect(new Set(codes).size).toBe(inputs.length);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('changes when any single input changes', () => {
    const carol = newIdentity(3);
    const base = verificationCode(alice.key, bob.key, ID);
    expect(verificationCode(carol.key, bob.key, ID)).not.toBe(base);
    expect(verificationCode(alice.key, carol.key, ID)).not.toBe(base);
    expect(verificationCode(alice.key, bob.key, ID.slice(0, -1) + 'e')).not.toBe(base);
    expect(verificationCode(alice.key, bob.key, ID + '0')).not.toBe(base);
    expect(verificationCode(alice.key, bob.key, '')).not.toBe(base);
  });

  it('refuses keys that are not usable Ed25519 public keys, naming which one', () => {
    const zeros = encodeBase64url(new Uint8Array(32)); // a small-order point
    const identityPoint = encodeBase64url(Uint8Array.from({ length: 32 }, (_, i) => (i === 0 ? 1 : 0)));
    const bad = ['', 'not a key', alice.key.slice(1), `${alice.key}A`, `${alice.key.slice(0, -1)}=`, alice.key.replace(/.$/, '+'), zeros, identityPoint];
    for (const key of bad) {
      for (const [requester, accepter, what] of [
        [key, bob.key, 'requester key'],
        [alice.key, key, 'accepter key'],
      ] as const) {
        const err = throwsWith(() => verificationCode(requester, accepter, ID), 'bad_key', JSON.stringify({ key, what }));
        expect(err.message).toContain(what);
      }
    }
  });
});
