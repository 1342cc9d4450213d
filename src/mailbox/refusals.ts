/**
 * Which senders a bound is refusing, so `status` and the notice can name the bound and the
 * peer (DESIGN.md "The mailbox": "When a bound refuses"). Part of the mailbox state: a
 * refusal that is news is journaled with the store op that met it, so every process and
 * every read-only view sees the same. A refused message stays on its relay and is offered
 * again, so one sender's refusals are noted at most once a minute: the journal grows by at
 * most one line a minute per refused sender, however often its mail is offered.
 */
import type { Refusal } from './format.js';
import { type Bound, type Limits, RETENTION_MS, senderShare } from './rules.js';

/** A refusal already noted is noted again (journaled) after this long, to say it still holds. */
export const REFUSAL_NOTE_MS = 60_000;
/** Senders are peers the gate admitted, so few; this only bounds a snapshot that was edited. */
const MAX_REFUSALS = 256;

export class Refusals {
  private readonly bySender = new Map<string, Refusal>();

  static fromData(refusals: readonly Refusal[]): Refusals {
    const state = new Refusals();
    for (const r of refusals) state.bySender.set(r.sender, { ...r });
    return state;
  }

  toData(): Refusal[] {
    return [...this.bySender.values()].map((r) => ({ ...r }));
  }

  /** Notes that `bound` refused mail of `sender` at `at`; true when that is news. */
  note(sender: string, bound: Bound, at: number): boolean {
    const last = this.bySender.get(sender);
    if (last !== undefined && last.bound === bound && at - last.at < REFUSAL_NOTE_MS) return false;
    this.bySender.delete(sender);
    this.bySender.set(sender, { sender, bound, since: last?.bound === bound ? last.since : at, at });
    if (this.bySender.size > MAX_REFUSALS) this.bySender.delete(this.bySender.keys().next().value!);
    return true;
  }

  /**
   * A message of `sender` was admitted. The refusal is over if that admission passed the
   * bound that refused: the mailbox's bounds test every arrival, a sender's share only an
   * arrival that grows its unread records (`grew`).
   */
  admitted(sender: string, grew: boolean): void {
    const last = this.bySender.get(sender);
    if (last === undefined) return;
    if (grew || last.bound === 'records' || last.bound === 'bytes') this.bySender.delete(sender);
  }

  /** Forgets refusals not seen again for a day (the sender stopped, or its relay let go); returns when the next one is due. */
  expire(now: number): number {
    let next = Infinity;
    for (const [sender, r] of this.bySender) {
      if (r.at + RETENTION_MS < now) this.bySender.delete(sender);
      else next = Math.min(next, r.at + RETENTION_MS);
    }
    return next;
  }

  list(): Refusal[] {
    return this.toData();
  }
}

const MIB = 1024 * 1024;

/** What a bound is, in words: "its share of 1024 unread messages", "the mailbox's 32 MiB". */
export function boundText(bound: Bound, limits: Limits): string {
  const share = senderShare(limits);
  switch (bound) {
    case 'sender_records':
      return `its share of ${share.records} unread messages`;
    case 'sender_bytes':
      return `its share of ${Math.round(share.bytes / MIB)} MiB of unread messages`;
    case 'records':
      return `the mailbox's ${limits.maxRecords} records`;
    case 'bytes':
      return `the mailbox's ${Math.round(limits.maxBytes / MIB)} MiB`;
  }
}

/**
 * One sentence naming the peer and the bound, and what lets its mail in again (for
 * `status` and notices): "mail from bob is refused since <time>: bob holds its share of
 * 1024 unread messages (sender_records); it waits on the relay until some are acknowledged".
 */
export function refusalSentence(refusal: Refusal, name: string, limits: Limits): string {
  const since = new Date(refusal.since).toISOString();
  const who = refusal.bound.startsWith('sender_') ? `${name} holds ${boundText(refusal.bound, limits)}` : `${boundText(refusal.bound, limits)} are full of unread messages`;
  const until = refusal.bound.startsWith('sender_') ? `some of ${name}'s messages are acknowledged` : 'some messages are acknowledged';
  return `mail from ${name} is refused since ${since}: ${who} (${refusal.bound}); it waits on the relay until ${until}`;
}
