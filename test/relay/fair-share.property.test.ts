/**
 * Fair shares in the pure queue state, against a plain model: random sends from a few
 * addresses and connections, acknowledgements and expiry. A send beyond its connection's
 * or address's share is refused exactly when the model says; shares are never negative
 * and add up to the totals; acknowledgement and expiry give the share back; replaying the
 * journal (where connections are not written) or reloading the snapshot reaches the same
 * address counts. Also: how an address is grouped, and the default shares.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { generateSigningKey } from '../../src/identity/ed25519.js';
import { payloadBytes, queueDataSchema, queueOpSchema, RelayQueueState, relayQueueFormat, type QueueOp, type QueueResult } from '../../src/relay/queues.js';
import { type QueueLimits, shareLimits, type Share } from '../../src/relay/limits.js';
import { sourceGroup } from '../../src/relay/shares.js';

const key = encodeBase64url(generateSigningKey().publicKey);
const ROUTES = ['a', 'b', 'c'].map((s) => `${key}#${s}`);
const SOURCES = ['src-a', 'src-b', undefined] as const;
/** Share holders (a proven key's or a network's, queue-store.ts `Origin`). */
const CONNECTIONS = ['key:a', 'key:b', 'net:c', undefined] as const;
const LIMITS: QueueLimits = {
  routeMessages: 8,
  messages: 12,
  bytes: 900,
  perAddress: { messages: 5, bytes: 400 },
  perConnection: { messages: 4, bytes: 200 },
};

type Step =
  | { kind: 'enq'; route: number; src: number; conn: number; size: number }
  | { kind: 'ack'; route: number; picks: number[] }
  | { kind: 'expire'; age: number }
  | { kind: 'tick' };

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 8, arbitrary: fc.record({ kind: fc.constant('enq' as const), route: fc.nat(2), src: fc.nat(2), conn: fc.nat(3), size: fc.oneof(fc.nat(8), fc.nat(120)) }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('ack' as const), route: fc.nat(2), picks: fc.array(fc.nat(), { minLength: 1, maxLength: 3 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('expire' as const), age: fc.nat(6) }) },
  { weight: 2, arbitrary: fc.constant({ kind: 'tick' as const }) },
);

interface Held {
  id: number;
  route: string;
  at: number;
  bytes: number;
  src: string | undefined;
  conn: string | undefined;
}

function sum(list: readonly Held[]): Share {
  return { messages: list.length, bytes: list.reduce((n, m) => n + m.bytes, 0) };
}

function fits(list: readonly Held[], bytes: number, limit: Share): boolean {
  const held = sum(list);
  return held.messages < limit.messages && held.bytes + bytes <= limit.bytes;
}

/** How often each bound refused, over all runs: every one must be reached for the test to mean anything. */
const refusals = new Map<string, number>();

/** What the model expects of an enqueue, in the state's order of checks. */
function expectedEnqueue(model: readonly Held[], m: Held): QueueResult {
  if (model.filter((x) => x.route === m.route).length >= LIMITS.routeMessages) return { outcome: 'queue_full', limit: 'routeMessages' };
  if (model.length >= LIMITS.messages) return { outcome: 'queue_full', limit: 'messages' };
  if (sum(model).bytes + m.bytes > LIMITS.bytes) return { outcome: 'queue_full', limit: 'bytes' };
  if (m.conn !== undefined && !fits(model.filter((x) => x.conn === m.conn), m.bytes, LIMITS.perConnection!)) return { outcome: 'queue_full', limit: 'perConnection' };
  if (m.src !== undefined && !fits(model.filter((x) => x.src === m.src), m.bytes, LIMITS.perAddress!)) return { outcome: 'queue_full', limit: 'perAddress' };
  return { outcome: 'enqueued', id: m.id };
}

