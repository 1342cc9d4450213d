/**
 * Differential tests: `verifyBytes` (node:crypto behind strict prechecks) against the
 * strict, cofactorless oracle in helpers/noble-oracle.ts. Every input, honest or hostile,
 * must get the same answer from both. Adversarial inputs are built so that, where
 * possible, the verification equation holds and only one strict rule refuses them.
 */
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isAcceptablePoint, isCanonicalScalar, isOnCurve, signBytes, signingKeyFromSeed, verifyBytes } from '../../src/identity/ed25519.js';
import {
  L,
  P,
  Point,
  challenge,
  decodeLenient,
  decodeStrict,
  equationHoldsLeniently,
  forgeSignature,
  nobleSign,
  noblePublicKey,
  nobleVerify,
  numberToBytesLE,
  secretScalar,
  strictVerdict,
  strictVerify,
  torsionPoints,
  type StrictVerdict,
} from '../helpers/noble-oracle.js';

const seedArb = fc.uint8Array({ minLength: 32, maxLength: 32 });
const messageArb = fc.uint8Array({ maxLength: 200 });
const scalarArb = fc.bigInt(1n, L - 1n);

const TORSION = torsionPoints();
const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');

/** Both verifiers agree; returns the shared answer and the oracle's reason. */
function agree(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): { ok: boolean; verdict: StrictVerdict } {
  const verdict = strictVerdict(publicKey, message, signature);
  const node = verifyBytes(publicKey, message, signature);
  expect({ node, oracle: verdict === 'valid' }, `A=${hex(publicKey)} sig=${hex(signature)} (${verdict})`).toEqual({
    node: verdict === 'valid',
    oracle: verdict === 'valid',
  });
  return { ok: node, verdict };
}

function honestSignature(seed: Uint8Array, message: Uint8Array): { publicKey: Buffer; signature: Buffer } {
  const key = signingKeyFromSeed(seed);
  return { publicKey: key.publicKey, signature: signBytes(key, message) };
}

/** Every 32-byte string whose y (sign bit cleared) is at least p: 19 values of y, two signs each. */
function nonCanonicalYEncodings(): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (let y = P; y < 1n << 255n; y++) {
    const bytes = numberToBytesLE(y, 32);
    out.push(bytes, Uint8Array.from(bytes, (b, i) => (i === 31 ? b | 0x80 : b)));
  }
  return out;
}

/** x = 0 with the sign bit set: y = 1 and y = p - 1. */
const NEGATIVE_ZERO_ENCODINGS = [numberToBytesLE(1n | (1n << 255n), 32), numberToBytesLE(P - 1n + (1n << 255n), 32)];

describe('honest signatures', () => {
  it('node and noble derive the same key, produce byte-identical signatures, and all verifiers accept', () => {
    fc.assert(
      fc.property(seedArb, messageArb, (seed, message) => {
        const { publicKey, signature } = honestSignature(seed, message);
        expect(hex(publicKey)).toBe(hex(noblePublicKey(seed)));
        expect(hex(signature)).toBe(hex(nobleSign(seed, message)));
        expect(agree(publicKey, message, signature).ok).toBe(true);
        expect(nobleVerify(publicKey, message, signature)).toBe(true);
      }),
      { numRuns: 200 },
    );
  });

  it('accepts keys and signatures passed as views into larger buffers', () => {
    const { publicKey, signature } = honestSignature(new Uint8Array(32).fill(7), Buffer.from('view'));
    const backing = Buffer.concat([Buffer.from('padding'), publicKey, signature, Buffer.from('view'), Buffer.from('tail')]);
    const keyView = backing.subarray(7, 39);
    const sigView = backing.subarray(39, 103);
    const messageView = backing.subarray(103, 107);
    expect(verifyBytes(keyView, messageView, sigView)).toBe(true);
    expect(strictVerify(keyView, messageView, sigView)).toBe(true);
  });
});

