/**
 * Reading and acknowledging across this session's mailbox and those of the ended sessions
 * it took (agent/succession.ts). A taken message is presented as what it is: signed for
 * its own session, which `to_session` names; nothing about it is rewritten.
 */
import type { Receipt } from '../envelope/receipt.js';
import type { FetchResult, Mailbox } from '../mailbox/mailbox.js';
import { inDeliveryOrder, isProgress } from '../mailbox/rules.js';
import type { AckCounts } from '../mailbox/state.js';
import { inboxMessage, type InboxMessage } from './reading.js';

/**
 * One page of unread mail from several mailboxes (pure), ordered as one mailbox orders
 * its own (mailbox/rules.ts `inDeliveryOrder`): each sender's messages in the order it
 * signed them, whichever session they were written to — a reply to the ended session
 * and the next one to this session read in the order they were sent — and across
 * senders in arrival order (the time each was stored; this session's first on a tie);
 * progress updates after everything that deserves attention. Each mailbox's page must
 * hold its first `limit` unread in its own order.
 */
export function presentTogether(own: FetchResult, taken: readonly { session: string; fetched: FetchResult }[], limit: number): { messages: InboxMessage[]; more: boolean } {
  const pages = [{ session: undefined, fetched: own }, ...taken];
  const arrived = pages
    .flatMap(({ session, fetched }) => fetched.messages.map((record) => ({ record, session })))
    .sort((a, b) => a.record.received_at - b.record.received_at)
    .map((entry, seq) => ({ ...entry, seq, envelope: entry.record.envelope }));
  const ordered = inDeliveryOrder(arrived);
  const attentionFirst = [...ordered.filter((m) => !isProgress(m.envelope)), ...ordered.filter((m) => isProgress(m.envelope))];
  const messages = attentionFirst.slice(0, limit).map(({ record, session }) => (session === undefined ? inboxMessage(record) : { ...inboxMessage(record), to_session: session }));
  return { messages, more: pages.some((p) => p.fetched.more) || attentionFirst.length > limit };
}

/**
 * Acknowledges each receipt in the mailbox that holds it (this session's first); a receipt
 * none holds counts as unknown, as in one mailbox. Counts are summed.
 */
export async function acknowledgeWhereHeld(own: Mailbox, taken: readonly { mailbox: Mailbox }[], receipts: readonly Receipt[]): Promise<AckCounts> {
  const boxes = [own, ...taken.map((t) => t.mailbox)];
  const byBox = new Map<Mailbox, Receipt[]>();
  for (const receipt of receipts) {
    let holder = own;
    for (const box of boxes) {
      if (await box.has(receipt.sender, receipt.msg_id)) {
        holder = box;
        break;
      }
    }
    byBox.set(holder, [...(byBox.get(holder) ?? []), receipt]);
  }
  const counts = await Promise.all([...byBox].map(([box, some]) => box.acknowledge(some)));
  return counts.reduce((sum, c) => ({ acknowledged: sum.acknowledged + c.acknowledged, already_acknowledged: sum.already_acknowledged + c.already_acknowledged, unknown: sum.unknown + c.unknown }), { acknowledged: 0, already_acknowledged: 0, unknown: 0 });
}
