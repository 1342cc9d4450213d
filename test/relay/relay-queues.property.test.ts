/**
 * RelayQueueState against a plain model: random enqueues and acknowledgements never lose
 * an accepted message, ids increase, counts stay consistent, the bounds refuse exactly
 * when they should, and replaying the journaled ops (or reloading the snapshot, or the
 * files through JournalStore) reproduces the state.
 */
import fc from 'fast-check';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateSigningKey } from '../../src/identity/ed25519.js';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { payloadBytes, queueDataSchema, queueOpSchema, RelayQueueState, relayQueueFormat, type QueueOp, type QueueResult } from '../../src/relay/queues.js';
import { type QueueLimits } from '../../src/relay/limits.js';
import { JournalStore } from '../../src/store/journal-store.js';
import { tempDir } from '../helpers/fixtures.js';

const key = encodeBase64url(generateSigningKey().publicKey);
const ROUTES = ['a', 'b', 'c'].map((s) => `${key}#${s}`);
const LIMITS: QueueLimits = { routeMessages: 5, messages: 8, bytes: 300 };

type Step =
  | { kind: 'enq'; route: number; size: number; gap: number }
  | { kind: 'reuse'; route: number }
  | { kind: 'ack'; route: number; picks: number[]; unknown: number[] };

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ kind: fc.constant('enq' as const), route: fc.nat(2), size: fc.nat(60), gap: fc.nat(2) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('reuse' as const), route: fc.nat(2) }) },
  {
    weight: 4,
    arbitrary: fc.record({ kind: fc.constant('ack' as const), route: fc.nat(2), picks: fc.array(fc.nat(), { maxLength: 4 }), unknown: fc.array(fc.nat(50), { maxLength: 2 }) }),
  },
);

interface Model {
  routes: Map<string, { id: number; payload: string }[]>;
  nextId: number;
}

function modelBytes(model: Model): number {
  let total = 0;
  for (const list of model.routes.values()) for (const m of list) total += payloadBytes(m.payload);
  return total;
}

function modelCount(model: Model): number {
  let total = 0;
  for (const list of model.routes.values()) total += list.length;
  return total;
}

function expectMatches(state: RelayQueueState, model: Model): void {
  for (const route of ROUTES) {
    const expected = model.routes.get(route) ?? [];
    expect(state.messages(route).map((m) => ({ id: m.id, payload: m.payload }))).toEqual(expected);
    expect(state.size(route)).toBe(expected.length);
    // nextAfter agrees with the model from every cursor.
    for (const after of [-1, ...expected.map((m) => m.id)]) {
      expect(state.nextAfter(route, after)?.id).toBe(expected.find((m) => m.id > after)?.id);
    }
  }
  expect(state.stats.messages).toBe(modelCount(model));
  expect(state.stats.bytes).toBe(modelBytes(model));
  expect(state.stats.routes).toBe([...model.routes.values()].filter((l) => l.length > 0).length);
  expect(state.nextId).toBe(model.nextId);
}

/** Runs the steps on a state and the model; returns the ops that changed the state (the journal). */
function run(steps: readonly Step[]): { state: RelayQueueState; journal: QueueOp[] } {
  const state = new RelayQueueState(LIMITS);
  const model: Model = { routes: new Map(), nextId: 0 };
  const journal: QueueOp[] = [];
  let at = 0;
  for (const step of steps) {
    const route = ROUTES[step.route]!;
    const list = model.routes.get(route) ?? [];
    let op: QueueOp;
    let expected: QueueResult;
    if (step.kind === 'enq' || step.kind === 'reuse') {
      const reuse = step.kind === 'reuse' && model.nextId > 0;
      const id = reuse ? model.nextId - 1 : model.nextId + (step.kind === 'enq' ? step.gap : 0);
      const payload = JSON.stringify({ t: 'x'.repeat(step.kind === 'enq' ? step.size : 1) });
      op = { op: 'enq', at: at++, route, id, payload };
      if (reuse) expected = { outcome: 'id_reused', id };
      else if (list.length >= LIMITS.routeMessages) expected = { outcome: 'queue_full', limit: 'routeMessages' };
      else if (modelCount(model) >= LIMITS.messages) expected = { outcome: 'queue_full', limit: 'messages' };
      else if (modelBytes(model) + payloadBytes(payload) > LIMITS.bytes) expected = { outcome: 'queue_full', limit: 'bytes' };
      else {
        expected = { outcome: 'enqueued', id };
        model.routes.set(route, [...list, { id, payload }]);
        model.nextId = id + 1;
      }
    } else {
      const known = list.length > 0 ? step.picks.map((p) => list[p % list.length]!.id) : [];
      const ids = [...known, ...step.unknown.map((u) => model.nextId + 100 + u)];
      if (ids.length === 0) continue;
      op = { op: 'ack', at: at++, route, ids };
      const remove = new Set(known);
      expected = { outcome: 'acked', removed: remove.size };
      model.routes.set(
        route,
        list.filter((m) => !remove.has(m.id)),
      );
    }
    const result = state.apply(op);
    expect(result).toEqual(expected);
    if (relayQueueFormat().changes(result)) journal.push(op);
    expectMatches(state, model);
  }
  return { state, journal };
}

