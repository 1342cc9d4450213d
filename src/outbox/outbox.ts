/**
 * The durable outbox of one identity and session: `outbox/<identity>/<session>.json`
 * (a journaled store). `send_message` commits the signed envelope here before it
 * returns `pending`, so a message survives kill -9 and restart until a relay accepts it,
 * every relay refuses it for good (`delivery_failed`), or a person or agent drops it
 * (`canceled`). Records stay 48 h after that for `message_status` and idempotency keys.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { envelopeSchema, type Envelope } from '../envelope/envelope.js';
import { REMOTE_STATES, receiptEntrySchema, remoteRank, type ReceiptEntry, type RemoteState } from '../receipts/receipts.js';
import { JournalStore } from '../store/journal-store.js';
import type { JournalFormat } from '../store/journal.js';

export const OUTBOX_RETENTION_MS = 48 * 60 * 60 * 1000;

/** How long a receiver's report may wait for a send's commit to share (the receipt itself waited seconds). */
const REMOTE_LINGER_MS = 1_000;
const stateEntry = z.object({ state: z.enum(['pending', 'bus_accepted', 'delivery_failed', 'canceled']), at: z.number().int(), reason: z.string().optional() });
export type OutboundState = z.infer<typeof stateEntry>['state'];

/** A state the receiver reported in a signed receipt: its time is the receiver's clock. */
const remoteEntry = z.object({ state: z.enum(REMOTE_STATES), at: z.number().int(), code: z.string().optional(), received_at: z.number().int() });
export type RemoteEntry = z.infer<typeof remoteEntry>;

export const outboxRecordSchema = z.object({
  envelope: envelopeSchema,
  route: z.string(),
  idempotency_key: z.string().optional(),
  intent: z.string().optional(),
  created_at: z.number().int(),
  states: z.array(stateEntry).min(1),
  accepted_by: z.array(z.string()),
  /** What the receiver reported (receipts), each state once, in the order they arrived. */
  remote: z.array(remoteEntry).optional(),
  /**
   * One copy of a message sent to several recipients at once (agent/groups.ts): the group's
   * id (also in the sealed envelope, except to a peer marked clear, which cannot carry it);
   * `follow_up` marks a message sent later to the same group (a cancellation), not a copy.
   */
  group: z.object({ id: z.string(), follow_up: z.literal(true).optional() }).optional(),
});
export type OutboxRecord = z.infer<typeof outboxRecordSchema>;

const addOp = z.object({
  op: z.literal('add'),
  at: z.number().int(),
  envelope: envelopeSchema,
  route: z.string(),
  idempotency_key: z.string().optional(),
  intent: z.string().optional(),
});
/**
 * The copies of one message to several recipients, committed together: all of them are
 * kept, or none. The idempotency key and intent are the group's, kept on its first copy.
 * `unrouted`: recipients no copy went to, and why (no session of theirs could be named).
 */
const unroutedEntry = z.object({ to: z.string(), code: z.string(), reason: z.string() });
export type Unrouted = z.infer<typeof unroutedEntry>;
const addGroupOp = z.object({
  op: z.literal('add_group'),
  at: z.number().int(),
  group: z.string(),
  follow_up: z.literal(true).optional(),
  copies: z.array(z.object({ envelope: envelopeSchema, route: z.string() })),
  unrouted: z.array(unroutedEntry).optional(),
  idempotency_key: z.string().optional(),
  intent: z.string().optional(),
});
const acceptedOp = z.object({ op: z.literal('accepted'), at: z.number().int(), msg_id: z.string(), relay: z.string() });
/** A pending message leaves the send loop: refused by every relay for good, or dropped. */
const endOp = z.object({ op: z.literal('end'), at: z.number().int(), msg_id: z.string(), state: z.enum(['delivery_failed', 'canceled']), reason: z.string() });
/** States a receipt from `from` reported; entries for messages this outbox did not send to `from` are ignored. */
const remoteOp = z.object({ op: z.literal('remote'), at: z.number().int(), from: z.string(), entries: z.array(receiptEntrySchema) });
const outboxOp = z.discriminatedUnion('op', [addOp, addGroupOp, acceptedOp, endOp, remoteOp]);
type OutboxOp = z.infer<typeof outboxOp>;

