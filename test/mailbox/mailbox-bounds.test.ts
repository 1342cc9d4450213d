/**
 * The mailbox's bounds (DESIGN.md "The mailbox"): superseded progress never keeps mail
 * out, one sender exhausts only its share, tombstones are bounded in count and what they
 * forget is never admitted twice, and a refusal names its bound and sender. The pure rules
 * exhaustively or against models, the state over random operation sequences, and the
 * files written before these bounds still load as they were.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Envelope, Status } from '../../src/envelope/envelope.js';
import type { Op } from '../../src/mailbox/format.js';
import { Mailbox, mailboxFormat } from '../../src/mailbox/mailbox.js';
import { DEFAULT_LIMITS, admit, admitToShare, heaviestSender, isProgress, senderShare, supersessionKey, victims, type Holdings, type Limits } from '../../src/mailbox/rules.js';
import { isAcknowledged, isUnread } from '../../src/mailbox/record-state.js';
import { MailboxState, type StoreOutcome } from '../../src/mailbox/state.js';
import { headerLine, journalLine } from '../../src/store/journal-lines.js';
import { journalPathOf } from '../../src/store/journal.js';
import { message, newIdentity, tempDir } from '../helpers/fixtures.js';

const receiver = newIdentity(41);
const senders = [newIdentity(42), newIdentity(43), newIdentity(44)];
const T0 = 1_900_000_000_000;
const key = (e: { from: string; msg_id: string }) => `${e.from} ${e.msg_id}`;

describe('bounds: the pure rules', () => {
  const small = fc.integer({ min: 0, max: 12 });

  it('admitToShare refuses exactly the arrivals that grow a sender past its share (exhaustively, on small numbers)', () => {
    const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, k) => from + k);
    for (const shareRecords of range(1, 4))
      for (const shareBytes of range(1, 6))
        for (const records of range(0, 6))
          for (const bytes of range(0, 7))
            for (const dr of range(-2, 2))
              for (const db of range(-6, 6)) {
                const verdict = admitToShare({ records, bytes }, { records: dr, bytes: db }, { maxRecords: 100, maxBytes: 1000, senderRecords: shareRecords, senderBytes: shareBytes });
                const overRecords = dr > 0 && records + dr > shareRecords;
                const overBytes = db > 0 && bytes + db > shareBytes;
                expect(verdict).toEqual(overRecords ? { ok: false, reason: 'sender_records' } : overBytes ? { ok: false, reason: 'sender_bytes' } : { ok: true });
              }
  });

  it('a share is a quarter of each bound unless set', () => {
    expect(senderShare(DEFAULT_LIMITS)).toEqual({ records: 1024, bytes: 8 * 1024 * 1024 });
    expect(senderShare({ maxRecords: 6, maxBytes: 10, senderRecords: 5 })).toEqual({ records: 5, bytes: 3 });
  });

  it('victims evicts the fewest candidates, in their order, that make the arrival fit', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 30 }), { maxLength: 10 }), small, fc.integer({ min: 0, max: 40 }), fc.integer({ min: 1, max: 12 }), fc.integer({ min: 1, max: 200 }), (sizes, extra, incoming, maxRecords, maxBytes) => {
        const candidates = sizes.map((size, i) => ({ size, i }));
        const current: Holdings = { records: sizes.length + extra, bytes: sizes.reduce((a, b) => a + b, 0) + extra };
        const limits = { maxRecords, maxBytes };
        const result = victims(current, incoming, limits, candidates);
        const after = (n: number) => ({ records: current.records - n, bytes: current.bytes - sizes.slice(0, n).reduce((a, b) => a + b, 0) });
        const fits = (n: number) => admit(after(n), incoming, limits).ok;
        const fewest = [...Array(sizes.length + 1).keys()].find(fits);
        if (fewest === undefined) expect(result).toEqual(admit(after(sizes.length), incoming, limits));
        else expect(result).toEqual({ ok: true, taken: candidates.slice(0, fewest) });
      }),
      { numRuns: 2000 },
    );
  });

  it('heaviestSender names the sender holding the most, the smaller key on a tie', () => {
    fc.assert(
      fc.property(fc.dictionary(fc.constantFrom('a', 'b', 'c', 'd'), fc.integer({ min: 1, max: 5 })), (counts) => {
        const map = new Map(Object.entries(counts));
        const most = Math.max(...map.values());
        const expected = [...map].filter(([, c]) => c === most).map(([s]) => s).sort()[0];
        expect(heaviestSender(map)).toBe(expected);
      }),
    );
  });
});

type Action =
  | { kind: 'store'; sender: number; task: number; status: Status | 'none'; pad: number; tsOffset: number }
  | { kind: 'redeliver'; pick: number }
  | { kind: 'ack'; picks: number[] }
  | { kind: 'advance'; ms: number };

/** Sender 0 floods progress for one task; the others write a bit of everything. */
const actionArb: fc.Arbitrary<Action> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ kind: fc.constant('store' as const), sender: fc.constant(0), task: fc.constant(1), status: fc.constant<Status | 'none'>('update'), pad: fc.integer({ min: 0, max: 200 }), tsOffset: fc.integer({ min: -3_000, max: 3_000 }) }) },
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant('store' as const),
      sender: fc.integer({ min: 0, max: 2 }),
      task: fc.integer({ min: 0, max: 3 }),
      status: fc.constantFrom<Status | 'none'>('none', 'update', 'needs_input', 'result'),
      pad: fc.integer({ min: 0, max: 600 }),
      tsOffset: fc.integer({ min: -3_000, max: 3_000 }),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('redeliver' as const), pick: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('ack' as const), picks: fc.array(fc.nat(), { minLength: 1, maxLength: 4 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 1, max: 60_000 }) }) },
);

