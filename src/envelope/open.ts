/**
 * Opening a sealed (version 4) envelope: its body decrypted under the key sender and
 * recipient share (seal.ts), then held to the rules of the clear fields, so an opened
 * message obeys every rule a clear one does. A body that does not open, or breaks a rule,
 * is `bad_seal`.
 */
import { z } from 'zod';
import { InterlinkError } from '../errors.js';
import type { SigningKey } from '../identity/ed25519.js';
import { unsafeNameReason } from '../config/paths.js';
import { MAX_TASK_ID_BYTES, MAX_TEXT_BYTES, MSG_ID, STATUSES, envelopeFields, sessionText, type Envelope, type SealedWire, type Status } from './envelope.js';
import { formatRoute } from './route.js';
import { SealError, openBody, sealHeaderOf, type SealedBody } from './seal.js';
import { sealedBytesOf } from './signed-bytes.js';

/**
 * Opens a sealed envelope addressed to `me` (or sent by `me`): the envelope with its body.
 * Throws InterlinkError `bad_seal` when the body does not open under the key the two
 * share, or what it holds breaks the rules of the clear fields.
 */
export function openEnvelope(me: SigningKey, wire: SealedWire): Envelope {
  let body: SealedBody;
  try {
    body = openBody(me, wire.from, wire.to, sealHeaderOf(wire), sealedBytesOf(wire, wire.sealed));
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
    ...(body.group !== undefined && { group: body.group }),
  };
}

/** What a sealed body holds, by the rules of the clear fields (the reply session by the session rule). */
const openedFieldsSchema = z.object({
  text: envelopeFields.shape.text,
  task_id: envelopeFields.shape.task_id,
  status: envelopeFields.shape.status,
  in_reply_to: envelopeFields.shape.in_reply_to,
  reply_session: sessionText.optional(),
  group: envelopeFields.shape.group,
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
    (body.reply_session === undefined || unsafeNameReason(body.reply_session) === undefined) &&
    (body.group === undefined || MSG_ID.test(body.group))
  );
}
