/**
 * The mailbox in memory: records, tombstones and the indexes and counters over them, and
 * admission, acknowledgement and pruning as they change them. Its parts that stand alone
 * have their files: tombstones and floors (tombstones.ts), the bounds' refusals
 * (refusals.ts), each sender's unread holdings (holdings.ts) and the notice reservation
 * (notice-reservation.ts). No I/O. Applying the same operations in the same order always
 * gives the same state, which is what lets the journal be replayed after a crash.
 */
import { receiptKey, receiptOf, type Receipt } from '../envelope/receipt.js';
import type { AckOp, MailboxData, Op, Refusal, Reservation, StoreOp, StoredRecord } from './format.js';
import {
  type Bound,
  type Holdings,
  type Limits,
  RETENTION_MS,
  admitToShare,
  inDeliveryOrder,
  isProgress,
  senderOrder,
  senderShare,
  supersede,
  supersessionKey,
  tombstoneBound,
  victims,
} from './rules.js';
import { MAX_PAST_MS } from '../gate/decide.js';
import { Tombstones } from './tombstones.js';
import { Refusals } from './refusals.js';
import { NoticeReservation, type NoticeChange } from './notice-reservation.js';
import { isAcknowledged, isUnread } from './record-state.js';
import { UnreadHoldings, unreadChange } from './holdings.js';

export type StoreOutcome =
  | { outcome: 'stored'; record: StoredRecord }
  | { outcome: 'duplicate' }
  /** Signed at or before what the mailbox still remembers of its sender (tombstones.ts): it may be a copy. */
  | { outcome: 'forgotten' }
  /** A bound refused it (`reason`) for `sender`; `noted` when that refusal is news and so journaled. */
  | { outcome: 'full'; reason: Bound; sender: string; noted: boolean };

/** What a mailbox holds against its bounds, for `status` and notices. */
export interface BoundsReport {
  /** Unread records and bytes per sender, against `share`. */
  senders: { sender: string; unread: Holdings }[];
  share: Holdings;
  refusals: Refusal[];
  /** Senders that lost tombstones to the count bound, and the floor each has. */
  forgotten: { sender: string; until: number }[];
}

export interface AckCounts {
  acknowledged: number;
  already_acknowledged: number;
  unknown: number;
}

/** Bytes a store op occupies: the unit of the admission byte bound. */
export function storeOpSize(op: StoreOp): number {
  return Buffer.byteLength(JSON.stringify(op), 'utf8');
}

export class MailboxState {
  /** Insertion order is arrival order (seq ascending). */
  private readonly records = new Map<string, StoredRecord>();
  private readonly tombstones: Tombstones;
  private readonly refusals: Refusals;
  /**
   * supersession key → receipt keys of the records that decide what an arrival supersedes:
   * terminal records and progress not superseded. Superseded progress is left out: it is
   * older than the task's unsuperseded progress or its terminal record, so it never decides
   * anything, and a flood of updates for one task keeps this list at one entry.
   */
  private readonly tasks = new Map<string, string[]>();
  private readonly unread = new UnreadHoldings();
  private nextSeq = 0;
  private bytes = 0;
  /**
   * No record, tombstone or refusal can be pruned at or before this time. Kept as a lower
   * bound (lowered whenever something becomes prunable, recomputed by each full scan), so
   * a store skips the scan that would find nothing: pruning stays O(1) per arrival.
   */
  private pruneNotBefore = -Infinity;
  private reservation = new NoticeReservation();

  constructor(
    readonly limits: Limits,
    data: Pick<MailboxData, 'tombstones' | 'floors' | 'refusals'> = { tombstones: [], floors: [], refusals: [] },
  ) {
    this.tombstones = Tombstones.fromData(data.tombstones, data.floors, tombstoneBound(limits));
    this.refusals = Refusals.fromData(data.refusals);
  }

  static fromData(data: MailboxData, limits: Limits): MailboxState {
    const state = new MailboxState(limits, data);
    state.nextSeq = data.next_seq;
    for (const record of data.records) state.insert(record);
    state.reservation = new NoticeReservation(data.notice ?? undefined);
    return state;
  }

  toData(): MailboxData {
    const { tombstones, floors } = this.tombstones.toData();
    return { next_seq: this.nextSeq, records: [...this.records.values()], tombstones, notice: this.reservation.value ?? null, floors, refusals: this.refusals.toData() };
  }

  get stats(): { records: number; unread: number; bytes: number; tombstones: number } {
    return { records: this.records.size, unread: this.unread.count, bytes: this.bytes, tombstones: this.tombstones.size };
  }

  /** Each sender's unread holdings against its share, the refusals in force and the forgetting senders. */
  bounds(): BoundsReport {
    return {
      senders: this.unread.list(),
      share: senderShare(this.limits),
      refusals: this.refusals.list(),
      forgotten: [...this.tombstones.forgotten].map(([sender, until]) => ({ sender, until })),
    };
  }