const limitsArb = fc.constantFrom<Limits>(
  { maxRecords: 8, maxBytes: 1 << 30, senderRecords: 3, maxTombstones: 4 },
  { maxRecords: 12, maxBytes: 12_000, senderRecords: 4, senderBytes: 5_000, maxTombstones: 6 },
  { maxRecords: 6, maxBytes: 1 << 30, maxTombstones: 100 },
);

interface Step {
  state: MailboxState;
  op: Extract<Op, { op: 'store' }> | Extract<Op, { op: 'ack' }>;
  result: unknown;
  before: { evictable: number; unreadBy: Map<string, Holdings> };
}

function unreadBy(state: MailboxState): Map<string, Holdings> {
  const held = new Map<string, Holdings>();
  for (const r of state.all()) {
    if (!isUnread(r)) continue;
    const h = held.get(r.envelope.from) ?? { records: 0, bytes: 0 };
    held.set(r.envelope.from, { records: h.records + 1, bytes: h.bytes + r.size });
  }
  return held;
}

function play(actions: Action[], limits: Limits, check: (step: Step) => void): { state: MailboxState; ops: Op[]; sent: Envelope[] } {
  const state = new MailboxState(limits);
  const ops: Op[] = [];
  const sent: Envelope[] = [];
  let now = T0;
  for (const a of actions) {
    let op: Step['op'] | undefined;
    if (a.kind === 'advance') now += a.ms;
    else if (a.kind === 'store') {
      const from = senders[a.sender]!;
      const envelope = message(from, receiver, {
        text: `t${a.task} ${a.status} ${'x'.repeat(a.pad)}`,
        ts: now + a.tsOffset,
        ...(a.task > 0 && { task_id: `task-${a.task}` }),
        ...(a.status !== 'none' && { status: a.status }),
        reply_to: `${from.key}#s0`,
      });
      sent.push(envelope);
      op = { op: 'store', at: now, envelope, rules: 2 };
    } else if (a.kind === 'redeliver' && sent.length > 0) op = { op: 'store', at: now, envelope: sent[a.pick % sent.length]!, rules: 2 };
    else if (a.kind === 'ack' && sent.length > 0) op = { op: 'ack', at: now, receipts: a.picks.map((p) => ({ sender: sent[p % sent.length]!.from, msg_id: sent[p % sent.length]!.msg_id })) };
    if (op === undefined) continue;
    const before = { evictable: [...state.all()].filter((r) => !isUnread(r)).length, unreadBy: unreadBy(state) };
    const result = state.apply(op);
    ops.push(op);
    check({ state, op, result, before });
  }
  return { state, ops, sent };
}