/** What a group keeps besides its records: who it could not reach, and when it was sent. */
const groupNoteSchema = z.object({ id: z.string(), at: z.number().int(), unrouted: z.array(unroutedEntry) });
const dataSchema = z.object({ records: z.array(outboxRecordSchema), groups: z.array(groupNoteSchema).optional() });
type OutboxData = z.infer<typeof dataSchema>;

export type AddResult = { outcome: 'added'; record: OutboxRecord } | { outcome: 'duplicate' | 'conflict'; record: OutboxRecord };
/** The group's records (copies and follow-ups, in the order they were added) and its note. */
export interface OutboxGroup {
  id: string;
  at: number;
  records: OutboxRecord[];
  unrouted: Unrouted[];
}
export type AddGroupResult = { outcome: 'added' | 'duplicate' | 'conflict'; group: OutboxGroup };
type AcceptResult = { changed: boolean };
export type EndResult = { ended: boolean; record: OutboxRecord | undefined };
export type RemoteResult = { applied: number; ignored: number };
type Result = AddResult | AddGroupResult | AcceptResult | EndResult | RemoteResult;

/** What an idempotency key promises: the same target and the same content. */
export function intentOf(fields: { to: string; session: string | undefined; text: string; task_id?: string; status?: string; in_reply_to?: string }): string {
  const canonical = JSON.stringify([fields.to, fields.session ?? null, fields.text, fields.task_id ?? null, fields.status ?? null, fields.in_reply_to ?? null]);
  return createHash('sha256').update(canonical).digest('base64url');
}

export class OutboxState {
  readonly records = new Map<string, OutboxRecord>();
  private readonly byKey = new Map<string, string>();
  /** Group id → its records' msg ids, in the order they were added. */
  private readonly groupIds = new Map<string, string[]>();
  private readonly groupNotes = new Map<string, { at: number; unrouted: Unrouted[] }>();
  /**
   * The earliest time any settled record leaves (its settling + the retention window):
   * before it, a prune has nothing to remove and skips the scan, which otherwise made
   * every send cost a pass over two days of records.
   */
  private pruneDue = Number.POSITIVE_INFINITY;

  static fromData(data: OutboxData): OutboxState {
    const state = new OutboxState();
    for (const note of data.groups ?? []) state.groupNotes.set(note.id, { at: note.at, unrouted: note.unrouted });
    for (const record of data.records) state.insert(record);
    return state;
  }

  toData(): OutboxData {
    const groups = [...this.groupNotes].map(([id, note]) => ({ id, ...note }));
    return { records: [...this.records.values()], ...(groups.length > 0 && { groups }) };
  }

  apply(op: OutboxOp): Result {
    if (op.op === 'add') return this.add(op);
    if (op.op === 'add_group') return this.addGroup(op);
    if (op.op === 'remote') return this.remote(op);
    return op.op === 'accepted' ? this.accept(op) : this.end(op);
  }

  /**
   * Records what a receiver reported. Only the message's own recipient may report on it: a
   * receipt from anyone else, or for a message this outbox does not hold, changes nothing.
   */
  private remote(op: z.infer<typeof remoteOp>): RemoteResult {
    let applied = 0;
    for (const entry of op.entries) {
      const record = this.records.get(entry.msg_id);
      if (record === undefined || record.envelope.to !== op.from) continue;
      const remote = (record.remote ??= []);
      if (remote.some((r) => r.state === entry.state)) continue;
      remote.push({ state: entry.state, at: entry.at, ...(entry.code !== undefined && { code: entry.code }), received_at: op.at });
      applied++;
    }
    return { applied, ignored: op.entries.length - applied };
  }

  recordForKey(key: string): OutboxRecord | undefined {
    const msgId = this.byKey.get(key);
    return msgId === undefined ? undefined : this.records.get(msgId);
  }

  group(id: string): OutboxGroup | undefined {
    const ids = this.groupIds.get(id);
    const note = this.groupNotes.get(id);
    if (ids === undefined && note === undefined) return undefined;
    const records = (ids ?? []).map((msgId) => this.records.get(msgId)).filter((r) => r !== undefined);
    return { id, at: note?.at ?? records[0]?.created_at ?? 0, records, unrouted: note?.unrouted ?? [] };
  }

