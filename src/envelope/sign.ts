/**
 * Making a signed envelope and checking one: the fields are validated before anything is
 * sealed or signed, so bad fields are refused as such and never signed; a version 4 body
 * is sealed to the recipient (seal.ts) and the signature covers the ciphertext
 * (signed-bytes.ts).
 */
import { decodeBase64url, encodeBase64url } from '../identity/base64url.js';
import { PUBLIC_KEY_BYTES, SIGNATURE_BYTES, signBytes, verifyBytes, type SigningKey } from '../identity/ed25519.js';
import { newMsgId, parseStoredEnvelope, wireOf, type Envelope, type EnvelopeVersion, type Status, type UnsignedEnvelope, type WireEnvelope } from './envelope.js';
import { parseRoute } from './route.js';
import { MIN_PADDED_BYTES, NONCE_BYTES, TAG_BYTES, sealBody, sealHeaderOf } from './seal.js';
import { sealedSignedBytes, signedBytes } from './signed-bytes.js';

/** The version this implementation signs. */
export const CURRENT_VERSION = 4;

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
  /** Version 4 only: the id shared by the copies of a message sent to several recipients. */
  group?: string;
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
    ...(fields.group !== undefined && { group: fields.group }),
  };
  // Validate before sealing and signing, so bad fields are refused as such and never signed.
  const placeholder = encodeBase64url(Buffer.alloc(SIGNATURE_BYTES));
  const placeholderSeal = version === 4 ? { sealed: PLACEHOLDER_SEAL } : {};
  parseStoredEnvelope({ ...unsigned, ...placeholderSeal, sig: placeholder });
  let bytes: Buffer;
  if (version === 4 && unsigned.to_session !== undefined) {
    const sealed = sealBody(key, unsigned.to, sealHeaderOf({ ...unsigned, to_session: unsigned.to_session }), {
      text: unsigned.text,
      ...(unsigned.status !== undefined && { status: unsigned.status }),
      ...(unsigned.task_id !== undefined && { task_id: unsigned.task_id }),
      ...(unsigned.in_reply_to !== undefined && { in_reply_to: unsigned.in_reply_to }),
      ...(unsigned.reply_to !== undefined && { reply_session: parseRoute(unsigned.reply_to)?.session ?? '' }),
      ...(unsigned.group !== undefined && { group: unsigned.group }),
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
