/**
 * The signed message. zod schemas are the wire and storage formats; `signedBytes` is the
 * exact byte string the signature covers (docs/PROTOCOL.md, "Envelope").
 *
 * Three versions are read; this implementation writes version 4.
 *
 * Version 4 (`"v": 4`): the body is sealed to the recipient (seal.ts). On the wire it
 * carries only the header — from, to, to_session, ts, kind, msg_id — and `sealed`, the
 * encrypted body (text, status, task_id, in_reply_to, reply session). Signed bytes:
 *   "interlink-v4\0" || from (32) || to (32) || to_session || ts (u64 LE) || kind ||
 *   msg_id || sealed (u32 LE length, then the raw sealed bytes)
 * so the signature binds sender, recipient, session and ciphertext: a relay can neither
 * re-target a message nor splice a body from another one. Stores keep the opened form:
 * the wire fields (signature and ciphertext, as admitted) plus the body they hold.
 *
 * Version 3 (`"v": 3`), clear, signed bytes in order:
 *   "interlink-v3\0"                      domain and version
 *   from (32 bytes) || to (32 bytes)      raw public keys
 *   to_session                             the recipient's session (length-prefixed)
 *   ts                                     u64 little-endian, Unix milliseconds
 *   kind, msg_id, text, status, task_id, in_reply_to, reply session
 *                                          each a u32 little-endian byte length, then UTF-8
 * so a relay can neither move a message to another session of the recipient nor rewrite
 * where the answer goes; `reply_to` must name the sender's own key.
 *
 * Version 2 (no `v`): the Rust Interlink's layout, byte for byte — domain "interlink-v2\0",
 * the same parts without `to_session` and the reply session. Its session is not signed, so
 * a replay into another session is stopped only by the receiver's per-identity replay
 * index (agent/claims.ts); its `reply_to` is an unsigned hint honoured only when its key is
 * `from`.
 *
 * Clear versions are admitted only from peers a person marked `clear` (the Rust original
 * cannot seal); see the trust gate.
 *
 * In all, an absent optional field is signed as the empty string, so the schema refuses
 * empty optional fields, and strings must be well-formed Unicode (UTF-8 would map unpaired
 * surrogates to U+FFFD): every envelope has exactly one signed meaning.
 */
import { randomFillSync } from 'node:crypto';
import { z } from 'zod';
import { InterlinkError } from '../errors.js';
import { decodeBase64url, encodeBase64url, isBase64urlOfLength, isCanonicalBase64url } from '../identity/base64url.js';
import { PUBLIC_KEY_BYTES, SIGNATURE_BYTES, signBytes, verifyBytes, type SigningKey } from '../identity/ed25519.js';
import { isWellFormedUnicode, unsafeNameReason } from '../config/paths.js';
import { FieldWriter, lengthPrefixed, prefixedSize, u64le } from './bytes.js';
import { formatRoute, parseRoute, routeText } from './route.js';
import { MIN_PADDED_BYTES, NONCE_BYTES, SealError, TAG_BYTES, openBody, sealBody, type SealedBody } from './seal.js';

export const SIGNING_DOMAINS = { 2: 'interlink-v2\0', 3: 'interlink-v3\0', 4: 'interlink-v4\0' } as const;
export type EnvelopeVersion = keyof typeof SIGNING_DOMAINS;
/** The version this implementation signs. */
export const CURRENT_VERSION = 4;
export const MAX_TEXT_BYTES = 256 * 1024;
export const MAX_TASK_ID_BYTES = 128;
/**
 * The longest `sealed` text: a body at its largest (text, task id, ids, session and their
 * lengths) padded by at most 12%, plus nonce and tag, in base64url.
 */
export const MAX_SEALED_CHARS = Math.ceil(((MAX_TEXT_BYTES + 1024) * 1.125 + NONCE_BYTES + TAG_BYTES) * (4 / 3));

/** `receipt`: a receiver's signed report on the sender's messages (receipts/receipts.ts). */
export const KNOWN_KINDS = ['message', 'pair_request', 'pair_accept', 'receipt'] as const;
export type KnownKind = (typeof KNOWN_KINDS)[number];

export const STATUSES = ['update', 'needs_input', 'result', 'failed', 'canceled'] as const;
export type Status = (typeof STATUSES)[number];
export const TERMINAL_STATUSES: ReadonlySet<Status> = new Set(['result', 'failed', 'canceled']);

