/**
 * Mailbox invariants over random operation sequences, on the in-memory state that the
 * journal replays. Each property is stated the way the delivery spec states it.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Envelope, Status } from '../../src/envelope/envelope.js';
import type { Op, StoredRecord } from '../../src/mailbox/format.js';
import { RETENTION_MS, isProgress, isTerminal, supersede, supersessionKey, type Limits } from '../../src/mailbox/rules.js';
import type { NoticeChange } from '../../src/mailbox/notice-reservation.js';
import { isAcknowledged, isUnread } from '../../src/mailbox/record-state.js';
import { MailboxState, type AckCounts, type StoreOutcome } from '../../src/mailbox/state.js';
import { message, newIdentity } from '../helpers/fixtures.js';

const receiver = newIdentity(1);
const senders = [newIdentity(2), newIdentity(3)];
const T0 = 1_900_000_000_000;

type Action =
  | { kind: 'store'; sender: number; session: number; task: number; status: Status | 'none'; tsOffset: number }
  | { kind: 'redeliver'; pick: number }
  | { kind: 'ack'; picks: number[] }
  | { kind: 'ack_unknown' }
  | { kind: 'advance'; ms: number };

const actionArb: fc.Arbitrary<Action> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('store' as const),
      sender: fc.integer({ min: 0, max: 1 }),
      session: fc.integer({ min: 0, max: 1 }),
      task: fc.integer({ min: 0, max: 2 }),
      status: fc.constantFrom<Status | 'none'>('none', 'update', 'update', 'needs_input', 'result', 'failed', 'canceled'),
      tsOffset: fc.integer({ min: -5_000, max: 5_000 }),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('redeliver' as const), pick: fc.nat() }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('ack' as const), picks: fc.array(fc.nat(), { minLength: 1, maxLength: 4 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('ack_unknown' as const) }) },
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constant('advance' as const), ms: fc.oneof(fc.integer({ min: 1, max: 60_000 }), fc.constant(RETENTION_MS + 1)) }),
  },
);

interface Run {
  state: MailboxState;
  ops: Op[];
  sent: Envelope[];
}

const key = (e: { from: string; msg_id: string }) => `${e.from} ${e.msg_id}`;

function envelopeFor(a: Extract<Action, { kind: 'store' }>, now: number): Envelope {
  const sender = senders[a.sender]!;
  return message(sender, receiver, {
    text: `t${a.task} ${a.status}`,
    ts: now + a.tsOffset,
    ...(a.task > 0 && { task_id: `task-${a.task}` }),
    ...(a.status !== 'none' && { status: a.status }),
    reply_to: `${sender.key}#s${a.session}`,
  });
}

/** Whether storing `incoming` supersedes `older` (the same sender's, the same task), by the mailbox's own rule. */
function supersededBy(incoming: Envelope, older: Envelope): boolean {
  if (incoming.from !== older.from || incoming.task_id === undefined || incoming.task_id !== older.task_id) return false;
  return supersede(incoming, [{ envelope: older, supersededBy: undefined }]).others.includes(older.msg_id);
}

function ackedKeys(state: MailboxState): Set<string> {
  return new Set([...state.all()].filter(isAcknowledged).map((x) => key(x.envelope)));
}

function run(
  actions: Action[],
  limits: Limits,
  check: (r: Run, op: Op, result: StoreOutcome | AckCounts | NoticeChange, ackedBefore: Set<string>, readBefore: Set<string>) => void,
): Run {
  const r: Run = { state: new MailboxState(limits), ops: [], sent: [] };
  let now = T0;
  for (const a of actions) {
    let op: Op | undefined;
    if (a.kind === 'advance') {
      now += a.ms;
    } else if (a.kind === 'store') {
      const envelope = envelopeFor(a, now);
      r.sent.push(envelope);
      op = { op: 'store', at: now, envelope };
    } else if (a.kind === 'redeliver' && r.sent.length > 0) {
      op = { op: 'store', at: now, envelope: r.sent[a.pick % r.sent.length]! };
    } else if (a.kind === 'ack' && r.sent.length > 0) {
      op = { op: 'ack', at: now, receipts: a.picks.map((p) => ({ sender: r.sent[p % r.sent.length]!.from, msg_id: r.sent[p % r.sent.length]!.msg_id })) };
    } else if (a.kind === 'ack_unknown') {
      op = { op: 'ack', at: now, receipts: [{ sender: senders[0]!.key, msg_id: 'f'.repeat(32) }] };
    }
    if (op === undefined) continue;
    const ackedBefore = ackedKeys(r.state);
    const readBefore = new Set([...r.state.all()].filter((x) => !isUnread(x)).map((x) => key(x.envelope)));
    const result = r.state.apply(op);
    r.ops.push(op);
    check(r, op, result, ackedBefore, readBefore);
  }
  return r;
}