  has(sender: string, msgId: string): boolean {
    return this.records.has(receiptKey({ sender, msg_id: msgId })) || this.tombstones.has(sender, msgId);
  }

  get(sender: string, msgId: string): StoredRecord | undefined {
    return this.records.get(receiptKey({ sender, msg_id: msgId }));
  }

  /** Everything this mailbox admitted and still remembers (records and tombstones), with its signed time. */
  admitted(): { from: string; msg_id: string; ts: number }[] {
    const records = [...this.records.values()].map((r) => ({ from: r.envelope.from, msg_id: r.envelope.msg_id, ts: r.envelope.ts }));
    // A tombstone's `until` is its message's ts + MAX_PAST_MS (where records are removed, below).
    const tombstones = [...this.tombstones.entries()].map((t) => ({ from: t.sender, msg_id: t.msg_id, ts: t.until - MAX_PAST_MS }));
    return [...records, ...tombstones];
  }

  /** Every record, oldest first. */
  all(): IterableIterator<StoredRecord> {
    return this.records.values();
  }

  apply(op: Op): StoreOutcome | AckCounts | NoticeChange {
    switch (op.op) {
      case 'store':
        return this.store(op);
      case 'ack':
        return this.acknowledge(op);
      case 'notice_reserve':
        return this.reservation.reserve(op);
      case 'notice_outcome':
        return this.reservation.recordOutcome(op, this.records);
      case 'notice_reset':
        return this.reservation.reset();
    }
  }

  /** The current notice reservation, if one is outstanding. */
  get notice(): Reservation | undefined {
    return this.reservation.value;
  }

  /** Receipts of unread messages that deserve a notice (everything but progress), in arrival order. */
  attention(): Receipt[] {
    const receipts: Receipt[] = [];
    for (const record of this.records.values()) if (isUnread(record) && !isProgress(record.envelope)) receipts.push(receiptOf(record.envelope));
    return receipts;
  }

  /**
   * Admission (DESIGN.md "The mailbox"): a duplicate or a forgotten message is refused;
   * then the sender's share, then the mailbox's bounds, evicting superseded progress and
   * acknowledged records if it must. Unread records are never evicted.
   */
  store(op: StoreOp): StoreOutcome {
    const { envelope } = op;
    this.prune(op.at);
    if (this.has(envelope.from, envelope.msg_id)) return { outcome: 'duplicate' };
    if (this.tombstones.forgets(envelope.from, envelope.ts)) return { outcome: 'forgotten' };
    const size = storeOpSize(op);
    const task = supersessionKey(envelope);
    const members = (task === undefined ? [] : (this.tasks.get(task) ?? [])).map((k) => this.records.get(k)!);
    const decision: { self?: string; others: string[] } = task === undefined ? { others: [] } : supersede(envelope, members.map((r) => ({ envelope: r.envelope, supersededBy: r.superseded_by })));
    const superseded = decision.others.map((msgId) => members.find((r) => r.envelope.msg_id === msgId)!);
    const change = unreadChange(size, decision.self !== undefined, superseded);
    // An op from before the shares was admitted without them: replayed the same way.
    const share = op.rules === 2 ? admitToShare(this.unread.of(envelope.from), change, this.limits) : ({ ok: true } as const);
    if (!share.ok) return this.refuse(op, share.reason);
    const room = victims({ records: this.records.size, bytes: this.bytes }, size, this.limits, this.evictable(new Set(superseded)));
    if (!room.ok) return this.refuse(op, room.reason);
    for (const victim of room.taken) this.remove(receiptKey(receiptOf(victim.envelope)), victim, op.at);
    const record: StoredRecord = {
      seq: this.nextSeq++,
      envelope,
      ...(op.peer !== undefined && { peer: op.peer }),
      received_at: op.at,
      size,
      states: [{ state: 'receiver_stored', at: op.at }],
      ...(decision.self !== undefined && { superseded_by: decision.self }),
    };
    if (decision.self !== undefined) this.becamePrunable(record);
    for (const older of superseded) if (this.records.has(receiptKey(receiptOf(older.envelope)))) this.markSuperseded(older, envelope.msg_id);
    this.insert(record);
    this.refusals.admitted(envelope.from, change.records > 0);
    this.reservation.releaseIfDone(this.records);
    return { outcome: 'stored', record };
  }

