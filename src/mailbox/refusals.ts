/**
 * Which senders a bound is refusing, so `status` and the notice can name the bound and the
 * peer (DESIGN.md "The mailbox": "When a bound refuses"). Part of the mailbox state: a
 * refusal that is news is journaled with the store op that met it, so every process and
 * every read-only view sees the same. A refused message stays on its relay and is offered
 * again, so one sender's refusals are noted at most once a minute: the journal grows by at
 * most one line a minute per refused sender, however often its mail is offered.
 */
import type { Refusal } from './format.js';
import { type Bound, RETENTION_MS } from './rules.js';

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