/** A message id: 32 lowercase hex digits. */
export const MSG_ID = /^[0-9a-f]{32}$/;

const publicKeyText = z.string().refine((s) => isBase64urlOfLength(s, PUBLIC_KEY_BYTES), 'must be a 32-byte base64url public key');
export const msgIdText = z.string().regex(MSG_ID, 'must be 32 lowercase hex digits');
const nonEmptyOptional = (inner: z.ZodString) => inner.min(1, 'must be absent rather than empty').optional();

const sessionText = z.string().refine((s) => unsafeNameReason(s) === undefined, 'must be a session id (1 to 128 bytes, no "..", "/", "\\", control characters or surrounding white space)');

/** Canonical base64url of a sealed body: at least a nonce, the smallest size class and a tag. */
const sealedText = z
  .string()
  .max(MAX_SEALED_CHARS, `must be at most ${MAX_SEALED_CHARS} characters`)
  .refine(
    (s) => s.length >= Math.ceil(((NONCE_BYTES + MIN_PADDED_BYTES + TAG_BYTES) * 4) / 3) && isCanonicalBase64url(s),
    'must be canonical base64url of a nonce, a padded body and a tag',
  );

const textField = z
  .string()
  .refine(isWellFormedUnicode, 'must be well-formed Unicode (no unpaired surrogates)')
  .refine((s) => Buffer.byteLength(s, 'utf8') <= MAX_TEXT_BYTES, `must be at most ${MAX_TEXT_BYTES} bytes of UTF-8`);
const taskIdField = nonEmptyOptional(z.string()).refine(
  (s) => s === undefined || (isWellFormedUnicode(s) && Buffer.byteLength(s, 'utf8') <= MAX_TASK_ID_BYTES && !/[\u0000-\u001f\u007f]/.test(s)),
  `must be well-formed Unicode, at most ${MAX_TASK_ID_BYTES} bytes, without control characters`,
);

/** The fields as an object schema (for `.omit` and friends); `envelopeSchema` adds the rules between them. */
export const envelopeFields = z.object({
  /** Absent means version 2. */
  v: z.union([z.literal(2), z.literal(3), z.literal(4)], { message: 'must be 2, 3 or 4: this implementation reads envelope versions 2 to 4' }).optional(),
  from: publicKeyText,
  to: publicKeyText,
  /** Versions 3 and 4: the recipient's session, signed. */
  to_session: sessionText.optional(),
  ts: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  msg_id: msgIdText,
  // Later protocol versions may add kinds; the schema admits any identifier and the
  // trust gate refuses the ones this version does not handle.
  kind: z.string().regex(/^[a-z][a-z0-9_]{0,31}$/, 'must be a lowercase identifier').default('message'),
  /** Version 4 only: the sealed body, what the signature covers in place of the fields below. */
  sealed: sealedText.optional(),
  text: textField,
  task_id: taskIdField,
  status: z.enum(STATUSES).optional(),
  in_reply_to: msgIdText.optional(),
  reply_to: routeText.optional(),
  sig: z.string().refine((s) => isBase64urlOfLength(s, SIGNATURE_BYTES), 'must be a 64-byte base64url signature'),
});

type EnvelopeShape = z.infer<typeof envelopeFields>;

/** Versions 3 and 4 sign the target session and the reply session; version 2 has neither; only 4 is sealed. */
function versionRules(envelope: Omit<EnvelopeShape, 'sig'>, ctx: z.RefinementCtx): void {
  const version = versionOf(envelope);
  if (version >= 3) {
    if (envelope.to_session === undefined) ctx.addIssue({ code: 'custom', path: ['to_session'], message: `is required in version ${version}` });
    if (envelope.reply_to !== undefined && parseRoute(envelope.reply_to)?.key !== envelope.from) {
      ctx.addIssue({ code: 'custom', path: ['reply_to'], message: `must name the sender's own key in version ${version}` });
    }
  } else if (envelope.to_session !== undefined) {
    ctx.addIssue({ code: 'custom', path: ['to_session'], message: 'is part of versions 3 and 4 only (it would not be signed)' });
  }
  if (version === 4 && envelope.sealed === undefined) ctx.addIssue({ code: 'custom', path: ['sealed'], message: 'is required in version 4' });
  if (version !== 4 && envelope.sealed !== undefined) ctx.addIssue({ code: 'custom', path: ['sealed'], message: 'is part of version 4 only' });
}

