/**
 * Sealed bodies (envelope version 4, docs/PROTOCOL.md "Sealing"): what a message says is
 * encrypted to its recipient, so a relay sees only who, to which session, when, and a
 * size class.
 *
 * Keys. Each side's X25519 key is derived from its Ed25519 identity (RFC 7748 / RFC 8032):
 * the secret scalar is the clamped first half of SHA-512(seed), exactly the scalar the
 * Ed25519 key signs with, and the public key is the Montgomery form u = (1 + y) / (1 - y)
 * of the Ed25519 point. So anyone who holds a peer's Ed25519 key can seal to it: no second
 * key to publish, pin or lose, and a first message to a peer that has been offline for a
 * week needs nothing from any roster.
 *
 * Per direction (sender → recipient) one 32-byte key:
 *   HKDF-SHA256(ikm = X25519(sender, recipient), salt = "interlink-seal-v4",
 *               info = sender's Ed25519 key (32) || recipient's Ed25519 key (32))
 * computed once per peer and cached: a Diffie-Hellman costs tens of microseconds, the
 * cipher on a small body a few.
 *
 * Cipher. ChaCha20-Poly1305 (RFC 8439, node:crypto) with a random 12-byte nonce. The
 * associated data is the envelope's clear header that the key does not already bind:
 * target session, ts, kind and msg_id. The plaintext is the body fields, length-prefixed
 * as in the signed bytes, then zero bytes up to a size class (Padmé: at most 12% more,
 * at least 256 bytes), so a relay learns the size only to within that class.
 *
 * Sealed bytes: nonce (12) || ciphertext || tag (16), base64url in the envelope's `sealed`.
 */
import { createCipheriv, createDecipheriv, createHash, createPrivateKey, createPublicKey, diffieHellman, hkdfSync, randomFillSync, type KeyObject } from 'node:crypto';
import { FieldWriter, prefixedSize } from './bytes.js';
import { PUBLIC_KEY_BYTES, type SigningKey } from '../identity/ed25519.js';

export const SEAL_SALT = 'interlink-seal-v4';
export const NONCE_BYTES = 12;
export const TAG_BYTES = 16;
/** The smallest size class: every sealed body is at least this long before the tag. */
export const MIN_PADDED_BYTES = 256;

const P = 2n ** 255n - 19n;
const X25519_PKCS8_PREFIX = Buffer.from('302e020100300506032b656e04220420', 'hex');
const X25519_SPKI_PREFIX = Buffer.from('302a300506032b656e032100', 'hex');

/** The header the AEAD authenticates besides the keys: what a relay could otherwise swap. */
export interface SealHeader {
  to_session: string;
  ts: number;
  kind: string;
  msg_id: string;
}

/** An envelope's seal header, copied out of it: only these four fields, nothing else it carries. */
export function sealHeaderOf(envelope: SealHeader): SealHeader {
  return { to_session: envelope.to_session, ts: envelope.ts, kind: envelope.kind, msg_id: envelope.msg_id };
}

/** The body fields a sealed envelope carries. `reply_session` is the session of `reply_to`. */
export interface SealedBody {
  text: string;
  status?: string;
  task_id?: string;
  in_reply_to?: string;
  reply_session?: string;
  /** The group id of a message sent to several recipients (envelope.ts). */
  group?: string;
}

/**
 * The body's fields in order. `group` came later: it is written only when present, so a
 * body without one is byte for byte what earlier versions wrote and read; an earlier
 * receiver refuses a body with one (`bad_seal`: its padding is not zero).
 */
const BODY_FIELDS = ['text', 'status', 'task_id', 'in_reply_to', 'the reply session', 'group'] as const;
const REQUIRED_BODY_FIELDS = 5;

/**
 * The Padmé size class of `length` (Nikitin et al., "Reducing Metadata Leakage from
 * Encrypted Files and Communication with PURBs", 2019): keep the top ⌊log2 E⌋ + 1 bits of
 * the length, E = ⌊log2 length⌋, and round the rest up. Overhead at most 12%, and a length
 * of E bits leaks O(log log) bits.
 */