describe('bounds: the mailbox state', () => {
  it('never admits a message twice, whatever its record and tombstone became', () => {
    fc.assert(
      fc.property(fc.array(actionArb, { maxLength: 120 }), limitsArb, (actions, limits) => {
        const admitted = new Set<string>();
        play(actions, limits, ({ op, result }) => {
          if (op.op !== 'store') return;
          const outcome = (result as StoreOutcome).outcome;
          if (outcome === 'stored') {
            expect(admitted.has(key(op.envelope)), 'admitted a second time').toBe(false);
            admitted.add(key(op.envelope));
          }
        });
      }),
      { numRuns: 400 },
    );
  });

  it('never evicts unread mail; refuses for the mailbox only when nothing is left to evict, for a share only past it', () => {
    fc.assert(
      fc.property(fc.array(actionArb, { maxLength: 120 }), limitsArb, (actions, limits) => {
        const unread = new Map<string, Envelope>();
        const share = senderShare(limits);
        play(actions, limits, ({ state, op, result, before }) => {
          if (op.op === 'store') {
            const r = result as StoreOutcome;
            if (r.outcome === 'stored' && isUnread(r.record)) unread.set(key(op.envelope), op.envelope);
            if (r.outcome === 'full') {
              expect(r.sender).toBe(op.envelope.from);
              if (r.reason === 'records' || r.reason === 'bytes') expect(before.evictable, 'refused with superseded or acknowledged records left').toBe(0);
              else {
                const held = before.unreadBy.get(op.envelope.from) ?? { records: 0, bytes: 0 };
                if (r.reason === 'sender_records') expect(held.records + 1).toBeGreaterThan(share.records);
                else expect(held.bytes).toBeGreaterThan(0);
              }
            }
          } else for (const receipt of op.receipts) unread.delete(`${receipt.sender} ${receipt.msg_id}`);
          for (const [k, envelope] of unread) {
            const record = state.get(envelope.from, envelope.msg_id);
            // Only the arrival that supersedes a progress record may evict it at once.
            const supersededNow = op.op === 'store' && (result as StoreOutcome).outcome === 'stored' && supersessionKey(op.envelope) === supersessionKey(envelope) && isProgress(envelope);
            if (record === undefined && supersededNow) unread.delete(k);
            else expect(record, `unread ${k} must still be stored`).toBeDefined();
            if (record !== undefined && !isUnread(record)) unread.delete(k);
          }
          // Each sender's unread mail stays within its share; the mailbox within its bounds.
          for (const held of unreadBy(state).values()) {
            expect(held.records).toBeLessThanOrEqual(share.records);
            expect(held.bytes).toBeLessThanOrEqual(share.bytes);
          }
          expect(state.stats.records).toBeLessThanOrEqual(limits.maxRecords);
          expect(state.stats.tombstones).toBeLessThanOrEqual(limits.maxTombstones!);
          expect(new Map(state.bounds().senders.map((s) => [s.sender, s.unread]))).toEqual(unreadBy(state));
        });
      }),
      { numRuns: 400 },
    );
  });

  it('replays to the same state from the journal and from a snapshot, refusals and floors included', () => {
    fc.assert(
      fc.property(fc.array(actionArb, { maxLength: 120 }), fc.nat(), limitsArb, (actions, cut, limits) => {
        const run = play(actions, limits, () => undefined);
        // Only what changed the state is journaled (mailboxFormat.changes).
        const format = mailboxFormat(limits);
        const replayed = format.empty();
        const journaled: Op[] = [];
        for (const op of run.ops) if (format.changes(format.apply(replayed, op))) journaled.push(op);
        const fromJournal = format.empty();
        for (const op of journaled) format.apply(fromJournal, op);
        expect(fromJournal.toData()).toEqual(run.state.toData());
        const at = cut % (journaled.length + 1);
        const prefix = format.empty();
        for (const op of journaled.slice(0, at)) format.apply(prefix, op);
        const resumed = MailboxState.fromData(JSON.parse(JSON.stringify(prefix.toData())), limits);
        for (const op of journaled.slice(at)) resumed.apply(op);
        expect(resumed.toData()).toEqual(run.state.toData());
        expect(resumed.bounds()).toEqual(run.state.bounds());
      }),
      { numRuns: 300 },
    );
  });
});

