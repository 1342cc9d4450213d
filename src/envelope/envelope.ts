/**
 * The signed message. One zod schema is the wire format; `signedBytes` is the exact byte
 * string the signature covers (docs/PROTOCOL.md, "Envelope").
 *
 * Signed bytes, in order:
 *   "interlink-v2\0"                      domain and version
 *   from (32 bytes) || to (32 bytes)      raw public keys
 *   ts                                     u64 little-endian, Unix milliseconds
 *   kind, msg_id, text, status, task_id, in_reply_to
 *                                          each a u32 little-endian byte length, then UTF-8
 * An absent optional field is signed as the empty string, so the schema refuses empty
 * optional fields, and strings must be well-formed Unicode (UTF-8 would map unpaired
 * surrogates to U+FFFD): every envelope has exactly one signed meaning. `reply_to` and `sig`
 * are not signed; `reply_to` is a routing hint honoured only when its key is `from`.
 * The layout matches the Rust Interlink's v2 envelope, so the two can verify each other.
 */
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { InterlinkError } from '../errors.js';
import { decodeBase64url, encodeBase64url, isBase64urlOfLength } from '../identity/base64url.js';
import { PUBLIC_KEY_BYTES, SIGNATURE_BYTES, signBytes, verifyBytes, type SigningKey } from '../identity/ed25519.js';
import { isWellFormedUnicode, unsafeNameReason } from '../config/paths.js';
import { lengthPrefixed, u64le } from './bytes.js';

export const SIGNING_DOMAIN = 'interlink-v2\0';
export const MAX_TEXT_BYTES = 256 * 1024;
export const MAX_TASK_ID_BYTES = 128;

export const KNOWN_KINDS = ['message', 'pair_request', 'pair_accept'] as const;
export type KnownKind = (typeof KNOWN_KINDS)[number];

export const STATUSES = ['update', 'needs_input', 'result', 'failed', 'canceled'] as const;
export type Status = (typeof STATUSES)[number];
export const TERMINAL_STATUSES: ReadonlySet<Status> = new Set(['result', 'failed', 'canceled']);

const MSG_ID = /^[0-9a-f]{32}$/;

const publicKeyText = z.string().refine((s) => isBase64urlOfLength(s, PUBLIC_KEY_BYTES), 'must be a 32-byte base64url public key');
const msgIdText = z.string().regex(MSG_ID, 'must be 32 lowercase hex digits');
const nonEmptyOptional = (inner: z.ZodString) => inner.min(1, 'must be absent rather than empty').optional();

export const envelopeSchema = z.object({
  from: publicKeyText,
  to: publicKeyText,
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
  reply_to: z
    .string()
    .refine((s) => parseRoute(s) !== undefined, 'must be "<public key>#<session id>"')
    .optional(),
  sig: z.string().refine((s) => isBase64urlOfLength(s, SIGNATURE_BYTES), 'must be a 64-byte base64url signature'),
});

export type Envelope = z.infer<typeof envelopeSchema>;
export type UnsignedEnvelope = Omit<Envelope, 'sig'>;

/** A relay route `<public key>#<session id>`. */
export function parseRoute(route: string): { key: string; session: string } | undefined {
  const hash = route.indexOf('#');
  if (hash < 0) return undefined;
  const key = route.slice(0, hash);
  const session = route.slice(hash + 1);
  if (!isBase64urlOfLength(key, PUBLIC_KEY_BYTES) || unsafeNameReason(session) !== undefined) return undefined;
  return { key, session };
}

export function newMsgId(): string {
  return randomBytes(16).toString('hex');
}

export function signedBytes(envelope: UnsignedEnvelope): Buffer {
  return Buffer.concat([
    Buffer.from(SIGNING_DOMAIN, 'utf8'),
    decodeBase64url(envelope.from, PUBLIC_KEY_BYTES, 'from'),
    decodeBase64url(envelope.to, PUBLIC_KEY_BYTES, 'to'),
    u64le(envelope.ts),
    ...lengthPrefixed(envelope.kind),
    ...lengthPrefixed(envelope.msg_id),
    ...lengthPrefixed(envelope.text),
    ...lengthPrefixed(envelope.status),
    ...lengthPrefixed(envelope.task_id),
    ...lengthPrefixed(envelope.in_reply_to),
  ]);
}

export interface EnvelopeFields {
  to: string;
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
    from: encodeBase64url(key.publicKey),
    to: fields.to,
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

/** The sender's session from the unsigned hint, only when the hint names the sender's own key. */
export function replyToSession(envelope: Envelope): string | undefined {
  if (envelope.reply_to === undefined) return undefined;
  const route = parseRoute(envelope.reply_to);
  return route !== undefined && route.key === envelope.from ? route.session : undefined;
}