function records(state: MailboxState): StoredRecord[] {
  return [...state.all()];
}

const limitsArb = fc.constantFrom<Limits>({ maxRecords: 4096, maxBytes: 1 << 30 }, { maxRecords: 6, maxBytes: 1 << 30 }, { maxRecords: 100, maxBytes: 4_000 });

describe('mailbox state', () => {
  it('never loses or evicts an unread message, and refuses only duplicates or a mailbox full of unread/superseded records', () => {
    fc.assert(
      fc.property(fc.array(actionArb, { maxLength: 80 }), limitsArb, (actions, limits) => {
        const unreadWanted = new Map<string, Envelope>();
        run(actions, limits, (r, op, result) => {
          if (op.op === 'store' && 'outcome' in result) {
            if (result.outcome === 'stored') unreadWanted.set(key(op.envelope), op.envelope);
            if (result.outcome === 'full') {
              const recs = records(r.state);
              // Nothing acknowledged was left to evict.
              expect(recs.every((x) => !isAcknowledged(x))).toBe(true);
            }
            if (result.outcome === 'duplicate') expect(r.state.has(op.envelope.from, op.envelope.msg_id)).toBe(true);
          }
          if (op.op === 'ack') for (const receipt of op.receipts) unreadWanted.delete(key({ from: receipt.sender, msg_id: receipt.msg_id }));
          for (const [k, envelope] of unreadWanted) {
            const stored = r.state.get(envelope.from, envelope.msg_id);
            // A full mailbox evicts superseded progress first: the record this very store superseded may go at once.
            if (stored === undefined && op.op === 'store' && 'outcome' in result && result.outcome === 'stored' && supersededBy(op.envelope, envelope)) {
              unreadWanted.delete(k);
              continue;
            }
            expect(stored, `unread ${k} must still be stored`).toBeDefined();
            // Superseded progress is history: it may be pruned after the retention window.
            if (stored!.superseded_by !== undefined) unreadWanted.delete(k);
            else expect(isUnread(stored!)).toBe(true);
          }
        });
      }),
      { numRuns: 300 },
    );
  });

  it('keeps its counters equal to what the records say', () => {
    fc.assert(
      fc.property(fc.array(actionArb, { maxLength: 80 }), limitsArb, (actions, limits) => {
        run(actions, limits, (r) => {
          const recs = records(r.state);
          const stats = r.state.stats;
          expect(stats.records).toBe(recs.length);
          expect(stats.unread).toBe(recs.filter(isUnread).length);
          expect(stats.bytes).toBe(recs.reduce((sum, x) => sum + x.size, 0));
          expect(stats.records).toBeLessThanOrEqual(limits.maxRecords);
          expect(r.state.unreadInFetchOrder().length).toBe(stats.unread);
        });
      }),
      { numRuns: 300 },
    );
  });

  it('prunes on every arrival everything past retention, however the arrivals are spaced', () => {
    fc.assert(
      fc.property(fc.array(actionArb, { maxLength: 80 }), (actions) => {
        run(actions, { maxRecords: 4096, maxBytes: 1 << 30 }, (r, op, _result, _acked, readBefore) => {
          if (op.op !== 'store') return;
          // Records this arrival supersedes become prunable now and leave at the next one.
          for (const rec of records(r.state)) {
            if (readBefore.has(key(rec.envelope))) expect(rec.received_at + RETENTION_MS).toBeGreaterThanOrEqual(op.at);
          }
          for (const t of r.state.toData().tombstones) expect(t.until).toBeGreaterThanOrEqual(op.at);
        });
      }),
      { numRuns: 300 },
    );
  });

  it('acknowledges idempotently, scoped to the exact receipt', () => {
    fc.assert(
      fc.property(fc.array(actionArb, { maxLength: 60 }), (actions) => {
        run(actions, { maxRecords: 4096, maxBytes: 1 << 30 }, (r, op, result, ackedBefore) => {
          if (op.op !== 'ack' || !('acknowledged' in result)) return;
          expect(result.acknowledged + result.already_acknowledged + result.unknown).toBe(op.receipts.length);
          const named = new Set(op.receipts.map((x) => key({ from: x.sender, msg_id: x.msg_id })));
          // A second identical ack changes nothing.
          const before = JSON.stringify(records(r.state));
          const again = r.state.apply({ ...op });
          expect('acknowledged' in again ? again.acknowledged : -1).toBe(0);
          expect(JSON.stringify(records(r.state))).toBe(before);
          // Exactly the named, not yet acknowledged records became acknowledged.
          const newlyAcked = [...ackedKeys(r.state)].filter((k) => !ackedBefore.has(k));
          expect(newlyAcked.length).toBe(result.acknowledged);
          for (const k of newlyAcked) expect(named.has(k)).toBe(true);
        });
      }),
      { numRuns: 200 },
    );
  });

  it('supersedes progress as the spec says, and keeps superseded records in history', () => {
    fc.assert(
      fc.property(fc.array(actionArb, { maxLength: 80 }), (actions) => {
        const r = run(actions, { maxRecords: 4096, maxBytes: 1 << 30 }, () => undefined);
        const recs = records(r.state);
        const byTask = new Map<string, StoredRecord[]>();
        for (const rec of recs) {
          const k = supersessionKey(rec.envelope);
          if (k !== undefined) byTask.set(k, [...(byTask.get(k) ?? []), rec]);
          // Only progress is ever superseded; questions and results stay individual.
          if (rec.superseded_by !== undefined) expect(isProgress(rec.envelope)).toBe(true);
          if (rec.envelope.task_id === undefined) expect(rec.superseded_by).toBeUndefined();
        }
        for (const group of byTask.values()) {
          const live = group.filter((x) => isProgress(x.envelope) && x.superseded_by === undefined);
          const terminal = group.some((x) => isTerminal(x.envelope.status));
          // A late update cannot resurrect a finished task.
          if (terminal) expect(live).toEqual([]);
          expect(live.length).toBeLessThanOrEqual(1);
          // The surviving update is the newest one.
          if (live.length === 1) {
            for (const other of group) {
              if (!isProgress(other.envelope)) continue;
              expect(other.envelope.ts < live[0]!.envelope.ts || (other.envelope.ts === live[0]!.envelope.ts && other.envelope.msg_id <= live[0]!.envelope.msg_id)).toBe(true);
            }
          }
        }
      }),
      { numRuns: 300 },
    );
  });

  it('fetches non-progress first, then progress; each sender’s in signed-time order (arrival breaks ties); senders in their arrival slots', () => {
    fc.assert(
      fc.property(fc.array(actionArb, { maxLength: 60 }), (actions) => {
        const r = run(actions, { maxRecords: 4096, maxBytes: 1 << 30 }, () => undefined);
        const order = r.state.unreadInFetchOrder();
        const arrival = [...r.state.all()].filter(isUnread);
        expect(new Set(order)).toEqual(new Set(arrival));
        const firstProgress = order.findIndex((x) => isProgress(x.envelope));
        if (firstProgress >= 0) expect(order.slice(firstProgress).every((x) => isProgress(x.envelope))).toBe(true);
        for (const group of [order.filter((x) => !isProgress(x.envelope)), order.filter((x) => isProgress(x.envelope))]) {
          for (const sender of senders) {
            const mine = group.filter((x) => x.envelope.from === sender.key);
            for (let i = 1; i < mine.length; i++) {
              const [a, b] = [mine[i - 1]!, mine[i]!];
              expect(a.envelope.ts < b.envelope.ts || (a.envelope.ts === b.envelope.ts && a.seq < b.seq)).toBe(true);
            }
          }
        }
        // Without progress, each arrival position keeps its sender.
        if (firstProgress < 0) expect(order.map((x) => x.envelope.from)).toEqual(arrival.map((x) => x.envelope.from));
      }),
      { numRuns: 200 },
    );
  });

  /** One sender's messages as a session signs them: strictly increasing timestamps. */
  const sentInOrder = fc
    .array(fc.constantFrom<Status | 'none'>('none', 'needs_input', 'update', 'result'), { minLength: 1, maxLength: 12 })
    .map((statuses) => {
      const sender = senders[0]!;
      return statuses.map((status, i) =>
        message(sender, receiver, { text: `m${i}`, ts: T0 + i, task_id: 'task', reply_to: `${sender.key}#s0`, ...(status !== 'none' && { status }) }),
      );
    });

  it('fetches one sender’s messages in the order sent, whatever order they arrive in, with supersession as if they came in order', () => {
    fc.assert(
      fc.property(
        sentInOrder.chain((sent) => fc.tuple(fc.constant(sent), fc.shuffledSubarray(sent, { minLength: sent.length, maxLength: sent.length }))),
        ([sent, arrival]) => {
          const inOrder = new MailboxState({ maxRecords: 4096, maxBytes: 1 << 30 });
          const shuffled = new MailboxState({ maxRecords: 4096, maxBytes: 1 << 30 });
          sent.forEach((envelope, i) => inOrder.apply({ op: 'store', at: T0 + i, envelope }));
          arrival.forEach((envelope, i) => shuffled.apply({ op: 'store', at: T0 + i, envelope }));
          const fetched = shuffled.unreadInFetchOrder().map((x) => x.envelope.msg_id);
          // The same messages survive supersession, in the order they were sent (progress after the rest).
          expect(fetched).toEqual(inOrder.unreadInFetchOrder().map((x) => x.envelope.msg_id));
          const surviving = sent.filter((e) => fetched.includes(e.msg_id));
          expect(fetched).toEqual([...surviving.filter((e) => !isProgress(e)), ...surviving.filter((e) => isProgress(e))].map((e) => e.msg_id));
          expect(shuffled.fromSender(senders[0]!.key).map((x) => x.envelope.msg_id)).toEqual(sent.map((e) => e.msg_id));
        },
      ),
      { numRuns: 300 },
    );
  });

  it('shows a message that arrives after later ones were acknowledged, on its own', () => {
    const sender = senders[0]!;
    const state = new MailboxState({ maxRecords: 4096, maxBytes: 1 << 30 });
    const [first, second, third] = [0, 1, 2].map((i) => message(sender, receiver, { text: `m${i}`, ts: T0 + i }));
    state.apply({ op: 'store', at: T0, envelope: second! });
    state.apply({ op: 'store', at: T0, envelope: third! });
    state.apply({ op: 'ack', at: T0, receipts: [second!, third!].map((e) => ({ sender: e.from, msg_id: e.msg_id })) });
    state.apply({ op: 'store', at: T0 + 1, envelope: first! });
    expect(state.unreadInFetchOrder().map((x) => x.envelope.text)).toEqual(['m0']);
    expect(state.fromSender(sender.key).map((x) => x.envelope.text)).toEqual(['m0', 'm1', 'm2']);
  });

  it('replays to the same state from the journal and from a snapshot', () => {
    fc.assert(
      fc.property(fc.array(actionArb, { maxLength: 80 }), fc.nat(), limitsArb, (actions, cut, limits) => {
        const r = run(actions, limits, () => undefined);
        const replayed = new MailboxState(limits);
        for (const op of r.ops) replayed.apply(op);
        expect(replayed.toData()).toEqual(r.state.toData());
        // A snapshot taken part-way plus the rest of the ops gives the same state too.
        const at = r.ops.length === 0 ? 0 : cut % (r.ops.length + 1);
        const prefix = new MailboxState(limits);
        for (const op of r.ops.slice(0, at)) prefix.apply(op);
        const resumed = MailboxState.fromData(JSON.parse(JSON.stringify(prefix.toData())), limits);
        for (const op of r.ops.slice(at)) resumed.apply(op);
        expect(resumed.toData()).toEqual(r.state.toData());
        expect(resumed.stats).toEqual(r.state.stats);
      }),
      { numRuns: 200 },
    );
  });

  it('prunes only acknowledged or superseded records past retention, and still refuses their replays', () => {
    const sender = senders[0]!;
    const state = new MailboxState({ maxRecords: 4096, maxBytes: 1 << 30 });
    // Sent with a clock 50 s ahead: still inside the gate's window when it is pruned.
    const acked = message(sender, receiver, { ts: T0 + 50_000 });
    const unread = message(sender, receiver, { ts: T0 });
    state.apply({ op: 'store', at: T0, envelope: acked });
    state.apply({ op: 'store', at: T0, envelope: unread });
    state.apply({ op: 'ack', at: T0 + 1, receipts: [{ sender: sender.key, msg_id: acked.msg_id }] });
    const later = T0 + RETENTION_MS + 10;
    state.apply({ op: 'store', at: later, envelope: message(sender, receiver, { ts: later }) });
    expect(state.get(sender.key, acked.msg_id)).toBeUndefined();
    expect(state.get(sender.key, unread.msg_id)).toBeDefined();
    expect(state.apply({ op: 'store', at: later, envelope: acked })).toEqual({ outcome: 'duplicate' });
    expect(state.apply({ op: 'ack', at: later, receipts: [{ sender: sender.key, msg_id: acked.msg_id }] })).toEqual({
      acknowledged: 0,
      already_acknowledged: 1,
      unknown: 0,
    });
  });

  it('makes room by evicting acknowledged records, never unread ones', () => {
    const sender = senders[0]!;
    const state = new MailboxState({ maxRecords: 2, maxBytes: 1 << 30 });
    const a = message(sender, receiver, { ts: T0 });
    const b = message(sender, receiver, { ts: T0 });
    const c = message(sender, receiver, { ts: T0 });
    state.apply({ op: 'store', at: T0, envelope: a });
    state.apply({ op: 'store', at: T0, envelope: b });
    expect(state.apply({ op: 'store', at: T0, envelope: c })).toEqual({ outcome: 'full', reason: 'records', sender: sender.key, noted: true });
    state.apply({ op: 'ack', at: T0, receipts: [{ sender: sender.key, msg_id: a.msg_id }] });
    expect(state.apply({ op: 'store', at: T0, envelope: c })).toMatchObject({ outcome: 'stored' });
    expect(state.get(sender.key, a.msg_id)).toBeUndefined();
    expect(state.has(sender.key, a.msg_id)).toBe(true);
    expect(state.get(sender.key, b.msg_id)).toBeDefined();
  });
});
