/**
 * The mailbox's decisions, as pure functions of values: which records supersede which,
 * the order a fetch returns them in, and whether a new record may be admitted.
 */
import { type Envelope, type Status, TERMINAL_STATUSES, replyToSession } from '../envelope/envelope.js';

export const MAX_RECORDS = 4096;
export const MAX_BYTES = 32 * 1024 * 1024;
export const RETENTION_MS = 24 * 60 * 60 * 1000;
export const DEFAULT_FETCH_LIMIT = 20;
export const MAX_FETCH_LIMIT = 100;

export interface Limits {
  maxRecords: number;
  maxBytes: number;
  /** What one sender's unread records may hold (default: a quarter of each bound above). */
  senderRecords?: number;
  senderBytes?: number;
  /** Tombstones kept at once (default: four times `maxRecords`). */
  maxTombstones?: number;
}

export const DEFAULT_LIMITS: Limits = { maxRecords: MAX_RECORDS, maxBytes: MAX_BYTES };

/** One sender's share of the mailbox (DESIGN.md "The mailbox": "One sender's share"). */
export function senderShare(limits: Limits): Holdings {
  return { records: limits.senderRecords ?? Math.ceil(limits.maxRecords / 4), bytes: limits.senderBytes ?? Math.ceil(limits.maxBytes / 4) };
}

export function tombstoneBound(limits: Limits): number {
  return limits.maxTombstones ?? 4 * limits.maxRecords;
}

/** Progress is `status=update`: it never wakes the host and can be superseded. */
export function isProgress(envelope: Pick<Envelope, 'status'>): boolean {
  return envelope.status === 'update';
}

export function isTerminal(status: Status | undefined): boolean {
  return status !== undefined && TERMINAL_STATUSES.has(status);
}

/**
 * Progress for one task from one sender session: the sender key, the sender's session
 * from the unsigned `reply_to` hint (only when the hint names the sender's key), and the
 * task id. Records without a task id, or that are neither progress nor terminal, take
 * no part in supersession.
 */
export function supersessionKey(envelope: Envelope): string | undefined {
  if (envelope.task_id === undefined) return undefined;
  if (!isProgress(envelope) && !isTerminal(envelope.status)) return undefined;
  return `${envelope.from}\0${replyToSession(envelope) ?? ''}\0${envelope.task_id}`;
}

/** Signed time orders progress; the msg_id breaks ties so the order is total. */
export function isNewerThan(a: Pick<Envelope, 'ts' | 'msg_id'>, b: Pick<Envelope, 'ts' | 'msg_id'>): boolean {
  return a.ts > b.ts || (a.ts === b.ts && a.msg_id > b.msg_id);
}

export interface TaskRecordView {
  envelope: Envelope;
  supersededBy: string | undefined;
}

/**
 * What a newly arrived record does to the records already stored for its task.
 * `self` is the msg_id that supersedes the new record itself, if any; `others` are the
 * stored records the new one supersedes.
 */
export function supersede(incoming: Envelope, sameTask: readonly TaskRecordView[]): { self?: string; others: string[] } {
  const terminal = sameTask.find((r) => isTerminal(r.envelope.status));
  if (isProgress(incoming)) {
    // A late update cannot resurrect a finished task, nor overtake newer progress.
    if (terminal !== undefined) return { self: terminal.envelope.msg_id, others: [] };
    let newest: Envelope | undefined;
    for (const r of sameTask) {
      if (isProgress(r.envelope) && isNewerThan(r.envelope, incoming) && (newest === undefined || isNewerThan(r.envelope, newest))) {
        newest = r.envelope;
      }
    }
    if (newest !== undefined) return { self: newest.msg_id, others: [] };
  }
  const others = sameTask.filter((r) => isProgress(r.envelope) && r.supersededBy === undefined).map((r) => r.envelope.msg_id);
  return { others };
}

/** What fetch order looks at: who signed a record, when, and when it arrived here. */
export interface OrderedRecord {
  seq: number;
  envelope: Pick<Envelope, 'from' | 'ts'>;
}

/** One sender's order: its signed time, then arrival (for equal times, e.g. from older senders). */
export function senderOrder(a: OrderedRecord, b: OrderedRecord): number {
  return a.envelope.ts - b.envelope.ts || a.seq - b.seq;
}