/** Every address's and connection's share equals the model's, none negative, and they add up to the totals. */
function expectShares(state: RelayQueueState, model: readonly Held[], withConnections = true): void {
  const addressTotal = { messages: 0, bytes: 0 };
  for (const src of SOURCES) {
    if (src === undefined) continue;
    const held = state.held({ src }).address;
    expect(held).toEqual(sum(model.filter((m) => m.src === src)));
    expect(held.messages).toBeGreaterThanOrEqual(0);
    expect(held.bytes).toBeGreaterThanOrEqual(0);
    addressTotal.messages += held.messages;
    addressTotal.bytes += held.bytes;
  }
  const neutral = sum(model.filter((m) => m.src === undefined));
  expect({ messages: addressTotal.messages + neutral.messages, bytes: addressTotal.bytes + neutral.bytes }).toEqual({ messages: state.stats.messages, bytes: state.stats.bytes });
  for (const connection of CONNECTIONS) {
    if (connection === undefined) continue;
    const held = state.held({ connection }).connection;
    expect(held).toEqual(withConnections ? sum(model.filter((m) => m.conn === connection)) : { messages: 0, bytes: 0 });
    expect(held.messages).toBeGreaterThanOrEqual(0);
  }
}

function run(steps: readonly Step[]): { state: RelayQueueState; journal: QueueOp[]; model: Held[]; connectionOf: Map<number, string> } {
  const state = new RelayQueueState(LIMITS);
  let model: Held[] = [];
  const journal: QueueOp[] = [];
  const connectionOf = new Map<number, string>();
  let at = 0;
  let nextId = 0;
  for (const step of steps) {
    let op: QueueOp;
    let expected: QueueResult;
    let conn: string | undefined;
    if (step.kind === 'tick') {
      at++;
      continue;
    } else if (step.kind === 'enq') {
      const payload = JSON.stringify({ t: 'x'.repeat(step.size) });
      const m: Held = { id: nextId, route: ROUTES[step.route]!, at, bytes: payloadBytes(payload), src: SOURCES[step.src], conn: CONNECTIONS[step.conn] };
      conn = m.conn;
      op = { op: 'enq', at, route: m.route, id: m.id, payload, ...(m.src !== undefined && { src: m.src }) };
      expected = expectedEnqueue(model, m);
      if (expected.outcome === 'enqueued') {
        model.push(m);
        nextId++;
        if (conn !== undefined) connectionOf.set(m.id, conn);
      }
    } else if (step.kind === 'ack') {
      const route = ROUTES[step.route]!;
      const list = model.filter((m) => m.route === route);
      if (list.length === 0) continue;
      const ids = [...new Set(step.picks.map((p) => list[p % list.length]!.id))];
      op = { op: 'ack', at, route, ids };
      expected = { outcome: 'acked', removed: ids.length };
      model = model.filter((m) => !ids.includes(m.id));
    } else {
      const before = at - step.age;
      op = { op: 'expire', at, before };
      expected = { outcome: 'expired', removed: model.filter((m) => m.at < before).length };
      model = model.filter((m) => m.at >= before);
    }
    const result = state.apply(op, conn);
    expect(result).toEqual(expected);
    if (result.outcome === 'queue_full') {
      const share = result.limit === 'perConnection' ? state.held({ connection: conn }).connection : state.held({ src: (op as { src?: string }).src }).address;
      const by = share.messages >= (result.limit === 'perConnection' ? LIMITS.perConnection! : LIMITS.perAddress!).messages ? 'messages' : 'bytes';
      const bound = result.limit === 'perConnection' || result.limit === 'perAddress' ? `${result.limit} ${by}` : result.limit;
      refusals.set(bound, (refusals.get(bound) ?? 0) + 1);
    }
    if (relayQueueFormat().changes(result)) journal.push(op);
    expectShares(state, model);
  }
  return { state, journal, model, connectionOf };
}

