/**
 * The per-identity replay index, as pure state: which session of this identity admitted
 * each (sender, msg_id) (DESIGN.md "Replay"). Every session of an identity shares one
 * index, so a copy of a signed message offered to another session — by a relay, or by
 * anyone who holds a copy — is refused there, whatever the session part of its route says.
 *
 * An entry lives as long as the trust gate could admit a copy: until its `ts` falls out
 * of the freshness window (plus the hold a message from the future may wait). After that
 * the gate refuses the copy as `stale` on its own. The count is bounded too: a full index
 * refuses new claims (the message stays on the relay and is offered again), it never
 * forgets an entry early.
 */
import { z } from 'zod';
import { msgIdText as msgId } from '../envelope/envelope.js';
import { receiptKey } from '../envelope/receipt.js';
import { MAX_HOLD_MS, MAX_PAST_MS } from '../gate/decide.js';

/** Entries one identity's index may hold at once (about 150 bytes each on disk). */
export const MAX_CLAIMS = 100_000;
/** How long past its `ts` an entry is kept: the gate's window plus the hold. */
export const CLAIM_KEEP_MS = MAX_PAST_MS + MAX_HOLD_MS;

const key = z.string().min(1).max(64);
const session = z.string().min(1).max(512);
const time = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);

export const claimOpSchema = z.object({ op: z.literal('claim'), at: time, from: key, msg_id: msgId, session, ts: time });
export type ClaimOp = z.infer<typeof claimOpSchema>;

const entrySchema = z.object({ from: key, msg_id: msgId, session, until: time });
type Entry = z.infer<typeof entrySchema>;
export const claimsDataSchema = z.object({ latest: time, entries: z.array(entrySchema) });
export type ClaimsData = z.infer<typeof claimsDataSchema>;

export type ClaimOutcome =
  /** First seen: this session admits it. */
  | { outcome: 'claimed' }
  /** This session claimed it before (a crash between claim and commit, or a redelivery). */
  | { outcome: 'mine'; changed: boolean }
  /** Another session of this identity admitted it: a replay. */
  | { outcome: 'taken'; session: string }
  /** The index is full of entries still inside the window. */
  | { outcome: 'full' };

function entryKey(from: string, msgId: string): string {
  return receiptKey({ sender: from, msg_id: msgId });
}

export class ClaimsState {
  /** Insertion order, so expired entries are mostly at the front. */
  private readonly entries = new Map<string, Entry>();
  /** The latest `at` of any op applied: the index's notion of now (deterministic on replay). */
  private latest = 0;

  constructor(private readonly limit = MAX_CLAIMS) {}

  static fromData(data: ClaimsData, limit = MAX_CLAIMS): ClaimsState {
    const state = new ClaimsState(limit);
    state.latest = data.latest;
    for (const entry of data.entries) state.entries.set(entryKey(entry.from, entry.msg_id), entry);
    return state;
  }

  /** Snapshot: entries that can no longer matter are left out. */
  toData(): ClaimsData {
    return { latest: this.latest, entries: [...this.entries.values()].filter((e) => e.until >= this.latest) };
  }

  /** Entries still inside the window at `now`, against the limit (a full index refuses new claims): for `status`. */
  fill(now: number): { entries: number; limit: number } {
    let entries = 0;
    for (const entry of this.entries.values()) if (entry.until >= now) entries++;
    return { entries, limit: this.limit };
  }

  /** Who admitted it, if anyone still remembered, without claiming. */
  holder(from: string, msgId: string): string | undefined {
    return this.live(entryKey(from, msgId))?.session;
  }

  /** The entry under `k` unless it expired (an expired one may linger behind a younger one). */
  private live(k: string): Entry | undefined {
    const entry = this.entries.get(k);
    return entry !== undefined && entry.until >= this.latest ? entry : undefined;
  }

  apply(op: ClaimOp): ClaimOutcome {
    this.latest = Math.max(this.latest, op.at);
    this.expireFront();
    const k = entryKey(op.from, op.msg_id);
    const until = op.ts + CLAIM_KEEP_MS;
    const existing = this.live(k);
    if (existing !== undefined) {
      if (existing.session !== op.session) return { outcome: 'taken', session: existing.session };
      // A pairing message is signed again at each offer: the latest copy sets how long to keep it.
      if (until <= existing.until) return { outcome: 'mine', changed: false };
      existing.until = until;
      return { outcome: 'mine', changed: true };
    }
    if (this.entries.size >= this.limit && !this.expireAll()) return { outcome: 'full' };
    // Deleted first, so a re-claim after expiry goes to the back in insertion order.
    this.entries.delete(k);
    this.entries.set(k, { from: op.from, msg_id: op.msg_id, session: op.session, until });
    return { outcome: 'claimed' };
  }

  /** Drops expired entries from the front (cheap, amortised). */
  private expireFront(): void {
    for (const [k, entry] of this.entries) {
      if (entry.until >= this.latest) return;
      this.entries.delete(k);
    }
  }

  /** Drops every expired entry; true when that made room. */
  private expireAll(): boolean {
    for (const [k, entry] of this.entries) if (entry.until < this.latest) this.entries.delete(k);
    return this.entries.size < this.limit;
  }
}

export function claimChanges(result: ClaimOutcome): boolean {
  return result.outcome === 'claimed' || (result.outcome === 'mine' && result.changed);
}