/**
 * Delivery order (DESIGN.md, "The mailbox"): each sender's records in the order it sent
 * them, whatever order relays delivered them in; across senders, arrival order. The
 * input is in arrival order; each sender keeps the positions its records arrived in, and
 * those positions are filled with its records sorted by `senderOrder`.
 */
export function inDeliveryOrder<T extends OrderedRecord>(arrived: readonly T[]): T[] {
  const bySender = new Map<string, T[]>();
  for (const record of arrived) {
    const mine = bySender.get(record.envelope.from);
    if (mine) mine.push(record);
    else bySender.set(record.envelope.from, [record]);
  }
  for (const mine of bySender.values()) mine.sort(senderOrder);
  const taken = new Map<string, number>();
  return arrived.map((slot) => {
    const from = slot.envelope.from;
    const next = taken.get(from) ?? 0;
    taken.set(from, next + 1);
    return bySender.get(from)![next]!;
  });
}

/**
 * What refused a message: the whole mailbox (`records`, `bytes`: full of records nothing
 * may evict) or the sender's share of it (`sender_records`, `sender_bytes`).
 */
export type Bound = 'records' | 'bytes' | 'sender_records' | 'sender_bytes';

export type AdmissionVerdict = { ok: true } | { ok: false; reason: Bound };

/** Records and serialized bytes: what the bounds count. */
export interface Holdings {
  records: number;
  bytes: number;
}

/** Admission bounds count and serialized bytes of the records a new one would join. */
export function admit(current: Holdings, incomingBytes: number, limits: Limits): AdmissionVerdict {
  if (current.records + 1 > limits.maxRecords) return { ok: false, reason: 'records' };
  if (current.bytes + incomingBytes > limits.maxBytes) return { ok: false, reason: 'bytes' };
  return { ok: true };
}

/**
 * A sender's share bounds what its unread records hold (`held`), since only unread records
 * cannot be evicted. `change` is what the arrival does to them: plus the new record if it
 * is unread, minus the unread progress it supersedes. An arrival that does not grow them
 * (an update superseding the sender's own update) always fits, so a sender at its share
 * can still report progress and finish its tasks.
 */
export function admitToShare(held: Holdings, change: Holdings, limits: Limits): AdmissionVerdict {
  const share = senderShare(limits);
  if (change.records > 0 && held.records + change.records > share.records) return { ok: false, reason: 'sender_records' };
  if (change.bytes > 0 && held.bytes + change.bytes > share.bytes) return { ok: false, reason: 'sender_bytes' };
  return { ok: true };
}

/**
 * The records to evict so that a record of `incomingBytes` fits the mailbox's bounds, or
 * the bound it still does not fit once every candidate is gone. `candidates` are the
 * evictable records (superseded progress, then acknowledged records, each oldest first):
 * taken in that order, only as many as needed.
 */
export function victims<T extends { size: number }>(
  current: Holdings,
  incomingBytes: number,
  limits: Limits,
  candidates: Iterable<T>,
): { ok: true; taken: T[] } | { ok: false; reason: Bound } {
  let { records, bytes } = current;
  const taken: T[] = [];
  for (const candidate of candidates) {
    if (admit({ records, bytes }, incomingBytes, limits).ok) return { ok: true, taken };
    taken.push(candidate);
    records--;
    bytes -= candidate.size;
  }
  const verdict = admit({ records, bytes }, incomingBytes, limits);
  return verdict.ok ? { ok: true, taken } : verdict;
}

/**
 * Whose tombstone goes when there are too many: the sender holding the most (ties: the
 * smaller key), so a flood forgets its own removed messages and not anyone else's.
 */
export function heaviestSender(counts: ReadonlyMap<string, number>): string | undefined {
  let heaviest: string | undefined;
  let most = 0;
  for (const [sender, count] of counts) {
    if (count > most || (count === most && heaviest !== undefined && sender < heaviest)) {
      heaviest = sender;
      most = count;
    }
  }
  return heaviest;
}

export function clampFetchLimit(limit: number | undefined): number {
  if (limit === undefined) return DEFAULT_FETCH_LIMIT;
  return Math.max(1, Math.min(MAX_FETCH_LIMIT, Math.floor(limit)));
}
