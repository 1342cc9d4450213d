/**
 * The mailbox in memory: records, tombstones and the indexes and counters over them.
 * No I/O. Applying the same operations in the same order always gives the same state,
 * which is what lets the journal be replayed after a crash.
 */
import { receiptKey, receiptOf, type Receipt } from '../envelope/receipt.js';
import type { AckOp, MailboxData, NoticeOutcomeOp, NoticeReserveOp, Op, RecordState, Reservation, StoreOp, StoredRecord, Tombstone } from './format.js';
import { type Limits, RETENTION_MS, admit, inDeliveryOrder, isProgress, senderOrder, supersede, supersessionKey } from './rules.js';
import { MAX_PAST_MS } from '../gate/decide.js';

export type StoreOutcome = { outcome: 'stored'; record: StoredRecord } | { outcome: 'duplicate' } | { outcome: 'full'; reason: 'records' | 'bytes' };

/** Whether a notice op changed anything (and so must be journaled). */
export interface NoticeChange {
  notice: boolean;
}

export interface AckCounts {
  acknowledged: number;
  already_acknowledged: number;
  unknown: number;
}

export function isAcknowledged(record: StoredRecord): boolean {
  return record.states.some((s) => s.state === 'receiver_acknowledged');
}

/** Unread: neither acknowledged nor superseded. Only these are fetched. */
export function isUnread(record: StoredRecord): boolean {
  return record.superseded_by === undefined && !isAcknowledged(record);
}

export function currentState(record: StoredRecord): RecordState {
  return record.states[record.states.length - 1]!.state;
}

/** Bytes a store op occupies: the unit of the admission byte bound. */
export function storeOpSize(op: StoreOp): number {
  return Buffer.byteLength(JSON.stringify(op), 'utf8');
}

export class MailboxState {
  /** Insertion order is arrival order (seq ascending). */
  private readonly records = new Map<string, StoredRecord>();
  private readonly tombstones = new Map<string, Tombstone>();
  /** supersession key → receipt keys of the records taking part. */
  private readonly tasks = new Map<string, string[]>();
  private nextSeq = 0;
  private bytes = 0;
  private unread = 0;
  /**
   * No record or tombstone can be pruned at or before this time. Kept as a lower bound
   * (lowered whenever something becomes prunable, recomputed by each full scan), so a
   * store skips the scan that would find nothing: pruning stays O(1) per arrival.
   */
  private pruneNotBefore = -Infinity;
  private reservation: Reservation | undefined;

  constructor(readonly limits: Limits) {}

  static fromData(data: MailboxData, limits: Limits): MailboxState {
    const state = new MailboxState(limits);
    state.nextSeq = data.next_seq;
    for (const record of data.records) state.insert(record);
    for (const t of data.tombstones) state.tombstones.set(receiptKey(t), t);
    state.reservation = data.notice ?? undefined;
    return state;
  }

  toData(): MailboxData {
    return { next_seq: this.nextSeq, records: [...this.records.values()], tombstones: [...this.tombstones.values()], notice: this.reservation ?? null };
  }

  get stats(): { records: number; unread: number; bytes: number; tombstones: number } {
    return { records: this.records.size, unread: this.unread, bytes: this.bytes, tombstones: this.tombstones.size };
  }

  has(sender: string, msgId: string): boolean {
    const key = receiptKey({ sender, msg_id: msgId });
    return this.records.has(key) || this.tombstones.has(key);
  }

  get(sender: string, msgId: string): StoredRecord | undefined {
    return this.records.get(receiptKey({ sender, msg_id: msgId }));
  }