export function paddedLength(length: number): number {
  const l = Math.max(length, MIN_PADDED_BYTES);
  const e = Math.floor(Math.log2(l));
  const s = Math.floor(Math.log2(e)) + 1;
  const lastBits = e - s;
  const mask = 2 ** lastBits - 1;
  return Math.ceil(l / (mask + 1)) * (mask + 1);
}

function bigFromLe(bytes: Uint8Array): bigint {
  return BigInt('0x' + (Buffer.from(bytes).reverse().toString('hex') || '0'));
}

function leFromBig(value: bigint): Buffer {
  return Buffer.from(value.toString(16).padStart(64, '0'), 'hex').reverse();
}

/** Modular inverse by the extended Euclidean algorithm: ten times faster than a power, and keys are public. */
function inverse(a: bigint): bigint {
  let [r0, r1] = [((a % P) + P) % P, P];
  let [s0, s1] = [1n, 0n];
  while (r1 !== 0n) {
    const q = r0 / r1;
    [r0, r1] = [r1, r0 - q * r1];
    [s0, s1] = [s1, s0 - q * s1];
  }
  return ((s0 % P) + P) % P;
}

/**
 * The X25519 public key of an Ed25519 public key: u = (1 + y) / (1 - y) mod p. Callers pass
 * keys that verify signatures (canonical, not of small order), so y ≠ 1 and the division
 * is defined; anything else throws.
 */
export function montgomeryPublicKey(edwards: Uint8Array): Buffer {
  if (edwards.length !== PUBLIC_KEY_BYTES) throw new RangeError('an Ed25519 public key is 32 bytes');
  const bytes = Buffer.from(edwards);
  bytes[31] = bytes[31]! & 0x7f;
  const y = bigFromLe(bytes);
  if (y >= P || y === 1n) throw new RangeError('not a usable Ed25519 public key');
  return leFromBig((((1n + y) % P) * inverse(1n - y)) % P);
}

/** The X25519 secret scalar of an Ed25519 seed: the clamped first half of SHA-512(seed). */
export function montgomerySecretKey(seed: Uint8Array): Buffer {
  const scalar = createHash('sha512').update(seed).digest().subarray(0, 32);
  scalar[0] = scalar[0]! & 248;
  scalar[31] = (scalar[31]! & 127) | 64;
  return scalar;
}

const mySecrets = new WeakMap<SigningKey, KeyObject>();

function secretKeyObject(key: SigningKey): KeyObject {
  let secret = mySecrets.get(key);
  if (secret === undefined) {
    secret = createPrivateKey({ key: Buffer.concat([X25519_PKCS8_PREFIX, montgomerySecretKey(key.seed)]), format: 'der', type: 'pkcs8' });
    mySecrets.set(key, secret);
  }
  return secret;
}

const DIRECTION_KEY_LIMIT = 4096;
/** `<my key> <from> <to>` (base64url) → the direction's cipher key. Bounded: strangers' keys are free to make. */
const directionKeys = new Map<string, Buffer>();
const myKeyTexts = new WeakMap<SigningKey, string>();

/** `me`'s public key in base64url, as envelopes carry it (encoded once per key). */
function keyText(me: SigningKey): string {
  let mine = myKeyTexts.get(me);
  if (mine === undefined) {
    mine = me.publicKey.toString('base64url');
    myKeyTexts.set(me, mine);
  }
  return mine;
}

/**
 * The key for messages from `from` to `to` (base64url Ed25519 keys, as envelopes carry
 * them), one of which is `me`. Both ends compute the same X25519 secret; the HKDF info
 * orders the two keys as sender, recipient, so each direction of a pair has its own key.
 */
export function directionKey(me: SigningKey, from: string, to: string): Buffer {
  const mine = keyText(me);
  const id = `${mine} ${from} ${to}`;
  const cached = directionKeys.get(id);
  if (cached !== undefined) return cached;
  const fromBytes = Buffer.from(from, 'base64url');
  const toBytes = Buffer.from(to, 'base64url');
  const other = from === mine ? toBytes : fromBytes;
  const publicKey = createPublicKey({ key: Buffer.concat([X25519_SPKI_PREFIX, montgomeryPublicKey(other)]), format: 'der', type: 'spki' });
  // node:crypto refuses an all-zero shared secret (a small-order point), so that throws.
  const shared = diffieHellman({ privateKey: secretKeyObject(me), publicKey });
  const key = Buffer.from(hkdfSync('sha256', shared, SEAL_SALT, Buffer.concat([fromBytes, toBytes]), 32));
  if (directionKeys.size >= DIRECTION_KEY_LIMIT) directionKeys.delete(directionKeys.keys().next().value!);
  directionKeys.set(id, key);
  return key;
}

