/**
 * The signed message's forms. zod schemas are the wire and storage formats (docs/PROTOCOL.md,
 * "Envelope"); the bytes each version's signature covers are laid out in signed-bytes.ts,
 * signing and verifying are in sign.ts, opening a sealed body in open.ts.
 *
 * Three versions are read; this implementation writes version 4 (sign.ts).
 *
 * Version 4 (`"v": 4`): the body is sealed to the recipient (seal.ts). On the wire it
 * carries only the header — from, to, to_session, ts, kind, msg_id — and `sealed`, the
 * encrypted body (text, status, task_id, in_reply_to, reply session); the signature covers
 * the header and the ciphertext. Stores keep the opened form: the wire fields (signature
 * and ciphertext, as admitted) plus the body they hold.
 *
 * Version 3 (`"v": 3`), clear: every field is signed, the recipient's session and the
 * reply session among them; `reply_to` must name the sender's own key.
 *
 * Version 2 (no `v`): the Rust Interlink's layout. Its session is not signed, so a replay
 * into another session is stopped only by the receiver's per-identity replay index
 * (agent/claims.ts); its `reply_to` is an unsigned hint honoured only when its key is
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
import { isBase64urlOfLength, isCanonicalBase64url } from '../identity/base64url.js';
import { PUBLIC_KEY_BYTES, SIGNATURE_BYTES } from '../identity/ed25519.js';
import { isWellFormedUnicode, unsafeNameReason } from '../config/paths.js';
import { parseRoute, routeText } from './route.js';
import { MIN_PADDED_BYTES, NONCE_BYTES, TAG_BYTES } from './seal.js';

/** The versions this implementation reads (signed-bytes.ts lays out what each signs). */
export type EnvelopeVersion = 2 | 3 | 4;

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

export const sessionText = z.string().refine((s) => unsafeNameReason(s) === undefined, 'must be a session id (1 to 128 bytes in NFC, no "..", "/", "\\", control or format characters or surrounding white space)');

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
  /**
   * Version 4 only, inside the sealed body: the id shared by the copies of one message sent
   * to several recipients at once (agent/groups.ts). Sealed and so signed with the body.
   */
  group: msgIdText.optional(),
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
  // The clear versions' signed bytes have no place for it: it would travel unsigned.
  if (version !== 4 && envelope.group !== undefined) ctx.addIssue({ code: 'custom', path: ['group'], message: 'is part of version 4 only (the clear versions do not sign it)' });
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
export type UnsignedWire = Omit<Envelope, 'sig'> | Omit<SealedWire, 'sig'>;

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

/** The envelope as a relay carries it: a version 4 envelope without its opened body. */
export function wireOf(envelope: Envelope): WireEnvelope {
  if (envelope.v !== 4 || envelope.sealed === undefined || envelope.to_session === undefined) return envelope;
  return { v: 4, from: envelope.from, to: envelope.to, to_session: envelope.to_session, ts: envelope.ts, msg_id: envelope.msg_id, kind: envelope.kind, sealed: envelope.sealed, sig: envelope.sig };
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