  /** Everything this mailbox admitted and still remembers (records and tombstones), with its signed time. */
  admitted(): { from: string; msg_id: string; ts: number }[] {
    const records = [...this.records.values()].map((r) => ({ from: r.envelope.from, msg_id: r.envelope.msg_id, ts: r.envelope.ts }));
    // A tombstone's `until` is its message's ts + MAX_PAST_MS (where records are removed, below).
    const tombstones = [...this.tombstones.values()].map((t) => ({ from: t.sender, msg_id: t.msg_id, ts: t.until - MAX_PAST_MS }));
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
        return this.reserveNotice(op);
      case 'notice_outcome':
        return this.recordNoticeOutcome(op);
      case 'notice_reset': {
        const had = this.reservation !== undefined;
        this.reservation = undefined;
        return { notice: had };
      }
    }
  }

  /** The current notice reservation, if one is outstanding. */
  get notice(): Reservation | undefined {
    return this.reservation;
  }

  /** Receipts of unread messages that deserve a notice (everything but progress), in arrival order. */
  attention(): Receipt[] {
    const receipts: Receipt[] = [];
    for (const record of this.records.values()) if (isUnread(record) && !isProgress(record.envelope)) receipts.push(receiptOf(record.envelope));
    return receipts;
  }

  private reserveNotice(op: NoticeReserveOp): NoticeChange {
    this.reservation = { id: op.id, at: op.at, attempt: op.attempt, covered: op.covered.map(receiptKey) };
    return { notice: true };
  }

  /** Records the notice's fate on the covered messages that are still unread. */
  private recordNoticeOutcome(op: NoticeOutcomeOp): NoticeChange {
    if (this.reservation?.id !== op.id) return { notice: false };
    let changed = false;
    for (const key of this.reservation.covered) {
      const record = this.records.get(key);
      if (record === undefined || !isUnread(record)) continue;
      record.states.push({ state: op.state, at: op.at });
      changed = true;
    }
    return { notice: changed };
  }

  /** A reservation ends once everything it covered is acknowledged, superseded or gone. */
  private releaseNoticeIfDone(): void {
    if (this.reservation === undefined) return;
    const open = this.reservation.covered.some((key) => {
      const record = this.records.get(key);
      return record !== undefined && isUnread(record);
    });
    if (!open) this.reservation = undefined;
  }

  store(op: StoreOp): StoreOutcome {
    const { envelope } = op;
    this.prune(op.at);
    if (this.has(envelope.from, envelope.msg_id)) return { outcome: 'duplicate' };
    const size = storeOpSize(op);
    const admission = this.admitEvictingAcknowledged(size, op.at);
    if (!admission.ok) return { outcome: 'full', reason: admission.reason };
    const record: StoredRecord = {
      seq: this.nextSeq++,
      envelope,
      ...(op.peer !== undefined && { peer: op.peer }),
      received_at: op.at,
      size,
      states: [{ state: 'receiver_stored', at: op.at }],
    };
    this.applySupersession(record);
    this.insert(record);
    this.releaseNoticeIfDone();
    return { outcome: 'stored', record };
  }

  acknowledge(op: AckOp): AckCounts {
    const counts: AckCounts = { acknowledged: 0, already_acknowledged: 0, unknown: 0 };
    for (const receipt of op.receipts) {
      const key = receiptKey(receipt);
      const record = this.records.get(key);
      if (record === undefined) {
        if (this.tombstones.has(key)) counts.already_acknowledged++;
        else counts.unknown++;
        continue;
      }
      if (isAcknowledged(record)) {
        counts.already_acknowledged++;
        continue;
      }
      if (isUnread(record)) this.unread--;
      record.states.push({ state: 'receiver_acknowledged', at: op.at });
      this.becamePrunable(record);
      counts.acknowledged++;
    }
    this.releaseNoticeIfDone();
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
    if (isUnread(record)) this.unread++;
    const task = supersessionKey(record.envelope);
    if (task !== undefined) {
      const members = this.tasks.get(task);
      if (members) members.push(key);
      else this.tasks.set(task, [key]);
    }
  }

  private remove(key: string, record: StoredRecord, now: number): void {
    this.records.delete(key);
    this.bytes -= record.size;
    if (isUnread(record)) this.unread--;
    const task = supersessionKey(record.envelope);
    if (task !== undefined) {
      const members = this.tasks.get(task)?.filter((k) => k !== key) ?? [];
      if (members.length > 0) this.tasks.set(task, members);
      else this.tasks.delete(task);
    }
    // The gate refuses anything older than the freshness window, so the tombstone
    // needs to outlive the envelope's timestamp by exactly that window.
    const until = record.envelope.ts + MAX_PAST_MS;
    if (until < now) return;
    this.tombstones.set(key, { ...receiptOf(record.envelope), until });
    this.pruneNotBefore = Math.min(this.pruneNotBefore, until);
  }

  private becamePrunable(record: StoredRecord): void {
    this.pruneNotBefore = Math.min(this.pruneNotBefore, record.received_at + RETENTION_MS);
  }

  private applySupersession(record: StoredRecord): void {
    const task = supersessionKey(record.envelope);
    if (task === undefined) return;
    const members = (this.tasks.get(task) ?? []).map((k) => this.records.get(k)!);
    const views = members.map((r) => ({ envelope: r.envelope, supersededBy: r.superseded_by }));
    const decision = supersede(record.envelope, views);
    if (decision.self !== undefined) {
      record.superseded_by = decision.self;
      this.becamePrunable(record);
    }
    for (const msgId of decision.others) {
      const older = members.find((r) => r.envelope.msg_id === msgId)!;
      if (isUnread(older)) this.unread--;
      older.superseded_by = record.envelope.msg_id;
      this.becamePrunable(older);
    }
  }

  /** Acknowledged and superseded records older than the retention window leave; tombstones expire. */
  private prune(now: number): void {
    if (now <= this.pruneNotBefore) return;
    // Recomputed from scratch; remove() lowers it again for the tombstones it leaves.
    this.pruneNotBefore = Infinity;
    for (const [key, t] of this.tombstones) {
      if (t.until < now) this.tombstones.delete(key);
      else this.pruneNotBefore = Math.min(this.pruneNotBefore, t.until);
    }
    for (const [key, record] of this.records) {
      if (isUnread(record)) continue;
      if (record.received_at + RETENTION_MS < now) this.remove(key, record, now);
      else this.becamePrunable(record);
    }
  }

  /**
   * Admission, making room if it must by evicting the oldest acknowledged records (their
   * tombstones keep refusing replays). Unread and superseded records are never evicted.
   */
  private admitEvictingAcknowledged(size: number, now: number): ReturnType<typeof admit> {
    const first = admit({ records: this.records.size, bytes: this.bytes }, size, this.limits);
    if (first.ok) return first;
    let records = this.records.size;
    let bytes = this.bytes;
    const victims: [string, StoredRecord][] = [];
    for (const entry of this.records) {
      if (admit({ records, bytes }, size, this.limits).ok) break;
      if (!isAcknowledged(entry[1])) continue;
      victims.push(entry);
      records--;
      bytes -= entry[1].size;
    }
    const verdict = admit({ records, bytes }, size, this.limits);
    if (!verdict.ok) return first;
    for (const [key, record] of victims) this.remove(key, record, now);
    return verdict;
  }
}