/**
 * A message as this implementation holds it: a clear envelope (versions 2 and 3) as it
 * travelled, or a version 4 envelope with its opened body beside the sealed one. What
 * mailboxes and outboxes store.
 */
export const envelopeSchema = envelopeFields.superRefine(versionRules);

export type Envelope = z.infer<typeof envelopeSchema>;
export type UnsignedEnvelope = Omit<Envelope, 'sig'>;

/** A version 4 envelope as it travels: the header, the sealed body and the signature; nothing else. */
export const sealedWireSchema = z.object({
  v: z.literal(4),
  from: publicKeyText,
  to: publicKeyText,
  to_session: sessionText,
  ts: envelopeFields.shape.ts,
  msg_id: msgIdText,
  kind: envelopeFields.shape.kind,
  sealed: sealedText,
  sig: envelopeFields.shape.sig,
});
export type SealedWire = z.infer<typeof sealedWireSchema>;

/** What a relay carries: a clear envelope, or a sealed one. */
export type WireEnvelope = Envelope | SealedWire;
type UnsignedWire = Omit<Envelope, 'sig'> | Omit<SealedWire, 'sig'>;

export function isSealed(envelope: WireEnvelope | UnsignedWire): envelope is SealedWire {
  return envelope.v === 4;
}

/**
 * Random bytes for message ids, drawn 4 KiB at a time: one call into the CSPRNG per 256
 * ids instead of one per message (that call was a visible share of a send). Every id is
 * still 16 fresh random bytes, never reused.
 */
const ID_BYTES = 16;
const idPool = Buffer.alloc(256 * ID_BYTES);
let idPoolNext = idPool.length;

export function newMsgId(): string {
  if (idPoolNext >= idPool.length) {
    randomFillSync(idPool);
    idPoolNext = 0;
  }
  const id = idPool.toString('hex', idPoolNext, idPoolNext + ID_BYTES);
  idPoolNext += ID_BYTES;
  return id;
}

export function versionOf(envelope: { v?: 2 | 3 | 4 | undefined }): EnvelopeVersion {
  return envelope.v ?? 2;
}

/**
 * The raw bytes of a sealed envelope's `sealed`, decoded once per envelope object: the
 * signature check and the opening both need them.
 */
const rawSealed = new WeakMap<object, { text: string; bytes: Buffer }>();

function sealedBytesOf(envelope: object, sealed: string): Buffer {
  const known = rawSealed.get(envelope);
  if (known !== undefined && known.text === sealed) return known.bytes;
  const bytes = Buffer.from(sealed, 'base64url');
  rawSealed.set(envelope, { text: sealed, bytes });
  return bytes;
}

const V4_DOMAIN = Buffer.from(SIGNING_DOMAINS[4], 'utf8');

