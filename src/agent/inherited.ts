/**
 * Reading and acknowledging across this session's mailbox and those of the ended sessions
 * it took (agent/succession.ts). A taken message is presented as what it is: signed for
 * its own session, which `to_session` names; nothing about it is rewritten.
 */
import type { Receipt } from '../envelope/receipt.js';
import type { FetchResult, Mailbox } from '../mailbox/mailbox.js';
import { isProgress } from '../mailbox/rules.js';
import type { AckCounts } from '../mailbox/state.js';
import { inboxMessage, type InboxMessage } from './reading.js';

/**
 * One page of unread mail from several mailboxes (pure): this session's first, then each
 * taken session's in the order given, each in its own delivery order; progress updates
 * after everything that deserves attention, as within one mailbox.
 */
export function presentTogether(own: FetchResult, taken: readonly { session: string; fetched: FetchResult }[], limit: number): { messages: InboxMessage[]; more: boolean } {
  const all = [
    ...own.messages.map((record) => inboxMessage(record)),
    ...taken.flatMap(({ session, fetched }) => fetched.messages.map((record) => ({ ...inboxMessage(record), to_session: session }))),
  ];
  const ordered = [...all.filter((m) => !isProgress(m)), ...all.filter((m) => isProgress(m))];
  return { messages: ordered.slice(0, limit), more: own.more || taken.some((t) => t.fetched.more) || ordered.length > limit };
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