  /**
   * Adds a group's copies in one step. A key already used (by a group or by a single
   * message) answers with what it was used for; a follow-up joins its existing group.
   */
  private addGroup(op: z.infer<typeof addGroupOp>): AddGroupResult {
    this.prune(op.at);
    if (op.idempotency_key !== undefined) {
      const existing = this.recordForKey(op.idempotency_key);
      if (existing) {
        const group = existing.group === undefined ? undefined : this.group(existing.group.id);
        const shown = group ?? { id: existing.group?.id ?? '', at: existing.created_at, records: [existing], unrouted: [] };
        return { outcome: group !== undefined && existing.intent === op.intent ? 'duplicate' : 'conflict', group: shown };
      }
    }
    const known = this.group(op.group);
    if (known !== undefined && op.follow_up !== true) return { outcome: 'duplicate', group: known };
    if (known === undefined) this.groupNotes.set(op.group, { at: op.at, unrouted: op.unrouted ?? [] });
    op.copies.forEach((copy, i) => {
      if (this.records.has(copy.envelope.msg_id)) return;
      this.insert({
        envelope: copy.envelope,
        route: copy.route,
        ...(i === 0 && op.idempotency_key !== undefined && { idempotency_key: op.idempotency_key }),
        ...(i === 0 && op.intent !== undefined && { intent: op.intent }),
        created_at: op.at,
        states: [{ state: 'pending', at: op.at }],
        accepted_by: [],
        group: { id: op.group, ...(op.follow_up === true && { follow_up: true as const }) },
      });
    });
    return { outcome: 'added', group: this.group(op.group)! };
  }

  private add(op: z.infer<typeof addOp>): AddResult {
    this.prune(op.at);
    if (op.idempotency_key !== undefined) {
      const existing = this.recordForKey(op.idempotency_key);
      // A key a group holds names the group, never one of its copies as a single message.
      if (existing) return { outcome: existing.intent === op.intent && existing.group === undefined ? 'duplicate' : 'conflict', record: existing };
    }
    const existing = this.records.get(op.envelope.msg_id);
    if (existing) return { outcome: 'duplicate', record: existing };
    const record: OutboxRecord = {
      envelope: op.envelope,
      route: op.route,
      ...(op.idempotency_key !== undefined && { idempotency_key: op.idempotency_key }),
      ...(op.intent !== undefined && { intent: op.intent }),
      created_at: op.at,
      states: [{ state: 'pending', at: op.at }],
      accepted_by: [],
    };
    this.insert(record);
    return { outcome: 'added', record };
  }

  /** Only a pending message can end; one a relay took, or that ended already, stays as it is. */
  private end(op: z.infer<typeof endOp>): EndResult {
    const record = this.records.get(op.msg_id);
    if (!record || !isPending(record)) return { ended: false, record };
    record.states.push({ state: op.state, at: op.at, reason: op.reason });
    this.noteSettled(record);
    return { ended: true, record };
  }

  private accept(op: z.infer<typeof acceptedOp>): AcceptResult {
    const record = this.records.get(op.msg_id);
    // A relay that took a message after it was dropped: the record says what happened, not when.
    if (!record || record.accepted_by.includes(op.relay)) return { changed: false };
    record.accepted_by.push(op.relay);
    if (!record.states.some((s) => s.state === 'bus_accepted')) record.states.push({ state: 'bus_accepted', at: op.at });
    this.noteSettled(record);
    return { changed: true };
  }

  private insert(record: OutboxRecord): void {
    this.records.set(record.envelope.msg_id, record);
    if (record.idempotency_key !== undefined) this.byKey.set(record.idempotency_key, record.envelope.msg_id);
    if (record.group !== undefined) {
      const ids = this.groupIds.get(record.group.id);
      if (ids === undefined) this.groupIds.set(record.group.id, [record.envelope.msg_id]);
      else ids.push(record.envelope.msg_id);
    }
    this.noteSettled(record);
  }

  private noteSettled(record: OutboxRecord): void {
    const leaves = leavesAt(record);
    if (leaves !== undefined && leaves < this.pruneDue) this.pruneDue = leaves;
  }

