/**
 * Signed envelopes of a fixed wire size, as the storage benchmarks store them. Signing
 * happens up front so that no benchmark times it by accident.
 */
import { randomBytes } from 'node:crypto';
import type { Envelope } from '../../src/envelope/envelope.js';
import { signEnvelope } from '../../src/envelope/sign.js';
import { generateSigningKey, type SigningKey } from '../../src/identity/ed25519.js';
import { encodeBase64url } from '../../src/identity/base64url.js';

export const RECORD_BYTES = 1024;

export interface Correspondents {
  sender: SigningKey;
  recipient: string;
}

export function newCorrespondents(): Correspondents {
  return { sender: generateSigningKey(), recipient: encodeBase64url(generateSigningKey().publicKey) };
}

/** Printable text of exactly `length` ASCII characters that does not compress. */
export function randomText(length: number): string {
  return randomBytes(Math.ceil((length * 3) / 4) + 3)
    .toString('base64url')
    .slice(0, length);
}

/**
 * The text length that makes the envelope's JSON (as stores hold it: the sealed body and
 * the opened text) about `bytes` long, never longer. The sealed part grows by size
 * classes, so a few steps down from the first guess find it.
 */
function textLengthFor(who: Correspondents, bytes: number): number {
  const size = (length: number) => Buffer.byteLength(JSON.stringify(signEnvelope(who.sender, { to: who.recipient, to_session: 'main', text: 'x'.repeat(length) })));
  let length = Math.max(0, bytes - size(0));
  for (let step = 0; step < 8 && length > 0 && size(length) > bytes; step++) length = Math.max(0, length - (size(length) - bytes));
  return length;
}

/** Sealed envelopes as stores hold them (`wireOf` gives what a relay carries). */
export function makeEnvelopes(who: Correspondents, count: number, bytes = RECORD_BYTES): Envelope[] {
  const length = textLengthFor(who, bytes);
  return Array.from({ length: count }, () => signEnvelope(who.sender, { to: who.recipient, to_session: 'main', text: randomText(length) }));
}