describe('single-bit flips', () => {
  const flip = (bytes: Uint8Array, bit: number): Uint8Array => {
    const out = Uint8Array.from(bytes);
    out[bit >> 3] = out[bit >> 3]! ^ (1 << (bit & 7));
    return out;
  };

  it('any flipped bit of the message, signature or public key is refused by both verifiers', () => {
    fc.assert(
      fc.property(
        seedArb,
        fc.uint8Array({ minLength: 1, maxLength: 100 }),
        fc.constantFrom('message', 'signature', 'publicKey'),
        fc.nat(),
        (seed, message, target, position) => {
          const honest = honestSignature(seed, message);
          let publicKey: Uint8Array = honest.publicKey;
          let signature: Uint8Array = honest.signature;
          let signed: Uint8Array = message;
          if (target === 'message') signed = flip(message, position % (message.length * 8));
          if (target === 'signature') signature = flip(signature, position % 512);
          if (target === 'publicKey') publicKey = flip(publicKey, position % 256);
          expect(agree(publicKey, signed, signature).ok).toBe(false);
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('small-order points', () => {
  it('the eight torsion points are distinct canonical encodings', () => {
    const encodings = new Set(TORSION.map((point) => point.toHex()));
    expect(encodings.size).toBe(8);
    for (const point of TORSION) {
      expect(point.isSmallOrder()).toBe(true);
      expect(decodeStrict(point.toBytes())?.equals(point)).toBe(true);
    }
  });

  it('the hard-coded SMALL_ORDER list in ed25519.ts is exactly the torsion subgroup', () => {
    const source = readFileSync(new URL('../../src/identity/ed25519.ts', import.meta.url), 'utf8');
    const list = /SMALL_ORDER_POINTS[^=]*=\s*\[([^\]]*)\]/.exec(source)?.[1];
    expect(list).toBeDefined();
    const hardCoded = [...(list ?? '').matchAll(/'([0-9a-f]{64})'/g)].map((m) => m[1]);
    expect(hardCoded).toHaveLength(8);
    expect(new Set(hardCoded)).toEqual(new Set(TORSION.map((point) => point.toHex())));
    for (const point of TORSION) expect(isAcceptablePoint(point.toBytes())).toBe(false);
  });

  it('isAcceptablePoint accepts honest keys and mixed-order points, which are not small order', () => {
    fc.assert(
      fc.property(seedArb, fc.integer({ min: 1, max: 7 }), (seed, t) => {
        const publicKey = noblePublicKey(seed);
        expect(isAcceptablePoint(publicKey)).toBe(true);
        const mixed = Point.fromBytes(publicKey).add(TORSION[t]!).toBytes();
        expect(isAcceptablePoint(mixed)).toBe(true);
      }),
      { numRuns: 100 },
    );
  });

  it('each small-order A is refused, even where the equation holds', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 7 }), scalarArb, messageArb, (t, nonce, message) => {
        const publicKey = TORSION[t]!.toBytes();
        const signature = forgeSignature({ scalar: 0n, publicKey, nonce, message });
        expect(agree(publicKey, message, signature)).toEqual({ ok: false, verdict: 'small_order_a' });
        // The identity has discrete log 0: S = r satisfies [S]B - [k]A = R for every message.
        if (t === 0) expect(equationHoldsLeniently(publicKey, message, signature)).toBe(true);
      }),
      { numRuns: 80 },
    );
  });

  it('each small-order R is refused, although cofactored verification accepts it', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 7 }), seedArb, messageArb, (t, seed, message) => {
        const publicKey = noblePublicKey(seed);
        const signature = forgeSignature({ scalar: secretScalar(seed), publicKey, nonce: 0n, rOffset: TORSION[t]!, message });
        expect(hex(signature.subarray(0, 32))).toBe(TORSION[t]!.toHex());
        expect(agree(publicKey, message, signature)).toEqual({ ok: false, verdict: 'small_order_r' });
        expect(nobleVerify(publicKey, message, signature)).toBe(true);
        if (t === 0) expect(equationHoldsLeniently(publicKey, message, signature)).toBe(true);
      }),
      { numRuns: 80 },
    );
  });
});