export function associatedData(header: SealHeader): Buffer {
  const aad = Buffer.allocUnsafe(prefixedSize(header.to_session) + 8 + prefixedSize(header.kind) + prefixedSize(header.msg_id));
  new FieldWriter(aad).text(header.to_session).u64(header.ts).text(header.kind).text(header.msg_id);
  return aad;
}

/** The plaintext: the body fields length-prefixed in signed-bytes order, then zeros to the size class. */
export function bodyBytes(body: SealedBody, allocate?: (size: number) => Buffer): Buffer {
  const fields = [body.text, body.status, body.task_id, body.in_reply_to, body.reply_session];
  return paddedFields(body.group === undefined ? fields : [...fields, body.group], allocate);
}

const nonces = Buffer.alloc(NONCE_BYTES * 256);
let nextNonce = nonces.length;

/**
 * A fresh random nonce; drawn from the CSPRNG 256 at a time, each used once. A view into
 * the pool, not a copy: valid until 255 more are drawn, so it is used (copied into the
 * sealed bytes) within the one synchronous call that drew it.
 */
function freshNonce(): Buffer {
  if (nextNonce >= nonces.length) {
    randomFillSync(nonces);
    nextNonce = 0;
  }
  const nonce = nonces.subarray(nextNonce, nextNonce + NONCE_BYTES);
  nextNonce += NONCE_BYTES;
  return nonce;
}

/**
 * Where sealBody lays out a plaintext: reused, because the cipher has read it before the
 * call returns. It keeps the largest body this process sealed (at most about 290 KiB);
 * a fresh buffer per seal cost more than the cipher for a receipt of some kilobytes
 * (allocating large buffers is slow in Node, and each one is work for the collector).
 */
let scratch = Buffer.allocUnsafe(4096);

function scratchOf(size: number): Buffer {
  if (scratch.length < size) scratch = Buffer.allocUnsafe(size);
  return scratch.subarray(0, size);
}

/** Seals `body` from `me` to `to` (a base64url Ed25519 key). `nonce` only for test vectors: never reuse one. */
export function sealBody(me: SigningKey, to: string, header: SealHeader, body: SealedBody, nonce?: Uint8Array): Buffer {
  return sealPlaintext(me, to, header, bodyBytes(body, scratchOf), nonce);
}

/** Encrypts an already padded plaintext (sealBody's second half; test vectors build odd ones). */
export function sealPlaintext(me: SigningKey, to: string, header: SealHeader, plaintext: Buffer, nonce: Uint8Array = freshNonce()): Buffer {
  return aeadSeal(directionKey(me, keyText(me), to), associatedData(header), plaintext, nonce);
}

/** Why a sealed body was refused; the envelope is refused as `bad_seal` with it. */
export class SealError extends Error {}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Reads length-prefixed UTF-8 fields, one per name, and checks that only zeros follow
 * (the padding); an empty field reads as undefined. Fields from index `required` on may
 * also be cut off by the end of the plaintext (a body written before they existed, whose
 * padding left no room for a length). Throws SealError naming the field.
 */
export function readFields(plaintext: Buffer, names: readonly string[], required = names.length): (string | undefined)[] {
  let at = 0;
  const values = names.map((name, index) => {
    if (index >= required && at + 4 > plaintext.length) return undefined;
    if (at + 4 > plaintext.length) throw new SealError(`the sealed body ends inside the length of ${name}`);
    const length = plaintext.readUInt32LE(at);
    at += 4;
    if (length > plaintext.length - at) throw new SealError(`the sealed body ends inside ${name}`);
    let text: string;
    try {
      text = utf8.decode(plaintext.subarray(at, at + length));
    } catch {
      throw new SealError(`${name} in the sealed body is not UTF-8`);
    }
    at += length;
    return length === 0 ? undefined : text;
  });
  for (let i = at; i < plaintext.length; i++) if (plaintext[i] !== 0) throw new SealError('the padding of the sealed body is not zero');
  return values;
}