  /**
   * Records leave after the retention window once they are settled; pending ones stay. A
   * group's records leave together, once the last of them may, so its panel never shows
   * part of the recipients.
   */
  private prune(now: number): void {
    if (now <= this.pruneDue) return;
    this.pruneDue = Number.POSITIVE_INFINITY;
    for (const [msgId, record] of this.records) {
      const leaves = record.group === undefined ? leavesAt(record) : this.groupLeavesAt(record.group.id);
      if (leaves === undefined) continue;
      if (leaves >= now) {
        if (leaves < this.pruneDue) this.pruneDue = leaves;
        continue;
      }
      this.records.delete(msgId);
      if (record.idempotency_key !== undefined) this.byKey.delete(record.idempotency_key);
    }
    for (const [id, ids] of this.groupIds) {
      const left = ids.filter((msgId) => this.records.has(msgId));
      if (left.length === ids.length) continue;
      if (left.length > 0) this.groupIds.set(id, left);
      else {
        this.groupIds.delete(id);
        this.groupNotes.delete(id);
      }
    }
    // A group none of whose recipients could be reached has no record to leave with.
    for (const [id, note] of this.groupNotes) {
      if (this.groupIds.has(id)) continue;
      const leaves = note.at + OUTBOX_RETENTION_MS;
      if (leaves < now) this.groupNotes.delete(id);
      else if (leaves < this.pruneDue) this.pruneDue = leaves;
    }
  }

  /** When a group's records may leave: when the last of them may; never while one is pending. */
  private groupLeavesAt(id: string): number | undefined {
    let latest = 0;
    for (const msgId of this.groupIds.get(id) ?? []) {
      const record = this.records.get(msgId);
      if (record === undefined) continue;
      const leaves = leavesAt(record);
      if (leaves === undefined) return undefined;
      latest = Math.max(latest, leaves);
    }
    return latest;
  }
}

/** When a settled record leaves the outbox: the retention window after it settled; never while pending. */
function leavesAt(record: OutboxRecord): number | undefined {
  const settled = record.states.find((s) => s.state !== 'pending');
  return settled === undefined ? undefined : settled.at + OUTBOX_RETENTION_MS;
}

export const outboxFormat: JournalFormat<OutboxState, OutboxOp, Result, OutboxData> = {
  name: 'interlink-outbox',
  label: 'outbox',
  version: 1,
  opSchema: outboxOp,
  dataSchema,
  empty: () => new OutboxState(),
  fromData: (data) => OutboxState.fromData(data),
  toData: (state) => state.toData(),
  apply: (state, op) => state.apply(op),
  changes: (result) => ('outcome' in result ? result.outcome === 'added' : 'ended' in result ? result.ended : 'applied' in result ? result.applied > 0 : result.changed),
};

/** What the sender knows of a message now: its latest state. */
export function outboundState(record: OutboxRecord): OutboundState {
  if (record.accepted_by.length > 0) return 'bus_accepted';
  return record.states[record.states.length - 1]!.state;
}

/** The furthest state the receiver reported, if it reported any. */
export function remoteState(record: OutboxRecord): RemoteEntry | undefined {
  return record.remote?.reduce<RemoteEntry | undefined>((best, r) => (best === undefined || remoteRank(r.state) > remoteRank(best.state) ? r : best), undefined);
}

/** What the sender shows: the receiver's furthest reported state, else its own. */
export function shownState(record: OutboxRecord): OutboundState | RemoteState {
  return remoteState(record)?.state ?? outboundState(record);
}

export function isPending(record: OutboxRecord): boolean {
  return outboundState(record) === 'pending';
}

export class Outbox {
  /** Told each message this process took out of the send loop (`end`), once durable. */
  private readonly endedListeners: ((msgId: string) => void)[] = [];

  private constructor(private readonly journal: JournalStore<OutboxState, OutboxOp, Result, OutboxData>) {}

  /** Calls `listener` with each message this process ends from now on (the outbound loop forgets it). */
  onEnded(listener: (msgId: string) => void): void {
    this.endedListeners.push(listener);
  }

  static async open(path: string, options: { readOnly?: boolean } = {}): Promise<Outbox> {
    return new Outbox(await JournalStore.open(path, outboxFormat, options));
  }

