/**
 * The verification code two people compare when they pair (DESIGN.md, "Pairing").
 *
 * Both sides compute it from the same three values: the requester's public key, the
 * accepter's public key and the request's msg_id. If a relay or roster substituted a key
 * anywhere (so that each person actually paired with an attacker), the two sides see
 * codes over different inputs, and they differ.
 *
 * The code is 64 bits, shown as four groups of five digits. An attacker in the middle
 * knows one side's inputs before choosing its own key and request id, so it could search
 * for a request whose code matches; at 64 bits that search (about 2^63 hashes on average)
 * is far beyond the few minutes a pairing takes.
 */
import { createHash } from 'node:crypto';
import { parsePublicKey } from '../identity/identity.js';

export const CODE_DOMAIN = 'interlink-pair-code-v1\0';

export function verificationCode(requesterKey: string, accepterKey: string, requestId: string): string {
  const digest = createHash('sha256')
    .update(CODE_DOMAIN)
    .update(parsePublicKey(requesterKey, 'requester key'))
    .update(parsePublicKey(accepterKey, 'accepter key'))
    .update(Buffer.from(requestId, 'utf8'))
    .digest();
  const value = digest.readBigUInt64BE(0);
  const digits = value.toString().padStart(20, '0');
  return `${digits.slice(0, 5)}-${digits.slice(5, 10)}-${digits.slice(10, 15)}-${digits.slice(15, 20)}`;
}