/** Reads the body fields (the group's only if there is room for it) and checks that only zeros follow. */
export function parseBodyBytes(plaintext: Buffer): SealedBody {
  const [text, status, task_id, in_reply_to, reply_session, group] = readFields(plaintext, BODY_FIELDS, REQUIRED_BODY_FIELDS);
  return {
    text: text ?? '',
    ...(status !== undefined && { status }),
    ...(task_id !== undefined && { task_id }),
    ...(in_reply_to !== undefined && { in_reply_to }),
    ...(reply_session !== undefined && { reply_session }),
    ...(group !== undefined && { group }),
  };
}

/** Pads length-prefixed fields to their size class (the plaintext of a seal). */
export function paddedFields(values: readonly (string | undefined)[], allocate: (size: number) => Buffer = Buffer.allocUnsafe): Buffer {
  let size = 0;
  for (const value of values) size += prefixedSize(value);
  const padded = allocate(paddedLength(size));
  const writer = new FieldWriter(padded);
  for (const value of values) writer.text(value);
  // What the fields do not cover is the padding: zeros. (Filling only that part: a zeroed
  // allocation, Buffer.alloc, costs tens of microseconds for a body of some kilobytes.)
  padded.fill(0, writer.written);
  return padded;
}

/** Encrypts `plaintext` under `key` with a fresh nonce: nonce || ciphertext || tag. */
export function aeadSeal(key: Buffer, aad: Buffer, plaintext: Buffer, nonce: Uint8Array = freshNonce()): Buffer {
  const cipher = createCipheriv('chacha20-poly1305', key, nonce, { authTagLength: TAG_BYTES });
  cipher.setAAD(aad, { plaintextLength: plaintext.length });
  // A stream cipher: the ciphertext is as long as the plaintext, so the sealed bytes are
  // laid out in one buffer instead of concatenated.
  const sealed = Buffer.allocUnsafe(NONCE_BYTES + plaintext.length + TAG_BYTES);
  const writer = new FieldWriter(sealed).bytes(nonce).bytes(cipher.update(plaintext)).bytes(cipher.final());
  if (writer.written !== NONCE_BYTES + plaintext.length) throw new Error('ChaCha20-Poly1305 returned a ciphertext of another length than its plaintext');
  writer.bytes(cipher.getAuthTag());
  return sealed;
}

/** Opens nonce || ciphertext || tag under `key`; undefined when it does not verify. */
export function aeadOpen(key: Buffer, aad: Buffer, sealed: Buffer): Buffer | undefined {
  if (sealed.length < NONCE_BYTES + TAG_BYTES) return undefined;
  const decipher = createDecipheriv('chacha20-poly1305', key, sealed.subarray(0, NONCE_BYTES), { authTagLength: TAG_BYTES });
  const ciphertext = sealed.subarray(NONCE_BYTES, sealed.length - TAG_BYTES);
  decipher.setAAD(aad, { plaintextLength: ciphertext.length });
  decipher.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES));
  try {
    const plaintext = decipher.update(ciphertext);
    const rest = decipher.final();
    return rest.length === 0 ? plaintext : Buffer.concat([plaintext, rest]);
  } catch {
    return undefined;
  }
}

/** Opens a body sealed from `from` to `to` (base64url keys), one of which is `me`; throws SealError. */
export function openBody(me: SigningKey, from: string, to: string, header: SealHeader, sealed: Buffer): SealedBody {
  if (sealed.length < NONCE_BYTES + TAG_BYTES) throw new SealError('the sealed body is shorter than a nonce and a tag');
  let key: Buffer;
  try {
    key = directionKey(me, from, to);
  } catch {
    throw new SealError('no shared key can be made with that sender key');
  }
  const plaintext = aeadOpen(key, associatedData(header), sealed);
  if (plaintext === undefined) throw new SealError('the sealed body does not open with the key this sender and this receiver share');
  return parseBodyBytes(plaintext);
}