  /** Durable when it resolves. */
  async add(envelope: Envelope, route: string, idempotency?: { key: string; intent: string }): Promise<AddResult> {
    const op: OutboxOp = {
      op: 'add',
      at: Date.now(),
      envelope,
      route,
      ...(idempotency && { idempotency_key: idempotency.key, intent: idempotency.intent }),
    };
    return (await this.journal.submit(op)) as AddResult;
  }

  /** Commits a group's copies together; durable when it resolves. */
  async addGroup(group: { id: string; follow_up?: true; copies: { envelope: Envelope; route: string }[]; unrouted: Unrouted[] }, idempotency?: { key: string; intent: string }): Promise<AddGroupResult> {
    const op: OutboxOp = {
      op: 'add_group',
      at: Date.now(),
      group: group.id,
      ...(group.follow_up === true && { follow_up: true as const }),
      copies: group.copies,
      ...(group.unrouted.length > 0 && { unrouted: group.unrouted }),
      ...(idempotency && { idempotency_key: idempotency.key, intent: idempotency.intent }),
    };
    return (await this.journal.submit(op)) as AddGroupResult;
  }

  async group(id: string): Promise<OutboxGroup | undefined> {
    return this.journal.read((state) => structuredClone(state.group(id)));
  }

  /**
   * Records that a relay accepted a message. Committed lazily (with the next commit, or
   * within a few milliseconds): if the record is lost in a crash, the message is offered
   * again after restart and the receiver's mailbox drops the copy.
   */
  async markAccepted(msgId: string, relay: string): Promise<void> {
    await this.journal.submitLazily({ op: 'accepted', at: Date.now(), msg_id: msgId, relay });
  }

  /**
   * Records states a receipt from `from` reported. Durable when it resolves (the relay is
   * acknowledged after), but committed lazily: with the next send's commit, or within
   * REMOTE_LINGER_MS, so a receipt neither adds a commit to a busy sender nor makes the
   * send behind it wait for one.
   */
  async recordRemote(from: string, entries: readonly ReceiptEntry[]): Promise<RemoteResult> {
    return (await this.journal.submitLazily({ op: 'remote', at: Date.now(), from, entries: [...entries] }, REMOTE_LINGER_MS)) as RemoteResult;
  }

  /** Takes a pending message out of the send loop for good; durable when it resolves. */
  async end(msgId: string, state: 'delivery_failed' | 'canceled', reason: string): Promise<EndResult> {
    const result = (await this.journal.submit({ op: 'end', at: Date.now(), msg_id: msgId, state, reason })) as EndResult;
    if (result.ended) for (const listener of this.endedListeners) listener(msgId);
    return result;
  }

  async get(msgId: string): Promise<OutboxRecord | undefined> {
    return this.journal.read((state) => structuredClone(state.records.get(msgId)));
  }

  async byIdempotencyKey(key: string): Promise<OutboxRecord | undefined> {
    return this.journal.read((state) => structuredClone(state.recordForKey(key)));
  }

  /** In the order they were signed, which is the order they were sent in. */
  async pending(): Promise<OutboxRecord[]> {
    return this.journal.read((state) => structuredClone([...state.records.values()].filter(isPending).sort((a, b) => a.envelope.ts - b.envelope.ts)));
  }

  /**
   * What the outbound loop's order rule reads (agent/route-order.ts), in send order: the
   * pending messages, and the accepted ones signed since `since` that the receiver has
   * not reported (they may order a route's later messages across relays).
   */
  async unsettled(since: number): Promise<OutboxRecord[]> {
    const wanted = (r: OutboxRecord) => isPending(r) || (r.accepted_by.length > 0 && r.remote === undefined && r.envelope.ts >= since);
    return this.journal.read((state) => structuredClone([...state.records.values()].filter(wanted).sort((a, b) => a.envelope.ts - b.envelope.ts)));
  }

  /** The newest signed timestamp in the outbox (0 when empty): where the send clock resumes. */
  async lastTimestamp(): Promise<number> {
    return this.journal.read((state) => [...state.records.values()].reduce((last, r) => Math.max(last, r.envelope.ts), 0));
  }

  close(): Promise<void> {
    return this.journal.close();
  }

  async all(): Promise<OutboxRecord[]> {
    return this.journal.read((state) => structuredClone([...state.records.values()]));
  }
}
