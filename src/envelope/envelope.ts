/**
 * The signed message. One zod schema is the wire format; `signedBytes` is the exact byte
 * string the signature covers (docs/PROTOCOL.md, "Envelope").
 *
 * Two versions are read; this implementation writes version 3.
 *
 * Version 3 (`"v": 3`), signed bytes in order:
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
 * In both, an absent optional field is signed as the empty string, so the schema refuses
 * empty optional fields, and strings must be well-formed Unicode (UTF-8 would map unpaired
 * surrogates to U+FFFD): every envelope has exactly one signed meaning.
 */
import { randomFillSync } from 'node:crypto';
import { z } from 'zod';
import { InterlinkError } from '../errors.js';
import { decodeBase64url, encodeBase64url, isBase64urlOfLength } from '../identity/base64url.js';
import { PUBLIC_KEY_BYTES, SIGNATURE_BYTES, signBytes, verifyBytes, type SigningKey } from '../identity/ed25519.js';
import { isWellFormedUnicode, unsafeNameReason } from '../config/paths.js';
import { lengthPrefixed, u64le } from './bytes.js';
import { parseRoute, routeText } from './route.js';

export const SIGNING_DOMAINS = { 2: 'interlink-v2\0', 3: 'interlink-v3\0' } as const;
export type EnvelopeVersion = keyof typeof SIGNING_DOMAINS;
/** The version this implementation signs. */
export const CURRENT_VERSION = 3;
export const MAX_TEXT_BYTES = 256 * 1024;
export const MAX_TASK_ID_BYTES = 128;

export const KNOWN_KINDS = ['message', 'pair_request', 'pair_accept'] as const;
export type KnownKind = (typeof KNOWN_KINDS)[number];

export const STATUSES = ['update', 'needs_input', 'result', 'failed', 'canceled'] as const;
export type Status = (typeof STATUSES)[number];
export const TERMINAL_STATUSES: ReadonlySet<Status> = new Set(['result', 'failed', 'canceled']);

const MSG_ID = /^[0-9a-f]{32}$/;

const publicKeyText = z.string().refine((s) => isBase64urlOfLength(s, PUBLIC_KEY_BYTES), 'must be a 32-byte base64url public key');
export const msgIdText = z.string().regex(MSG_ID, 'must be 32 lowercase hex digits');
const nonEmptyOptional = (inner: z.ZodString) => inner.min(1, 'must be absent rather than empty').optional();

const sessionText = z.string().refine((s) => unsafeNameReason(s) === undefined, 'must be a session id (1 to 128 bytes, no "..", "/", "\\", control characters or surrounding white space)');

/** The fields as an object schema (for `.omit` and friends); `envelopeSchema` adds the rules between them. */
export const envelopeFields = z.object({
  /** Absent means version 2. */
  v: z.union([z.literal(2), z.literal(3)], { message: 'must be 2 or 3: this implementation reads envelope versions 2 and 3' }).optional(),
  from: publicKeyText,
  to: publicKeyText,
  /** Version 3 only: the recipient's session, signed. */
  to_session: sessionText.optional(),
  ts: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  msg_id: msgIdText,
  // Later protocol versions may add kinds; the schema admits any identifier and the
  // trust gate refuses the ones this version does not handle.
  kind: z.string().regex(/^[a-z][a-z0-9_]{0,31}$/, 'must be a lowercase identifier').default('message'),
  text: z
    .string()
    .refine(isWellFormedUnicode, 'must be well-formed Unicode (no unpaired surrogates)')
    .refine((s) => Buffer.byteLength(s, 'utf8') <= MAX_TEXT_BYTES, `must be at most ${MAX_TEXT_BYTES} bytes of UTF-8`),
  task_id: nonEmptyOptional(z.string()).refine(
    (s) => s === undefined || (isWellFormedUnicode(s) && Buffer.byteLength(s, 'utf8') <= MAX_TASK_ID_BYTES && !/[\u0000-\u001f\u007f]/.test(s)),
    `must be well-formed Unicode, at most ${MAX_TASK_ID_BYTES} bytes, without control characters`,
  ),
  status: z.enum(STATUSES).optional(),
  in_reply_to: msgIdText.optional(),
  reply_to: routeText.optional(),
  sig: z.string().refine((s) => isBase64urlOfLength(s, SIGNATURE_BYTES), 'must be a 64-byte base64url signature'),
});

type EnvelopeShape = z.infer<typeof envelopeFields>;