describe('mixed-order points', () => {
  /** A nonce for which k is (or is not) a multiple of the torsion point's order. */
  function findNonce(want: boolean, scalar: bigint, publicKey: Uint8Array, torsion: Point, message: Uint8Array, start: bigint): Uint8Array {
    for (let nonce = start; nonce < start + 400n; nonce++) {
      // A nonce that is a multiple of L makes R the identity, which is refused as small order.
      if (nonce % L === 0n) continue;
      const signature = forgeSignature({ scalar, publicKey, nonce, message });
      if (equationHoldsLeniently(publicKey, message, signature) === want) return signature;
    }
    throw new Error(`no nonce with equation ${want} for torsion ${torsion.toHex()}`);
  }

  it('A = honest + torsion verifies exactly when [k]T = 0, on both verifiers', () => {
    fc.assert(
      fc.property(seedArb, fc.integer({ min: 1, max: 7 }), messageArb, scalarArb, (seed, t, message, start) => {
        const torsion = TORSION[t]!;
        const scalar = secretScalar(seed);
        const publicKey = Point.fromBytes(noblePublicKey(seed)).add(torsion).toBytes();
        const holds = findNonce(true, scalar, publicKey, torsion, message, start);
        expect(agree(publicKey, message, holds)).toEqual({ ok: true, verdict: 'valid' });
        const fails = findNonce(false, scalar, publicKey, torsion, message, start);
        expect(agree(publicKey, message, fails)).toEqual({ ok: false, verdict: 'equation_fails' });
        expect(nobleVerify(publicKey, message, fails)).toBe(true);
      }),
      { numRuns: 60 },
    );
  });

  it('R = honest + torsion is refused by the cofactorless equation, although cofactored verification accepts it', () => {
    fc.assert(
      fc.property(seedArb, fc.integer({ min: 1, max: 7 }), messageArb, scalarArb, (seed, t, message, nonce) => {
        const publicKey = noblePublicKey(seed);
        const signature = forgeSignature({ scalar: secretScalar(seed), publicKey, nonce, rOffset: TORSION[t]!, message });
        expect(agree(publicKey, message, signature)).toEqual({ ok: false, verdict: 'equation_fails' });
        expect(nobleVerify(publicKey, message, signature)).toBe(true);
      }),
      { numRuns: 60 },
    );
  });
});

describe('non-canonical values', () => {
  it('S + jL is refused while S verifies', () => {
    fc.assert(
      fc.property(seedArb, messageArb, fc.integer({ min: 1, max: 15 }), (seed, message, j) => {
        const { publicKey, signature } = honestSignature(seed, message);
        const s = BigInt('0x' + Buffer.from(signature.subarray(32)).reverse().toString('hex')) + BigInt(j) * L;
        fc.pre(s < 1n << 256n);
        const bumped = Buffer.concat([signature.subarray(0, 32), numberToBytesLE(s, 32)]);
        expect(equationHoldsLeniently(publicKey, message, bumped)).toBe(true);
        expect(agree(publicKey, message, bumped)).toEqual({ ok: false, verdict: 'non_canonical_s' });
      }),
      { numRuns: 100 },
    );
  });

  it('isCanonicalScalar draws the line at L', () => {
    expect(isCanonicalScalar(numberToBytesLE(0n, 32))).toBe(true);
    expect(isCanonicalScalar(numberToBytesLE(L - 1n, 32))).toBe(true);
    expect(isCanonicalScalar(numberToBytesLE(L, 32))).toBe(false);
    expect(isCanonicalScalar(numberToBytesLE(L + 1n, 32))).toBe(false);
    expect(isCanonicalScalar(numberToBytesLE((1n << 256n) - 1n, 32))).toBe(false);
  });

  const encodings = [...nonCanonicalYEncodings(), ...NEGATIVE_ZERO_ENCODINGS];

  it('every encoding with y >= p or a negative zero x is unacceptable, on or off the curve', () => {
    expect(encodings).toHaveLength(40);
    for (const bytes of encodings) {
      expect(decodeStrict(bytes)).toBeUndefined();
      expect(isAcceptablePoint(bytes)).toBe(false);
    }
    // Some of them are curve points (the identity spelled as y = p + 1, for one), so the
    // rule is about spelling, not about whether a point exists.
    expect(encodings.filter((bytes) => decodeLenient(bytes) !== undefined).length).toBeGreaterThan(0);
  });

  it('a non-canonical A or R is refused by both, even where the equation holds', () => {
    const seed = new Uint8Array(32).fill(3);
    const honestKey = noblePublicKey(seed);
    const message = Buffer.from('non-canonical');
    for (const bytes of encodings) {
      // As A: with scalar 0, S = r satisfies the equation whenever A decodes to the identity.
      const asA = forgeSignature({ scalar: 0n, publicKey: bytes, nonce: 12345n, message });
      expect(agree(bytes, message, asA)).toEqual({ ok: false, verdict: 'non_canonical_a' });
      const point = decodeLenient(bytes);
      if (point?.is0()) expect(equationHoldsLeniently(bytes, message, asA)).toBe(true);
      // As R: S = k·a satisfies the equation whenever R decodes to the identity.
      const s = (challenge(bytes, honestKey, message) * secretScalar(seed)) % L;
      const asR = Buffer.concat([bytes, numberToBytesLE(s, 32)]);
      expect(agree(honestKey, message, asR)).toEqual({ ok: false, verdict: 'non_canonical_r' });
      if (point?.is0()) expect(equationHoldsLeniently(honestKey, message, asR)).toBe(true);
    }
  });
});

