/**
 * Ed25519 with strict verification that behaves the same on every Node >= 20.
 *
 * node:crypto (OpenSSL) does the curve arithmetic: it is an order of magnitude faster
 * than pure-JS implementations. OpenSSL's acceptance rules for edge cases changed across
 * Node releases, so the strict rules are checked here first, in constant-size byte
 * comparisons:
 *   - A (public key) and R (first half of the signature) are canonical encodings (y < p,
 *     and no negative zero x);
 *   - neither A nor R is one of the eight small-order points;
 *   - S (second half) is canonical, S < L.
 * Together with OpenSSL's cofactorless equation this matches ed25519-dalek `verify_strict`.
 * The test suite checks it against a verifier built from @noble/ed25519.
 */
import { createPrivateKey, createPublicKey, randomBytes, sign as nodeSign, verify as nodeVerify, type KeyObject } from 'node:crypto';

export const PUBLIC_KEY_BYTES = 32;
export const SEED_BYTES = 32;
export const SIGNATURE_BYTES = 64;

const PKCS8_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex');
const SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');

/** The group order L, little-endian. */
const L_LE = Buffer.from('edd3f55c1a631258d69cf7a2def9de1400000000000000000000000000000010', 'hex');

/** Canonical encodings of the eight points of order dividing 8. */
const SMALL_ORDER_POINTS: readonly string[] = [
  '0000000000000000000000000000000000000000000000000000000000000000',
  '0000000000000000000000000000000000000000000000000000000000000080',
  '0100000000000000000000000000000000000000000000000000000000000000',
  '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05',
  '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85',
  'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a',
  'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa',
  'ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
];
const SMALL_ORDER = new Set(SMALL_ORDER_POINTS);

/** y < p = 2^255 - 19, reading the 255-bit little-endian y with the sign bit cleared. */
function isCanonicalY(point: Uint8Array): boolean {
  if ((point[31]! & 0x7f) !== 0x7f) return true;
  for (let i = 30; i >= 1; i--) if (point[i] !== 0xff) return true;
  return point[0]! < 0xed;
}

/** x = 0 only for y = 1 and y = p - 1; there the sign bit must be clear. */
function hasNegativeZeroX(point: Uint8Array): boolean {
  if ((point[31]! & 0x80) === 0) return false;
  const lowBytes = Buffer.from(point);
  lowBytes[31] = lowBytes[31]! & 0x7f;
  const hex = lowBytes.toString('hex');
  return hex === SMALL_ORDER_POINTS[2] || hex === SMALL_ORDER_POINTS[7];
}

/** Canonical encoding of a point that is not of small order (the point may still be off the curve). */
export function isAcceptablePoint(point: Uint8Array): boolean {
  if (point.length !== PUBLIC_KEY_BYTES) return false;
  if (!isCanonicalY(point) || hasNegativeZeroX(point)) return false;
  return !SMALL_ORDER.has(Buffer.from(point.buffer, point.byteOffset, point.byteLength).toString('hex'));
}

/** S < L, comparing little-endian bytes from the most significant end. */
export function isCanonicalScalar(s: Uint8Array): boolean {
  for (let i = 31; i >= 0; i--) {
    if (s[i]! < L_LE[i]!) return true;
    if (s[i]! > L_LE[i]!) return false;
  }
  return false;
}

const P = 2n ** 255n - 19n;
const D = (-121665n * modPow(121666n, P - 2n)) % P;

function mod(a: bigint): bigint {
  const r = a % P;
  return r < 0n ? r + P : r;
}

function modPow(base: bigint, exponent: bigint): bigint {
  let result = 1n;
  let b = ((base % P) + P) % P;
  for (let e = exponent; e > 0n; e >>= 1n) {
    if (e & 1n) result = (result * b) % P;
    b = (b * b) % P;
  }
  return result;
}

