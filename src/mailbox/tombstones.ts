/**
 * What the mailbox remembers of records that left it, so a copy of one (a second relay's,
 * a redelivery, a replay) never comes back as new: a tombstone per removed record, and
 * per sender a floor below which it remembers nothing and refuses everything (DESIGN.md
 * "The mailbox": "Tombstones").
 *
 * A tombstone lives until its message's `ts` leaves the gate's window (`until` =
 * ts + MAX_PAST_MS): after that the gate refuses a copy as stale on its own. Tombstones
 * are bounded in count too. Past the bound the sender holding the most loses its oldest
 * tombstone, and its floor rises to that message's `until`: from then on a message of that
 * sender signed at or before that time is refused, whether it is the forgotten one or a
 * message that waited on a relay all that time. So a flood forgets only its own removed
 * messages, and what is forgotten is never admitted twice.
 */
import { MAX_PAST_MS } from '../gate/decide.js';
import type { Floor, Tombstone } from './format.js';
import { heaviestSender } from './rules.js';

export class Tombstones {
  /** sender → msg_id → until, each sender's in the order they were laid. */
  private readonly bySender = new Map<string, Map<string, number>>();
  /** sender → the `until` of the newest tombstone it lost to the bound. */
  private readonly floors = new Map<string, number>();
  private count = 0;

  constructor(private readonly bound: number) {}

  static fromData(tombstones: readonly Tombstone[], floors: readonly Floor[], bound: number): Tombstones {
    const state = new Tombstones(bound);
    for (const t of tombstones) state.add(t.sender, t.msg_id, t.until);
    for (const f of floors) state.floors.set(f.sender, f.until);
    return state;
  }

  toData(): { tombstones: Tombstone[]; floors: Floor[] } {
    return { tombstones: [...this.entries()], floors: [...this.floors].map(([sender, until]) => ({ sender, until })) };
  }

  get size(): number {
    return this.count;
  }

  /** Senders whose oldest tombstones the bound took, with the floor each now has. */
  get forgotten(): ReadonlyMap<string, number> {
    return this.floors;
  }

  *entries(): IterableIterator<Tombstone> {
    for (const [sender, mine] of this.bySender) for (const [msg_id, until] of mine) yield { sender, msg_id, until };
  }

  has(sender: string, msgId: string): boolean {
    return this.bySender.get(sender)?.has(msgId) === true;
  }

  /** Whether a message of `sender` signed at `ts` is at or below what the mailbox still remembers of it. */
  forgets(sender: string, ts: number): boolean {
    const floor = this.floors.get(sender);
    return floor !== undefined && ts + MAX_PAST_MS <= floor;
  }

  /** Remembers a removed record; past the bound the heaviest sender forgets its oldest. */
  lay(sender: string, msgId: string, until: number): void {
    this.add(sender, msgId, until);
    while (this.count > this.bound) this.forgetOne();
  }

  /** Drops what expired before `now`; returns the earliest `until` still held (Infinity if none). */
  expire(now: number): number {
    let earliest = Infinity;
    for (const [sender, mine] of this.bySender) {
      for (const [msgId, until] of mine) {
        if (until < now) this.delete(sender, mine, msgId);
        else earliest = Math.min(earliest, until);
      }
    }
    for (const [sender, until] of this.floors) {
      if (until < now) this.floors.delete(sender);
      else earliest = Math.min(earliest, until);
    }
    return earliest;
  }

  private add(sender: string, msgId: string, until: number): void {
    let mine = this.bySender.get(sender);
    if (mine === undefined) this.bySender.set(sender, (mine = new Map()));
    if (!mine.has(msgId)) this.count++;
    mine.set(msgId, until);
  }

  private delete(sender: string, mine: Map<string, number>, msgId: string): void {
    mine.delete(msgId);
    this.count--;
    if (mine.size === 0) this.bySender.delete(sender);
  }

  private forgetOne(): void {
    const sender = heaviestSender(new Map([...this.bySender].map(([s, mine]) => [s, mine.size])))!;
    const mine = this.bySender.get(sender)!;
    const [msgId, until] = mine.entries().next().value!;
    this.delete(sender, mine, msgId);
    this.floors.set(sender, Math.max(this.floors.get(sender) ?? -Infinity, until));
  }
}