describe('bounds: one peer cannot silence a session', () => {
  const [alice, carol] = [senders[0]!, senders[1]!];
  const store = (state: MailboxState, envelope: Envelope, at: number) => state.apply({ op: 'store', at, envelope, rules: 2 }) as StoreOutcome;

  it('4,200 updates for one task leave room for another peer, who is admitted and read', () => {
    const state = new MailboxState(DEFAULT_LIMITS);
    for (let i = 0; i < 4_200; i++) {
      const update = message(alice, receiver, { ts: T0 + i, task_id: 'build', status: 'update', text: `step ${i}`, reply_to: `${alice.key}#s0` });
      expect(store(state, update, T0 + i).outcome).toBe('stored');
    }
    const question = message(carol, receiver, { ts: T0 + 5_000, text: 'are you there?' });
    expect(store(state, question, T0 + 5_000).outcome).toBe('stored');
    expect(state.unreadInFetchOrder().map((r) => r.envelope.text)).toEqual(['are you there?', 'step 4199']);
    expect(state.stats.records).toBeLessThanOrEqual(DEFAULT_LIMITS.maxRecords);
  });

  it('refuses a peer past its share of unread mail, names the bound and the peer, and lets it finish its tasks', () => {
    const limits: Limits = { maxRecords: 16, maxBytes: 1 << 30 };
    const state = new MailboxState(limits);
    const progress = (ts: number) => message(alice, receiver, { ts, task_id: 't', status: 'update', reply_to: `${alice.key}#s0` });
    const own = [...Array.from({ length: 3 }, (_, i) => message(alice, receiver, { ts: T0 + i, text: `q${i}` })), progress(T0 + 3)];
    for (const e of own) expect(store(state, e, T0).outcome).toBe('stored');
    const fifth = message(alice, receiver, { ts: T0 + 10, text: 'one too many' });
    expect(store(state, fifth, T0 + 10)).toEqual({ outcome: 'full', reason: 'sender_records', sender: alice.key, noted: true });
    // Offered again within the minute: still refused, and not news (nothing journaled).
    expect(store(state, fifth, T0 + 20)).toMatchObject({ outcome: 'full', noted: false });
    expect(state.bounds().refusals).toEqual([{ sender: alice.key, bound: 'sender_records', since: T0 + 10, at: T0 + 10 }]);
    // Another peer is admitted meanwhile.
    expect(store(state, message(carol, receiver, { ts: T0 + 30 }), T0 + 30).outcome).toBe('stored');
    // Progress superseding alice's own progress does not grow her share: admitted, and the refusal stands.
    expect(store(state, progress(T0 + 41), T0 + 41).outcome).toBe('stored');
    expect(store(state, progress(T0 + 42), T0 + 42).outcome).toBe('stored');
    expect(state.bounds().refusals.map((r) => r.bound)).toEqual(['sender_records']);
    // Once she has room again, her next message is admitted and the refusal is over.
    state.apply({ op: 'ack', at: T0 + 50, receipts: [{ sender: alice.key, msg_id: own[0]!.msg_id }] });
    expect(store(state, fifth, T0 + 60).outcome).toBe('stored');
    expect(state.bounds().refusals).toEqual([]);
  });

  it('bounds tombstones in count: the flooding sender forgets, the others keep theirs, and nothing comes back', () => {
    const limits: Limits = { maxRecords: 8, maxBytes: 1 << 30, senderRecords: 4, maxTombstones: 10 };
    const state = new MailboxState(limits);
    const carols = Array.from({ length: 3 }, (_, i) => message(carol, receiver, { ts: T0 + i, text: `c${i}` }));
    for (const e of carols) store(state, e, T0);
    state.apply({ op: 'ack', at: T0, receipts: carols.map((e) => ({ sender: e.from, msg_id: e.msg_id })) });
    const updates = Array.from({ length: 200 }, (_, i) => message(alice, receiver, { ts: T0 + 100 + i, task_id: 't', status: 'update', reply_to: `${alice.key}#s0` }));
    for (const [i, e] of updates.entries()) expect(store(state, e, T0 + 100 + i).outcome).toBe('stored');
    expect(state.stats.tombstones).toBeLessThanOrEqual(10);
    // Carol's acknowledged messages were evicted but she keeps every tombstone: replays are duplicates.
    for (const e of carols) expect(store(state, e, T0 + 400)).toEqual({ outcome: 'duplicate' });
    expect(state.bounds().forgotten.map((f) => f.sender)).toEqual([alice.key]);
    // Every update alice sent, offered again, is refused: by a record, a tombstone or her floor.
    for (const e of updates) expect(['duplicate', 'forgotten']).toContain(store(state, e, T0 + 400).outcome);
    // Her new mail is admitted.
    expect(store(state, message(alice, receiver, { ts: T0 + 500 }), T0 + 500).outcome).toBe('stored');
  });
});