/**
 * Whether the encoding decodes to a curve point: x^2 = (y^2 - 1) / (d y^2 + 1) must have a
 * root. Verification never needs this (OpenSSL just fails), but a key people add to their
 * peers should be one that can ever verify. BigInt arithmetic: for configuration, not for
 * the verification path.
 */
export function isOnCurve(point: Uint8Array): boolean {
  if (point.length !== PUBLIC_KEY_BYTES || !isCanonicalY(point)) return false;
  const bytes = Buffer.from(point);
  bytes[31] = bytes[31]! & 0x7f;
  const y = BigInt('0x' + Buffer.from(bytes).reverse().toString('hex'));
  const y2 = mod(y * y);
  const x2 = mod((y2 - 1n) * modPow(mod(D * y2 + 1n), P - 2n));
  return x2 === 0n || modPow(x2, (P - 1n) / 2n) === 1n;
}

const PUBLIC_KEY_CACHE_LIMIT = 4096;
let publicKeyCacheLimit = PUBLIC_KEY_CACHE_LIMIT;
const publicKeyCache = new Map<string, KeyObject>();

/**
 * Keeps at least `keys` imported public keys (never fewer than the default 4,096): for a
 * relay, one per connection it may hold. Every session renews its announcement every
 * 30 s, so a relay holding more sessions than the cache went through every key in turn
 * and imported each again for each verification — an import costs more than the
 * verification (a relay of 18,000 sessions spent a fifth of its CPU importing keys). A
 * key kept weighs about 0.8 KiB.
 */
export function keepPublicKeys(keys: number): void {
  publicKeyCacheLimit = Math.max(PUBLIC_KEY_CACHE_LIMIT, Math.floor(keys));
}

/** Importing a raw key costs more than a verification, so keys are imported once and cached. */
function publicKeyObject(publicKey: Uint8Array): KeyObject {
  const id = Buffer.from(publicKey.buffer, publicKey.byteOffset, publicKey.byteLength).toString('base64url');
  let key = publicKeyCache.get(id);
  if (key === undefined) {
    key = createPublicKey({ key: Buffer.concat([SPKI_PREFIX, publicKey]), format: 'der', type: 'spki' });
    if (publicKeyCache.size >= publicKeyCacheLimit) {
      const oldest = publicKeyCache.keys().next().value;
      if (oldest !== undefined) publicKeyCache.delete(oldest);
    }
    publicKeyCache.set(id, key);
  }
  return key;
}

export interface SigningKey {
  readonly seed: Buffer;
  readonly publicKey: Buffer;
  readonly privateKeyObject: KeyObject;
}

export function signingKeyFromSeed(seed: Uint8Array): SigningKey {
  if (seed.length !== SEED_BYTES) throw new RangeError(`an Ed25519 seed is ${SEED_BYTES} bytes`);
  const privateKeyObject = createPrivateKey({ key: Buffer.concat([PKCS8_PREFIX, seed]), format: 'der', type: 'pkcs8' });
  const spki = createPublicKey(privateKeyObject).export({ format: 'der', type: 'spki' });
  return { seed: Buffer.from(seed), publicKey: spki.subarray(SPKI_PREFIX.length), privateKeyObject };
}

export function generateSigningKey(): SigningKey {
  return signingKeyFromSeed(randomBytes(SEED_BYTES));
}

export function signBytes(key: SigningKey, message: Uint8Array): Buffer {
  return nodeSign(null, message, key.privateKeyObject);
}

/** Strict verification; never throws for malformed input, it just says no. */
export function verifyBytes(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean {
  if (signature.length !== SIGNATURE_BYTES || !isAcceptablePoint(publicKey)) return false;
  if (!isAcceptablePoint(signature.subarray(0, 32)) || !isCanonicalScalar(signature.subarray(32))) return false;
  try {
    return nodeVerify(null, message, publicKeyObject(publicKey), signature);
  } catch {
    // Not a point on the curve: OpenSSL refuses to import it.
    return false;
  }
}
