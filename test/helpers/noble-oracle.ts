/**
 * A strict, cofactorless Ed25519 verifier built from @noble/ed25519, used as the oracle
 * for `verifyBytes` (node:crypto plus prechecks). It follows ed25519-dalek `verify_strict`:
 * canonical A and R, neither of small order, S < L, and [S]B - [k]A encoding to exactly
 * the bytes of R. It is slow and simple on purpose: every rule is one line that can be
 * read against the protocol document.
 *
 * The forging helpers build signatures from raw scalars so tests can construct inputs
 * that satisfy the verification equation yet break exactly one strict rule.
 */
import * as ed from '@noble/ed25519';
import { sha512 } from '@noble/hashes/sha2.js';

ed.hashes.sha512 = sha512;

export const Point = ed.Point;
export type Point = ed.Point;

/** The group order L and the field prime p. */
export const L = ed.Point.CURVE().n;
export const P = ed.Point.CURVE().p;

export type StrictVerdict =
  | 'valid'
  | 'bad_length'
  | 'non_canonical_a'
  | 'non_canonical_r'
  | 'small_order_a'
  | 'small_order_r'
  | 'non_canonical_s'
  | 'equation_fails';

export function bytesToNumberLE(bytes: Uint8Array): bigint {
  let n = 0n;
  for (let i = bytes.length - 1; i >= 0; i--) n = (n << 8n) | BigInt(bytes[i]!);
  return n;
}

export function numberToBytesLE(n: bigint, length: number): Uint8Array {
  const out = new Uint8Array(length);
  let rest = n;
  for (let i = 0; i < length; i++) {
    out[i] = Number(rest & 0xffn);
    rest >>= 8n;
  }
  if (rest !== 0n) throw new RangeError(`${n} does not fit in ${length} bytes`);
  return out;
}

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((byte, i) => byte === b[i]);
}

/** Strict decoding (y < p, no negative zero x, on the curve), or undefined. */
export function decodeStrict(bytes: Uint8Array): Point | undefined {
  try {
    return ed.Point.fromBytes(bytes, false);
  } catch {
    return undefined;
  }
}

/** Lenient (ZIP-215) decoding: accepts any y below 2^255 and negative zero. */
export function decodeLenient(bytes: Uint8Array): Point | undefined {
  try {
    return ed.Point.fromBytes(bytes, true);
  } catch {
    return undefined;
  }
}

/** k = SHA-512(R || A || M) mod L, over the bytes exactly as they appear on the wire. */
export function challenge(rBytes: Uint8Array, publicKey: Uint8Array, message: Uint8Array): bigint {
  return bytesToNumberLE(sha512(ed.etc.concatBytes(rBytes, publicKey, message))) % L;
}

/** Why a signature is refused under the strict rules, checked in a fixed order. */
export function strictVerdict(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): StrictVerdict {
  if (publicKey.length !== 32 || signature.length !== 64) return 'bad_length';
  const rBytes = signature.subarray(0, 32);
  const a = decodeStrict(publicKey);
  if (a === undefined) return 'non_canonical_a';
  const r = decodeStrict(rBytes);
  if (r === undefined) return 'non_canonical_r';
  if (a.isSmallOrder()) return 'small_order_a';
  if (r.isSmallOrder()) return 'small_order_r';
  const s = bytesToNumberLE(signature.subarray(32));
  if (s >= L) return 'non_canonical_s';
  const k = challenge(rBytes, publicKey, message);
  const check = ed.Point.BASE.multiply(s, false).subtract(a.multiply(k, false));
  return equalBytes(check.toBytes(), rBytes) ? 'valid' : 'equation_fails';
}

export function strictVerify(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean {
  return strictVerdict(publicKey, message, signature) === 'valid';
}

/**
 * Whether [S mod L]B - [k]A = R as points, with lenient decoding and no small-order or
 * range checks: tells a test that an input fails only because of a strict rule.
 */
export function equationHoldsLeniently(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean {
  const rBytes = signature.subarray(0, 32);
  const a = decodeLenient(publicKey);
  const r = decodeLenient(rBytes);
  if (a === undefined || r === undefined) return false;
  const s = bytesToNumberLE(signature.subarray(32)) % L;
  const k = challenge(rBytes, publicKey, message);
  return ed.Point.BASE.multiply(s, false).subtract(a.multiply(k, false)).equals(r);
}

/** noble's own verifier in its strict (non-ZIP-215, cofactored) mode. */
export function nobleVerify(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean {
  return ed.verify(signature, message, publicKey, { zip215: false });
}

export function nobleSign(seed: Uint8Array, message: Uint8Array): Uint8Array {
  return ed.sign(message, seed);
}

export function noblePublicKey(seed: Uint8Array): Uint8Array {
  return ed.getPublicKey(seed);
}

/** The clamped secret scalar of a seed, reduced mod L. */
export function secretScalar(seed: Uint8Array): bigint {
  return ed.utils.getExtendedPublicKey(seed).scalar % L;
}

/** [L]Q: the torsion component of Q. */
function torsionComponent(q: Point): Point {
  return q.multiply(L - 1n, false).add(q);
}

/**
 * The eight points of order dividing 8, as [i]T for a point T of order 8 found by
 * projecting curve points onto the torsion subgroup.
 */
export function torsionPoints(): Point[] {
  for (let y = 2n; y < 1000n; y++) {
    const q = decodeStrict(numberToBytesLE(y, 32));
    if (q === undefined) continue;
    const t = torsionComponent(q);
    if (t.double().double().is0()) continue;
    const points = [ed.Point.ZERO];
    for (let i = 1; i < 8; i++) points.push(points[i - 1]!.add(t));
    return points;
  }
  throw new Error('no point of order 8 found');
}

export interface ForgeInput {
  /** The signer's secret scalar as used in S = r + k·a (0 for a key whose log is unknown). */
  scalar: bigint;
  /** The public key bytes hashed into k and placed in `from`. */
  publicKey: Uint8Array;
  /** r in R = [r]B + rOffset. */
  nonce: bigint;
  /** Added to [r]B, to make R mixed or small order. */
  rOffset?: Point;
  message: Uint8Array;
  /** Added to S after reduction, to make it non-canonical (S + L). */
  sOffset?: bigint;
}

/** R || S with S = r + k·a mod L, where k is computed over the given bytes. */
export function forgeSignature(input: ForgeInput): Uint8Array {
  const rPoint = ed.Point.BASE.multiply(input.nonce % L, false).add(input.rOffset ?? ed.Point.ZERO);
  const rBytes = rPoint.toBytes();
  const k = challenge(rBytes, input.publicKey, input.message);
  const s = (input.nonce + k * input.scalar) % L + (input.sOffset ?? 0n);
  return ed.etc.concatBytes(rBytes, numberToBytesLE(s, 32));
}
