/**
 * The exact byte string an envelope's signature covers, per version (docs/PROTOCOL.md,
 * "Envelope"). Signing and verifying (sign.ts) both use these bytes and no others, so
 * each version's layout is written down once, here.
 *
 * Version 4 (`"v": 4`, sealed):
 *   "interlink-v4\0" || from (32) || to (32) || to_session || ts (u64 LE) || kind ||
 *   msg_id || sealed (u32 LE length, then the raw sealed bytes)
 * so the signature binds sender, recipient, session and ciphertext: a relay can neither
 * re-target a message nor splice a body from another one.
 *
 * Version 3 (`"v": 3`), clear, in order:
 *   "interlink-v3\0"                      domain and version
 *   from (32 bytes) || to (32 bytes)      raw public keys
 *   to_session                             the recipient's session (length-prefixed)
 *   ts                                     u64 little-endian, Unix milliseconds
 *   kind, msg_id, text, status, task_id, in_reply_to, reply session
 *                                          each a u32 little-endian byte length, then UTF-8
 * so a relay can neither move a message to another session of the recipient nor rewrite
 * where the answer goes.
 *
 * Version 2 (no `v`): the Rust Interlink's layout, byte for byte — domain "interlink-v2\0",
 * the same parts without `to_session` and the reply session.
 *
 * In all, an absent optional field is signed as the empty string (the schema, envelope.ts,
 * refuses empty optional fields, so every envelope has exactly one signed meaning).
 */
import { InterlinkError } from '../errors.js';
import { decodeBase64url } from '../identity/base64url.js';
import { PUBLIC_KEY_BYTES } from '../identity/ed25519.js';
import { FieldWriter, lengthPrefixed, prefixedSize, u64le } from './bytes.js';
import { versionOf, type Envelope, type EnvelopeVersion, type UnsignedWire } from './envelope.js';
import { parseRoute } from './route.js';

export const SIGNING_DOMAINS = { 2: 'interlink-v2\0', 3: 'interlink-v3\0', 4: 'interlink-v4\0' } as const satisfies Record<EnvelopeVersion, string>;

/**
 * The raw bytes of a sealed envelope's `sealed`, decoded once per envelope object: the
 * signature check and the opening (open.ts) both need them.
 */
const rawSealed = new WeakMap<object, { text: string; bytes: Buffer }>();

export function sealedBytesOf(envelope: object, sealed: string): Buffer {
  const known = rawSealed.get(envelope);
  if (known !== undefined && known.text === sealed) return known.bytes;
  const bytes = Buffer.from(sealed, 'base64url');
  rawSealed.set(envelope, { text: sealed, bytes });
  return bytes;
}

const V4_DOMAIN = Buffer.from(SIGNING_DOMAINS[4], 'utf8');

/** Version 4's signed bytes, laid out in one buffer: the header, then the raw sealed bytes. */
export function sealedSignedBytes(envelope: { from: string; to: string; ts: number; kind: string; msg_id: string }, toSession: string, sealed: Buffer): Buffer {
  const size = V4_DOMAIN.length + 2 * PUBLIC_KEY_BYTES + prefixedSize(toSession) + 8 + prefixedSize(envelope.kind) + prefixedSize(envelope.msg_id) + 4 + sealed.length;
  const bytes = Buffer.allocUnsafe(size);
  const writer = new FieldWriter(bytes)
    .bytes(V4_DOMAIN)
    .bytes(decodeBase64url(envelope.from, PUBLIC_KEY_BYTES, 'from'))
    .bytes(decodeBase64url(envelope.to, PUBLIC_KEY_BYTES, 'to'))
    .text(toSession)
    .u64(envelope.ts)
    .text(envelope.kind)
    .text(envelope.msg_id)
    .prefixedBytes(sealed);
  if (writer.written !== size) throw new Error('the signed bytes of a sealed envelope were laid out short');
  return bytes;
}

export function signedBytes(envelope: UnsignedWire): Buffer {
  if (envelope.v === 4) {
    if (envelope.sealed === undefined || envelope.to_session === undefined) throw new InterlinkError('bad_envelope', 'sealed and to_session are required in version 4');
    return sealedSignedBytes(envelope, envelope.to_session, sealedBytesOf(envelope, envelope.sealed));
  }
  const version = versionOf(envelope);
  const keys = [decodeBase64url(envelope.from, PUBLIC_KEY_BYTES, 'from'), decodeBase64url(envelope.to, PUBLIC_KEY_BYTES, 'to')];
  const domain = Buffer.from(SIGNING_DOMAINS[version], 'utf8');
  const clear = envelope as Omit<Envelope, 'sig'>;
  const body = [
    ...lengthPrefixed(clear.kind),
    ...lengthPrefixed(clear.msg_id),
    ...lengthPrefixed(clear.text),
    ...lengthPrefixed(clear.status),
    ...lengthPrefixed(clear.task_id),
    ...lengthPrefixed(clear.in_reply_to),
  ];
  if (version === 2) return Buffer.concat([domain, ...keys, u64le(clear.ts), ...body]);
  if (clear.to_session === undefined) throw new InterlinkError('bad_envelope', 'to_session is required in version 3');
  const replySession = clear.reply_to === undefined ? undefined : parseRoute(clear.reply_to)?.session;
  return Buffer.concat([domain, ...keys, ...lengthPrefixed(clear.to_session), u64le(clear.ts), ...body, ...lengthPrefixed(replySession)]);
}