  acknowledge(op: AckOp): AckCounts {
    const counts: AckCounts = { acknowledged: 0, already_acknowledged: 0, unknown: 0 };
    for (const receipt of op.receipts) {
      const record = this.records.get(receiptKey(receipt));
      if (record === undefined) {
        if (this.tombstones.has(receipt.sender, receipt.msg_id)) counts.already_acknowledged++;
        else counts.unknown++;
        continue;
      }
      if (isAcknowledged(record)) {
        counts.already_acknowledged++;
        continue;
      }
      if (isUnread(record)) this.unread.change(record, -1);
      record.states.push({ state: 'receiver_acknowledged', at: op.at });
      this.becamePrunable(record);
      counts.acknowledged++;
    }
    this.reservation.releaseIfDone(this.records);
    return counts;
  }

  /**
   * Unread records as fetch returns them: non-progress first (DESIGN.md "The mailbox"; PROTOCOL.md "Order")
   * (a question or result is never stuck behind progress), then progress; within each,
   * delivery order (each sender's as it sent them, senders by arrival).
   */
  unreadInFetchOrder(): StoredRecord[] {
    const unread: StoredRecord[] = [];
    for (const record of this.records.values()) if (isUnread(record)) unread.push(record);
    const ordered = inDeliveryOrder(unread);
    return [...ordered.filter((r) => !isProgress(r.envelope)), ...ordered.filter((r) => isProgress(r.envelope))];
  }

  /** Every record from `sender`, in the order it sent them. */
  fromSender(sender: string): StoredRecord[] {
    const mine: StoredRecord[] = [];
    for (const record of this.records.values()) if (record.envelope.from === sender) mine.push(record);
    return mine.sort(senderOrder);
  }

  private insert(record: StoredRecord): void {
    const key = receiptKey(receiptOf(record.envelope));
    this.records.set(key, record);
    this.bytes += record.size;
    if (isUnread(record)) this.unread.change(record, 1);
    const task = supersessionKey(record.envelope);
    if (task !== undefined && record.superseded_by === undefined) {
      const members = this.tasks.get(task);
      if (members) members.push(key);
      else this.tasks.set(task, [key]);
    }
  }

  private leaveTask(key: string, record: StoredRecord): void {
    const task = supersessionKey(record.envelope);
    if (task === undefined) return;
    const members = this.tasks.get(task)?.filter((k) => k !== key) ?? [];
    if (members.length > 0) this.tasks.set(task, members);
    else this.tasks.delete(task);
  }

  private remove(key: string, record: StoredRecord, now: number): void {
    this.records.delete(key);
    this.bytes -= record.size;
    if (isUnread(record)) this.unread.change(record, -1);
    this.leaveTask(key, record);
    // The gate refuses anything older than the freshness window, so the tombstone
    // needs to outlive the envelope's timestamp by exactly that window.
    const until = record.envelope.ts + MAX_PAST_MS;
    if (until < now) return;
    this.tombstones.lay(record.envelope.from, record.envelope.msg_id, until);
    this.pruneNotBefore = Math.min(this.pruneNotBefore, until);
  }

  /** What admission may evict, in order: superseded progress (and what this arrival supersedes), then acknowledged records; each oldest first. */
  private *evictable(supersededNow: ReadonlySet<StoredRecord>): Generator<StoredRecord> {
    for (const record of this.records.values()) if (record.superseded_by !== undefined || supersededNow.has(record)) yield record;
    for (const record of this.records.values()) if (record.superseded_by === undefined && !supersededNow.has(record) && isAcknowledged(record)) yield record;
  }

  /** A refusal; journaled (`noted`) only when it is news, so a relay offering the message again costs no write. */
  private refuse(op: StoreOp, reason: Bound): StoreOutcome {
    const noted = this.refusals.note(op.envelope.from, reason, op.at);
    if (noted) this.pruneNotBefore = Math.min(this.pruneNotBefore, op.at + RETENTION_MS);
    return { outcome: 'full', reason, sender: op.envelope.from, noted };
  }

  private becamePrunable(record: StoredRecord): void {
    this.pruneNotBefore = Math.min(this.pruneNotBefore, record.received_at + RETENTION_MS);
  }

  private markSuperseded(older: StoredRecord, by: string): void {
    if (isUnread(older)) this.unread.change(older, -1);
    this.leaveTask(receiptKey(receiptOf(older.envelope)), older);
    older.superseded_by = by;
    this.becamePrunable(older);
  }

  /** Acknowledged and superseded records older than the retention window leave; tombstones and refusals expire. */
  private prune(now: number): void {
    if (now <= this.pruneNotBefore) return;
    // Recomputed from scratch; remove() lowers it again for the tombstones it leaves.
    this.pruneNotBefore = Math.min(this.tombstones.expire(now), this.refusals.expire(now));
    for (const [key, record] of this.records) {
      if (isUnread(record)) continue;
      if (record.received_at + RETENTION_MS < now) this.remove(key, record, now);
      else this.becamePrunable(record);
    }
  }
}
