/**
 * A receipt names one signed message: its sender's key and its msg_id (the pair the gate's
 * replay check, the mailbox and the replay index are keyed by, and what
 * `acknowledge_messages` takes). Code passes receipts as objects; `receiptKey` is the one
 * place the pair becomes a string, for map keys and the mailbox snapshot's reservation.
 */
import { z } from 'zod';
import type { Envelope } from './envelope.js';

export const receiptSchema = z.object({ sender: z.string(), msg_id: z.string() });
export type Receipt = z.infer<typeof receiptSchema>;

export function receiptOf(envelope: Pick<Envelope, 'from' | 'msg_id'>): Receipt {
  return { sender: envelope.from, msg_id: envelope.msg_id };
}

/** `"<sender> <msg_id>"`: neither part holds a space. Only ever built, never split. */
export function receiptKey(receipt: Receipt): string {
  return `${receipt.sender} ${receipt.msg_id}`;
}