describe('garbage', () => {
  it('random keys and signatures get the same answer from both', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 32, maxLength: 32 }), fc.uint8Array({ minLength: 64, maxLength: 64 }), messageArb, (publicKey, signature, message) => {
        expect(agree(publicKey, message, signature).ok).toBe(false);
      }),
      { numRuns: 300 },
    );
  });

  it('random signatures under an honest key, and honest signatures under a random key, are refused', () => {
    fc.assert(
      fc.property(seedArb, messageArb, fc.uint8Array({ minLength: 64, maxLength: 64 }), fc.uint8Array({ minLength: 32, maxLength: 32 }), (seed, message, randomSig, randomKey) => {
        const { publicKey, signature } = honestSignature(seed, message);
        expect(agree(publicKey, message, randomSig).ok).toBe(false);
        expect(agree(randomKey, message, signature).ok).toBe(false);
        // A random 64 bytes whose S happens to be canonical still fails the equation.
        const canonicalS = Buffer.concat([randomSig.subarray(0, 32), numberToBytesLE(BigInt('0x' + hex(randomSig.subarray(32))) % L, 32)]);
        expect(agree(publicKey, message, canonicalS).ok).toBe(false);
      }),
      { numRuns: 200 },
    );
  });

  it('wrong lengths are refused without throwing', () => {
    const { publicKey, signature } = honestSignature(new Uint8Array(32).fill(9), Buffer.from('len'));
    const message = Buffer.from('len');
    for (const [key, sig] of [
      [publicKey.subarray(0, 31), signature],
      [Buffer.concat([publicKey, Buffer.of(0)]), signature],
      [publicKey, signature.subarray(0, 63)],
      [publicKey, Buffer.concat([signature, Buffer.of(0)])],
      [Buffer.alloc(0), Buffer.alloc(0)],
    ] as const) {
      expect(verifyBytes(key, message, sig)).toBe(false);
      expect(strictVerdict(key, message, sig)).toBe('bad_length');
    }
  });
});

describe('isOnCurve', () => {
  it('agrees with noble strict decoding on random encodings and accepts every honest key', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 32, maxLength: 32 }), (bytes) => {
        expect(isOnCurve(bytes)).toBe(decodeStrict(bytes) !== undefined || hasNegativeZeroSign(bytes));
      }),
      { numRuns: 500 },
    );
    fc.assert(fc.property(seedArb, (seed) => isOnCurve(signingKeyFromSeed(seed).publicKey)), { numRuns: 50 });
  });
});

/** x = 0 with the sign bit set decodes in y (isOnCurve ignores the sign); noble refuses it. */
function hasNegativeZeroSign(bytes: Uint8Array): boolean {
  return NEGATIVE_ZERO_ENCODINGS.some((e) => hex(e) === hex(bytes));
}