describe('bounds: files written before them', () => {
  let dir: { path: string; remove: () => Promise<void> };
  let path: string;
  beforeEach(async () => {
    dir = await tempDir();
    path = join(dir.path, 'mailbox', receiver.key, 'main.json');
    await mkdir(dirname(path), { recursive: true });
  });
  afterEach(() => dir.remove());

  it('replays an old journal past a sender’s share without dropping what it admitted', async () => {
    const alice = senders[0]!;
    const format = mailboxFormat(DEFAULT_LIMITS);
    const ops = Array.from({ length: 1_100 }, (_, i) => ({ op: 'store', at: T0 + i, envelope: message(alice, receiver, { ts: T0 + i, text: `m${i}` }) }));
    await writeFile(journalPathOf(path), [headerLine(format, 0), ...ops.map(journalLine)].join(''), { mode: 0o600 });
    const mailbox = await Mailbox.open(path, { now: () => T0 + 2_000 });
    expect((await mailbox.stats()).unread).toBe(1_100);
    // New mail from her is now held to her share.
    expect((await mailbox.store(message(alice, receiver, { ts: T0 + 2_000 }))).outcome).toBe('full');
    await mailbox.close();
  });

  it('loads a snapshot with neither floors nor refusals', async () => {
    const alice = senders[0]!;
    const e = message(alice, receiver, { ts: T0 });
    const old = {
      format: 'interlink-mailbox',
      version: 1,
      generation: 1,
      data: { next_seq: 1, records: [{ seq: 0, envelope: e, received_at: T0, size: 10, states: [{ state: 'receiver_stored', at: T0 }] }], tombstones: [{ sender: alice.key, msg_id: 'a'.repeat(32), until: T0 + 10 ** 9 }], notice: null },
    };
    await writeFile(path, JSON.stringify(old), { mode: 0o600 });
    const mailbox = await Mailbox.open(path, { now: () => T0 + 1 });
    expect(mailbox.recoveries).toEqual([]);
    expect(await mailbox.stats()).toMatchObject({ records: 1, unread: 1, tombstones: 1 });
    expect(await mailbox.has(alice.key, 'a'.repeat(32))).toBe(true);
    expect((await mailbox.all()).filter((r) => !isAcknowledged(r))).toHaveLength(1);
    await mailbox.close();
  });
});