/** Version 4's signed bytes, laid out in one buffer: the header, then the raw sealed bytes. */
function sealedSignedBytes(envelope: { from: string; to: string; ts: number; kind: string; msg_id: string }, toSession: string, sealed: Buffer): Buffer {
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

export interface EnvelopeFields {
  to: string;
  /**
   * The recipient's session. Given, the envelope is version 4 (sealed; or 3 with
   * `version: 3`) and the session is signed; left out, it is version 2 (what older peers
   * and the Rust Interlink send).
   */
  to_session?: string;
  text: string;
  kind?: string;
  task_id?: string;
  status?: Status;
  in_reply_to?: string;
  reply_to?: string;
  ts?: number;
  msg_id?: string;
  /** Only to write a clear version 3 envelope (tests and test vectors; peers marked `clear` get version 2). */
  version?: 3;
  /** Only for test vectors: the seal's nonce. A nonce must never be used twice. */
  seal_nonce?: Uint8Array;
}

/** What `sealed` is while the fields are checked, before the body is sealed: the shortest valid one. */
const PLACEHOLDER_SEAL = encodeBase64url(Buffer.alloc(NONCE_BYTES + MIN_PADDED_BYTES + TAG_BYTES));

/** Builds, validates, seals (version 4) and signs an envelope from `key`. */
export function signEnvelope(key: SigningKey, fields: EnvelopeFields): Envelope {
  const version: EnvelopeVersion = fields.to_session === undefined ? 2 : (fields.version ?? CURRENT_VERSION);
  const unsigned: UnsignedEnvelope = {
    ...(version !== 2 && { v: version }),
    from: encodeBase64url(key.publicKey),
    to: fields.to,
    ...(fields.to_session !== undefined && { to_session: fields.to_session }),
    ts: fields.ts ?? Date.now(),
    msg_id: fields.msg_id ?? newMsgId(),
    kind: fields.kind ?? 'message',
    text: fields.text,
    ...(fields.task_id !== undefined && { task_id: fields.task_id }),
    ...(fields.status !== undefined && { status: fields.status }),
    ...(fields.in_reply_to !== undefined && { in_reply_to: fields.in_reply_to }),
    ...(fields.reply_to !== undefined && { reply_to: fields.reply_to }),
  };
  // Validate before sealing and signing, so bad fields are refused as such and never signed.
  const placeholder = encodeBase64url(Buffer.alloc(SIGNATURE_BYTES));
  const placeholderSeal = version === 4 ? { sealed: PLACEHOLDER_SEAL } : {};
  parseStoredEnvelope({ ...unsigned, ...placeholderSeal, sig: placeholder });
  let bytes: Buffer;
  if (version === 4 && unsigned.to_session !== undefined) {
    const sealed = sealBody(key, unsigned.to, headerOf({ ...unsigned, to_session: unsigned.to_session }), {
      text: unsigned.text,
      ...(unsigned.status !== undefined && { status: unsigned.status }),
      ...(unsigned.task_id !== undefined && { task_id: unsigned.task_id }),
      ...(unsigned.in_reply_to !== undefined && { in_reply_to: unsigned.in_reply_to }),
      ...(unsigned.reply_to !== undefined && { reply_session: parseRoute(unsigned.reply_to)?.session ?? '' }),
    }, fields.seal_nonce);
    unsigned.sealed = encodeBase64url(sealed);
    // Signed over the raw sealed bytes just made, not decoded again from their text.
    bytes = sealedSignedBytes(unsigned, unsigned.to_session, sealed);
  } else {
    bytes = signedBytes(unsigned);
  }
  const sig = encodeBase64url(signBytes(key, bytes));
  return { ...unsigned, sig };
}

function headerOf(envelope: { to_session: string; ts: number; kind: string; msg_id: string }): { to_session: string; ts: number; kind: string; msg_id: string } {
  return { to_session: envelope.to_session, ts: envelope.ts, kind: envelope.kind, msg_id: envelope.msg_id };
}

/** The envelope as a relay carries it: a version 4 envelope without its opened body. */
export function wireOf(envelope: Envelope): WireEnvelope {
  if (envelope.v !== 4 || envelope.sealed === undefined || envelope.to_session === undefined) return envelope;
  return { v: 4, from: envelope.from, to: envelope.to, to_session: envelope.to_session, ts: envelope.ts, msg_id: envelope.msg_id, kind: envelope.kind, sealed: envelope.sealed, sig: envelope.sig };
}

/**
 * What to offer a relay for a stored outgoing envelope. A clear version 3 envelope in an
 * outbox was signed before this version sealed: receivers now refuse it (`unsealed`), so
 * it is sealed and signed again, with the same msg_id, ts and fields — the same message.
 */
export function offerable(key: SigningKey, envelope: Envelope): WireEnvelope {
  if (envelope.v !== 3 || envelope.to_session === undefined) return wireOf(envelope);
  const { v: _v, from: _from, sig: _sig, sealed: _sealed, ...fields } = envelope;
  return wireOf(signEnvelope(key, { ...fields, to_session: envelope.to_session }));
}

export function verifyEnvelope(envelope: WireEnvelope): boolean {
  return verifyBytes(
    decodeBase64url(envelope.from, PUBLIC_KEY_BYTES, 'from'),
    signedBytes(envelope),
    decodeBase64url(envelope.sig, SIGNATURE_BYTES, 'sig'),
  );
}

/**
 * Opens a sealed envelope addressed to `me` (or sent by `me`): the envelope with its body.
 * Throws InterlinkError `bad_seal` when the body does not open under the key the two
 * share, or what it holds breaks the rules of the clear fields.
 */
export function openEnvelope(me: SigningKey, wire: SealedWire): Envelope {
  let body: SealedBody;
  try {
    body = openBody(me, wire.from, wire.to, headerOf(wire), sealedBytesOf(wire, wire.sealed));
  } catch (err) {
    if (err instanceof SealError) throw new InterlinkError('bad_seal', err.message);
    throw err;
  }
  // The header was validated with the wire form; only the opened fields are checked here.
  if (!obeysFieldRules(body)) {
    const fields = openedFieldsSchema.safeParse(body);
    if (!fields.success) {
      const issue = fields.error.issues[0];
      throw new InterlinkError('bad_seal', `the sealed ${issue?.path.join('.') || 'body'} ${issue?.message ?? 'is invalid'}`);
    }
    body = fields.data;
  }
  // Built from the header fields only: anything else beside the seal is not the message.
  return {
    v: 4,
    from: wire.from,
    to: wire.to,
    to_session: wire.to_session,
    ts: wire.ts,
    msg_id: wire.msg_id,
    kind: wire.kind,
    sealed: wire.sealed,
    sig: wire.sig,
    text: body.text,
    ...(body.task_id !== undefined && { task_id: body.task_id }),
    ...(body.status !== undefined && { status: body.status as Status }),
    ...(body.in_reply_to !== undefined && { in_reply_to: body.in_reply_to }),
    ...(body.reply_session !== undefined && { reply_to: formatRoute({ key: wire.from, session: body.reply_session }) }),
  };
}

/** What a sealed body holds, by the rules of the clear fields (the reply session by the session rule). */
const openedFieldsSchema = z.object({
  text: envelopeFields.shape.text,
  task_id: envelopeFields.shape.task_id,
  status: envelopeFields.shape.status,
  in_reply_to: envelopeFields.shape.in_reply_to,
  reply_session: sessionText.optional(),
});

const STATUS_SET: ReadonlySet<string> = new Set(STATUSES);
const CONTROL = /[\u0000-\u001f\u007f]/;

/**
 * Whether an opened body obeys openedFieldsSchema, checked directly on the common path
 * (every message a session receives is opened). parseBodyBytes decoded each field as
 * strict UTF-8, so every string is already well-formed Unicode and no field is empty.
 * Stricter than the schema, never looser: a body this refuses goes through the schema,
 * which names what is wrong (or takes it after all).
 */
function obeysFieldRules(body: SealedBody): boolean {
  return (
    Buffer.byteLength(body.text, 'utf8') <= MAX_TEXT_BYTES &&
    (body.task_id === undefined || (Buffer.byteLength(body.task_id, 'utf8') <= MAX_TASK_ID_BYTES && !CONTROL.test(body.task_id))) &&
    (body.status === undefined || STATUS_SET.has(body.status)) &&
    (body.in_reply_to === undefined || MSG_ID.test(body.in_reply_to)) &&
    (body.reply_session === undefined || unsafeNameReason(body.reply_session) === undefined)
  );
}

function failure(error: z.ZodError, what: string): InterlinkError {
  const issue = error.issues[0];
  const field = issue && issue.path.length > 0 ? issue.path.join('.') : what;
  const tooLarge = issue?.path[0] === 'text' && issue.message.startsWith('must be at most');
  return new InterlinkError(tooLarge ? 'too_large' : 'bad_envelope', `${field} ${issue?.message ?? 'is invalid'}`);
}

/**
 * Validates untrusted data as an envelope off the wire: clear (versions 2 and 3) or
 * sealed (version 4, whose body fields, if a relay added any, are dropped: only the
 * sealed body counts). The error names the first bad field.
 */
export function parseEnvelope(data: unknown): WireEnvelope {
  const sealed = typeof data === 'object' && data !== null && (data as { v?: unknown }).v === 4;
  const parsed = sealed ? sealedWireSchema.safeParse(data) : envelopeSchema.safeParse(data);
  if (parsed.success) return parsed.data;
  throw failure(parsed.error, 'envelope');
}

/** Validates an envelope as stores hold it: clear, or version 4 with its opened body. */
export function parseStoredEnvelope(data: unknown): Envelope {
  const parsed = envelopeSchema.safeParse(data);
  if (parsed.success) return parsed.data;
  throw failure(parsed.error, 'envelope');
}

/**
 * The sender's session from `reply_to`: signed in versions 3 and 4 (whose schema requires
 * the sender's own key), an unsigned hint in version 2, honoured only when it names `from`.
 */
export function replyToSession(envelope: Envelope): string | undefined {
  if (envelope.reply_to === undefined) return undefined;
  const route = parseRoute(envelope.reply_to);
  return route !== undefined && route.key === envelope.from ? route.session : undefined;
}