describe('RelayQueueState', () => {
  it('matches the model; ids increase within every route; replay and reload reproduce the state', () => {
    fc.assert(
      fc.property(fc.array(stepArb, { maxLength: 80 }), (steps) => {
        const { state, journal } = run(steps);
        for (const route of ROUTES) {
          const ids = state.messages(route).map((m) => m.id);
          expect(ids).toEqual([...ids].sort((x, y) => x - y));
          expect(new Set(ids).size).toBe(ids.length);
        }
        // The journal, as written and read back, replays to the same state.
        const replayed = new RelayQueueState(LIMITS);
        for (const op of journal) replayed.apply(queueOpSchema.parse(JSON.parse(JSON.stringify(op))));
        expect(replayed.toData()).toEqual(state.toData());
        // So does the snapshot.
        const data = queueDataSchema.parse(JSON.parse(JSON.stringify(state.toData())));
        const reloaded = RelayQueueState.fromData(data, LIMITS);
        expect(reloaded.toData()).toEqual(state.toData());
        expect(reloaded.stats).toEqual(state.stats);
        expect(reloaded.nextId).toBe(state.nextId);
      }),
      { numRuns: 300 },
    );
  });

  it('sweeps acknowledged ids without losing order in a long queue', () => {
    const state = new RelayQueueState({ routeMessages: 10_000, messages: 10_000, bytes: 1 << 30 });
    const route = ROUTES[0]!;
    for (let id = 0; id < 1000; id++) state.apply({ op: 'enq', at: 0, route, id, payload: '{}' });
    // Acknowledge every id but multiples of 7, in scattered batches.
    const acked = Array.from({ length: 1000 }, (_, i) => i).filter((i) => i % 7 !== 0);
    for (let i = 0; i < acked.length; i += 37) state.apply({ op: 'ack', at: 0, route, ids: acked.slice(i, i + 37).reverse() });
    const left = state.messages(route).map((m) => m.id);
    expect(left).toEqual(Array.from({ length: 1000 }, (_, i) => i).filter((i) => i % 7 === 0));
    expect(state.nextAfter(route, 700)?.id).toBe(707);
    expect(state.nextAfter(route, 700, 707)).toBeUndefined();
  });

  it('refuses a snapshot whose ids do not increase or reach next_id', () => {
    const route = ROUTES[0]!;
    const message = (id: number) => ({ id, at: 0, payload: '{}' });
    expect(queueDataSchema.safeParse({ next_id: 3, routes: [{ route, messages: [message(1), message(2)] }] }).success).toBe(true);
    expect(queueDataSchema.safeParse({ next_id: 3, routes: [{ route, messages: [message(2), message(1)] }] }).success).toBe(false);
    expect(queueDataSchema.safeParse({ next_id: 2, routes: [{ route, messages: [message(2)] }] }).success).toBe(false);
    expect(queueDataSchema.safeParse({ next_id: 3, routes: [{ route, messages: [message(1)] }, { route, messages: [message(2)] }] }).success).toBe(false);
    expect(queueOpSchema.safeParse({ op: 'enq', at: 0, route: 'no-route', id: 0, payload: '{}' }).success).toBe(false);
  });
});

describe('relay queues on disk', () => {
  let dir: { path: string; remove: () => Promise<void> };
  beforeAll(async () => (dir = await tempDir('interlink-relay-queues-')));
  afterAll(() => dir.remove());

  it('reopen to the state their ops describe, through compactions', async () => {
    let n = 0;
    let compacted = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(stepArb, { maxLength: 40 }), async (steps) => {
        const { state, journal } = run(steps);
        const path = join(dir.path, `run-${n}`, 'queues.json');
        // Every other run appends large messages, which push the journal past its compaction threshold.
        const big = n++ % 2 === 1;
        const roomy = { routeMessages: 1000, messages: 1000, bytes: 1 << 30 };
        let live: RelayQueueState | undefined;
        const store = await JournalStore.open(path, relayQueueFormat(roomy, (s) => (live = s)));
        const tail: QueueOp[] = big
          ? Array.from({ length: 4 }, (_, i) => ({ op: 'enq', at: 0, route: ROUTES[0]!, id: state.nextId + i, payload: JSON.stringify({ p: 'p'.repeat(400_000) }) }))
          : [];
        const ops = [...journal, ...tail];
        for (const op of ops) await store.submit(op);
        const expected = new RelayQueueState(roomy);
        for (const op of ops) expected.apply(op);
        expect(live?.toData()).toEqual(expected.toData());
        if (!big) expect(expected.toData()).toEqual(state.toData());
        let reopened: RelayQueueState | undefined;
        await JournalStore.open(path, relayQueueFormat(roomy, (s) => (reopened = s)));
        expect(reopened?.toData()).toEqual(expected.toData());
        if (existsSync(path)) compacted++;
      }),
      { numRuns: 15 },
    );
    expect(compacted).toBeGreaterThan(0);
  });
});
