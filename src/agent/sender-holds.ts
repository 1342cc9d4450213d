/**
 * Mail a sender must wait with while its share of the mailbox is full (DESIGN.md "The
 * mailbox": "one sender's share"). A message the mailbox refuses for its sender's share is
 * deferred on its relay (relay/deferrals.ts): it leaves the route's delivery window, so
 * every other sender's mail flows past it, and comes again later. Deferring breaks the
 * relay's order for that sender unless its later messages wait too: once one of a
 * sender's messages is held here, the sender's later messages (by signed `ts`) are
 * deferred without being tried, until the held one is admitted. Then the rest are asked
 * for at once, and come in the order the sender signed them.
 *
 * The earliest held message is tried again after 1 s, then 2, 4, 8 and every 10 s while it
 * keeps being refused (the person has not read that sender's mail); the ones behind it
 * every BEHIND_MS, each time costing a relay read and a parse, not a signature check. A
 * hold not seen again for HOLD_FORGET_MS — longer than any delay asked — is forgotten
 * (its message was taken elsewhere, or expired on its relay), so it never blocks a sender
 * for good. Memory only: after a restart the relays deliver every unacknowledged
 * message again, in their order.
 *
 * `W` is where a held message waits (its relay, route and id), handed back to be asked
 * for again.
 */

const FIRST_DELAY_MS = 1_000;
const MAX_DELAY_MS = 10_000;
/** How long the relay keeps back a message that waits behind its sender's earliest held one. */
export const BEHIND_MS = 60_000;
/** Longer than any delay asked of a relay: a deferred message comes back well within it. */
export const HOLD_FORGET_MS = 5 * BEHIND_MS;
/** Held messages remembered per sender; past it the newest are deferred without being remembered. */
const MAX_HELD_PER_SENDER = 4_096;

interface Held<W> {
  msgId: string;
  ts: number;
  seen: number;
  where: W;
}

interface Sender<W> {
  held: Held<W>[];
  /** How often in a row the earliest held message was refused. */
  refusals: number;
}

export class SenderHolds<W> {
  private readonly senders = new Map<string, Sender<W>>();

  /**
   * Whether a message of `from` must wait behind an earlier one of that sender held here
   * (then it is deferred for BEHIND_MS without being tried). The earliest held message
   * itself, and one signed before it, are tried.
   */
  behind(from: string, msgId: string, ts: number, now: number, where: W): boolean {
    const sender = this.current(from, now);
    if (sender === undefined) return false;
    const first = sender.held[0]!;
    if (msgId === first.msgId || ts < first.ts) return false;
    this.note(sender, { msgId, ts, seen: now, where });
    return true;
  }

  /** The mailbox refused it for its sender's share: it is held. Returns the delay to ask its relay for. */
  refused(from: string, msgId: string, ts: number, now: number, where: W): number {
    const sender = this.current(from, now) ?? { held: [], refusals: 0 };
    this.senders.set(from, sender);
    this.note(sender, { msgId, ts, seen: now, where });
    if (sender.held[0]!.msgId === msgId) sender.refusals++;
    return Math.min(MAX_DELAY_MS, FIRST_DELAY_MS * 2 ** (sender.refusals - 1));
  }

  /**
   * Admitted, or dropped: no longer held. When it was its sender's earliest, the rest of
   * that sender's held messages are returned, to be asked for now.
   */
  settled(from: string, msgId: string): W[] {
    const sender = this.senders.get(from);
    const at = sender?.held.findIndex((h) => h.msgId === msgId) ?? -1;
    if (sender === undefined || at < 0) return [];
    sender.held.splice(at, 1);
    if (sender.held.length === 0) this.senders.delete(from);
    if (at > 0) return [];
    sender.refusals = 0;
    return sender.held.map((h) => h.where);
  }

  /** How many of `from`'s messages are held here. */
  held(from: string): number {
    return this.senders.get(from)?.held.length ?? 0;
  }

  /** The sender's holds, without those not seen for HOLD_FORGET_MS; undefined when none is left. */
  private current(from: string, now: number): Sender<W> | undefined {
    const sender = this.senders.get(from);
    if (sender === undefined) return undefined;
    const kept = sender.held.filter((h) => now - h.seen < HOLD_FORGET_MS);
    if (kept.length === 0) {
      this.senders.delete(from);
      return undefined;
    }
    if (kept[0] !== sender.held[0]) sender.refusals = 0;
    sender.held = kept;
    return sender;
  }

  /** Remembers (or refreshes) a held message, in signed order. */
  private note(sender: Sender<W>, held: Held<W>): void {
    const known = sender.held.find((h) => h.msgId === held.msgId);
    if (known !== undefined) {
      known.seen = held.seen;
      known.where = held.where;
      return;
    }
    if (sender.held.length >= MAX_HELD_PER_SENDER) return;
    let at = sender.held.length;
    while (at > 0 && sender.held[at - 1]!.ts > held.ts) at--;
    sender.held.splice(at, 0, held);
  }
}