/** Version 3 signs the target session and the reply session; version 2 has neither. */
function versionRules(envelope: Omit<EnvelopeShape, 'sig'>, ctx: z.RefinementCtx): void {
  if (versionOf(envelope) === 3) {
    if (envelope.to_session === undefined) ctx.addIssue({ code: 'custom', path: ['to_session'], message: 'is required in version 3' });
    if (envelope.reply_to !== undefined && parseRoute(envelope.reply_to)?.key !== envelope.from) {
      ctx.addIssue({ code: 'custom', path: ['reply_to'], message: "must name the sender's own key in version 3" });
    }
  } else if (envelope.to_session !== undefined) {
    ctx.addIssue({ code: 'custom', path: ['to_session'], message: 'is part of version 3 only (it would not be signed)' });
  }
}

export const envelopeSchema = envelopeFields.superRefine(versionRules);

export type Envelope = z.infer<typeof envelopeSchema>;
export type UnsignedEnvelope = Omit<Envelope, 'sig'>;

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

export function versionOf(envelope: Pick<EnvelopeShape, 'v'>): EnvelopeVersion {
  return envelope.v ?? 2;
}

export function signedBytes(envelope: UnsignedEnvelope): Buffer {
  const version = versionOf(envelope);
  const keys = [decodeBase64url(envelope.from, PUBLIC_KEY_BYTES, 'from'), decodeBase64url(envelope.to, PUBLIC_KEY_BYTES, 'to')];
  const body = [
    ...lengthPrefixed(envelope.kind),
    ...lengthPrefixed(envelope.msg_id),
    ...lengthPrefixed(envelope.text),
    ...lengthPrefixed(envelope.status),
    ...lengthPrefixed(envelope.task_id),
    ...lengthPrefixed(envelope.in_reply_to),
  ];
  const domain = Buffer.from(SIGNING_DOMAINS[version], 'utf8');
  if (version === 2) return Buffer.concat([domain, ...keys, u64le(envelope.ts), ...body]);
  if (envelope.to_session === undefined) throw new InterlinkError('bad_envelope', 'to_session is required in version 3');
  const replySession = envelope.reply_to === undefined ? undefined : parseRoute(envelope.reply_to)?.session;
  return Buffer.concat([domain, ...keys, ...lengthPrefixed(envelope.to_session), u64le(envelope.ts), ...body, ...lengthPrefixed(replySession)]);
}

export interface EnvelopeFields {
  to: string;
  /**
   * The recipient's session. Given, the envelope is version 3 and the session is signed;
   * left out, it is version 2 (what older peers and the Rust Interlink send).
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
}

/** Builds, validates and signs an envelope from `key`. */
export function signEnvelope(key: SigningKey, fields: EnvelopeFields): Envelope {
  const unsigned: UnsignedEnvelope = {
    ...(fields.to_session !== undefined && { v: CURRENT_VERSION }),
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
  // Validate before signing, so bad fields are refused as such and never signed.
  const placeholder = encodeBase64url(Buffer.alloc(SIGNATURE_BYTES));
  parseEnvelope({ ...unsigned, sig: placeholder });
  const sig = encodeBase64url(signBytes(key, signedBytes(unsigned)));
  return { ...unsigned, sig };
}

export function verifyEnvelope(envelope: Envelope): boolean {
  return verifyBytes(
    decodeBase64url(envelope.from, PUBLIC_KEY_BYTES, 'from'),
    signedBytes(envelope),
    decodeBase64url(envelope.sig, SIGNATURE_BYTES, 'sig'),
  );
}

/** Validates untrusted data as an envelope; the error names the first bad field. */
export function parseEnvelope(data: unknown): Envelope {
  const parsed = envelopeSchema.safeParse(data);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const field = issue && issue.path.length > 0 ? issue.path.join('.') : 'envelope';
  const tooLarge = issue?.path[0] === 'text' && issue.message.startsWith('must be at most');
  throw new InterlinkError(tooLarge ? 'too_large' : 'bad_envelope', `${field} ${issue?.message ?? 'is invalid'}`);
}

/**
 * The sender's session from `reply_to`: signed in version 3 (whose schema requires the
 * sender's own key), an unsigned hint in version 2, honoured only when it names `from`.
 */
export function replyToSession(envelope: Envelope): string | undefined {
  if (envelope.reply_to === undefined) return undefined;
  const route = parseRoute(envelope.reply_to);
  return route !== undefined && route.key === envelope.from ? route.session : undefined;
}