describe('fair shares in RelayQueueState', () => {
  it('refuse exactly beyond a share, never go negative, add up to the totals, and come back the same from the journal and the snapshot', () => {
    fc.assert(
      fc.property(fc.array(stepArb, { maxLength: 120, size: 'max' }), (steps) => {
        const { state, journal, model, connectionOf } = run(steps);
        const written = journal.map((op) => queueOpSchema.parse(JSON.parse(JSON.stringify(op))));
        // After a restart: the journal names no connection, so only addresses count.
        const restarted = new RelayQueueState(LIMITS);
        for (const op of written) restarted.apply(op);
        expect(restarted.toData()).toEqual(state.toData());
        expectShares(restarted, model, false);
        // A reload within the run (the store read its files again): connections still known.
        const format = relayQueueFormat(LIMITS, () => {}, (id) => connectionOf.get(id));
        const reloaded = format.empty();
        for (const op of written) format.apply(reloaded, op);
        expectShares(reloaded, model);
        // The snapshot keeps each message's address.
        const data = queueDataSchema.parse(JSON.parse(JSON.stringify(state.toData())));
        expectShares(RelayQueueState.fromData(data, LIMITS), model, false);
      }),
      // Seeded: the check below needs the runs to reach every kind of share, which a random
      // seed missed about one run in eight (a flaky test). This seed reaches them all.
      { numRuns: 300, seed: 20261201 },
    );
    expect([...refusals.keys()].sort()).toEqual(expect.arrayContaining(['perAddress bytes', 'perAddress messages', 'perConnection bytes', 'perConnection messages']));
  });

  it('loads a journal and a snapshot written before shares existed: their messages count against no address', () => {
    const route = ROUTES[0]!;
    const old = queueOpSchema.parse({ op: 'enq', at: 0, route, id: 0, payload: '{"old":1}' });
    const state = new RelayQueueState(LIMITS);
    expect(state.apply(old)).toEqual({ outcome: 'enqueued', id: 0 });
    expect(state.held({ src: 'src-a' }).address).toEqual({ messages: 0, bytes: 0 });
    const snapshot = queueDataSchema.parse({ next_id: 1, routes: [{ route, messages: [{ id: 0, at: 0, payload: '{"old":1}' }] }] });
    const loaded = RelayQueueState.fromData(snapshot, LIMITS);
    expect(loaded.stats.messages).toBe(1);
    expect(loaded.toData()).toEqual(snapshot);
  });
});

describe('source addresses', () => {
  it('count IPv4 as it is, IPv4-mapped IPv6 as IPv4, and IPv6 by its /64', () => {
    expect(sourceGroup('192.0.2.7')).toBe('192.0.2.7');
    expect(sourceGroup('::ffff:192.0.2.7')).toBe('192.0.2.7');
    expect(sourceGroup('::FFFF:127.0.0.2')).toBe('127.0.0.2');
    const net = '2001:0db8:0001:0002::/64';
    for (const address of ['2001:db8:1:2::1', '2001:db8:1:2:ffff:ffff:ffff:ffff', '2001:DB8:1:2:0:0:0:9', '2001:db8:1:2::5%eth0']) {
      expect(sourceGroup(address)).toBe(net);
    }
    expect(sourceGroup('2001:db8:1:3::1')).not.toBe(net);
    expect(sourceGroup('::1')).toBe('0000:0000:0000:0000::/64');
    expect(sourceGroup('64:ff9b::192.0.2.1')).toBe('0064:ff9b:0000:0000::/64');
    expect(sourceGroup(undefined)).toBeUndefined();
  });

  it('share a tenth of the relay per address and a twentieth per connection, the whole relay per address on loopback, never more than the relay', () => {
    const total = { messages: 100_000, bytes: 512 * 1024 * 1024 };
    expect(shareLimits({ messages: 5, bytes: 100 }, '0.0.0.0')).toEqual({ perAddress: { messages: 5, bytes: 100 }, perConnection: { messages: 5, bytes: 100 } });
    expect(shareLimits(total, '0.0.0.0')).toEqual({ perAddress: { messages: 10_000, bytes: 53_687_091 }, perConnection: { messages: 5_000, bytes: 26_843_545 } });
    expect(shareLimits(total, '127.0.0.1').perAddress).toEqual(total);
    expect(shareLimits(total, '127.0.0.1').perConnection.messages).toBe(5_000);
    expect(shareLimits(total, '::', { perAddress: 40, perConnection: 10 })).toEqual({
      perAddress: { messages: 40, bytes: 214_748 },
      perConnection: { messages: 10, bytes: 53_687 },
    });
    expect(shareLimits(total, '::', { perAddress: 1_000_000 }).perAddress).toEqual(total);
  });
});
