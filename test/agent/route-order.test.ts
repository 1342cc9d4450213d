/**
 * The order rule of the outbound loop (src/agent/route-order.ts): what it offers, checked
 * case by case and over every input fast-check makes, and what it guarantees, checked on
 * a model of relays and a receiver: whatever the relays answer (accept, refuse, no answer)
 * and in whatever order the receiver reads them, it is handed a route's messages in the
 * order they were sent, and once the relays accept again it is handed all of them.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { offersNow, type RouteMessage } from '../../src/agent/route-order.js';

const RELAYS: readonly string[] = ['A', 'B', 'C'];
const none = () => false;
const msg = (msgId: string, acceptedBy: string[] = [], reported = false): RouteMessage => ({ msgId, acceptedBy, reported });
const up = (...names: string[]) => names.map((relay) => ({ relay, connected: true }));

describe('offersNow', () => {
  it('offers only the oldest pending message, to every connected relay that is not offered it already', () => {
    const messages = [msg('1', ['A', 'B']), msg('2'), msg('3')];
    expect(offersNow(messages, [...up('A', 'B'), { relay: 'C', connected: false }], none)).toEqual([
      { msgId: '2', relay: 'A' },
      { msgId: '2', relay: 'B' },
    ]);
    expect(offersNow(messages, up('A', 'B'), (relay, id) => relay === 'A' && id === '2')).toEqual([{ msgId: '2', relay: 'B' }]);
    // Refused or unanswered: the head is offered again, and still nothing behind it.
    expect(offersNow([msg('2'), msg('3')], up('A'), none)).toEqual([{ msgId: '2', relay: 'A' }]);
    expect(offersNow([msg('1', ['A'])], up('A'), none)).toEqual([]);
  });

  it('with a window, pipelines the pending run behind the head to the first relay that takes the head, in send order', () => {
    const messages = [msg('1'), msg('2'), msg('3'), msg('4', ['A']), msg('5')];
    expect(offersNow(messages, up('A', 'B'), none, 3)).toEqual([
      { msgId: '1', relay: 'A' },
      { msgId: '1', relay: 'B' },
      { msgId: '2', relay: 'A' },
      { msgId: '3', relay: 'A' },
    ]);
    // Already on their way: only what is not; never past a message accepted out of turn.
    const onTheirWay = (relay: string, id: string) => relay === 'A' && (id === '1' || id === '2');
    expect(offersNow(messages, up('A'), onTheirWay, 10)).toEqual([{ msgId: '3', relay: 'A' }]);
    expect(offersNow(messages, up('A'), none, 1)).toEqual([{ msgId: '1', relay: 'A' }]);
  });

  it('offers the next message only to relays holding every earlier one the receiver has not reported', () => {
    const relays = up('A', 'B');
    expect(offersNow([msg('1', ['A']), msg('2')], relays, none)).toEqual([{ msgId: '2', relay: 'A' }]);
    expect(offersNow([msg('1', ['A']), msg('2', ['B']), msg('3')], relays, none)).toEqual([]);
    expect(offersNow([msg('1', ['A'], true), msg('2', ['B']), msg('3')], relays, none)).toEqual([{ msgId: '3', relay: 'B' }]);
    // Held only by a relay no longer configured, or not connected now: the route goes on without it.
    expect(offersNow([msg('1', ['gone']), msg('2')], relays, none)).toEqual([
      { msgId: '2', relay: 'A' },
      { msgId: '2', relay: 'B' },
    ]);
    expect(offersNow([msg('1', ['C']), msg('2')], [...relays, { relay: 'C', connected: false }], none)).toEqual([
      { msgId: '2', relay: 'A' },
      { msgId: '2', relay: 'B' },
    ]);
  });

  it('for any input: one message, the oldest pending, only to connected relays not offered it, each holding the earlier ones a connected relay holds, and every such relay', () => {
    const route = fc.array(fc.record({ acceptedBy: fc.subarray([...RELAYS, 'gone']), reported: fc.boolean() }), { maxLength: 8 });
    const relays = fc.subarray([...RELAYS], { minLength: 1 }).chain((names) => fc.tuple(...names.map((relay) => fc.record({ relay: fc.constant(relay), connected: fc.boolean() }))));
    const offered = fc.subarray(RELAYS.flatMap((relay) => Array.from({ length: 8 }, (_, i) => `${relay} ${i}`)));
    fc.assert(
      fc.property(route, relays, offered, (shapes, configured, inFlight) => {
        const messages = shapes.map((s, i) => msg(String(i), s.acceptedBy, s.reported));
        const isOffered = (relay: string, id: string) => inFlight.includes(`${relay} ${id}`);
        const offers = offersNow(messages, configured, isOffered);
        const head = messages.findIndex((m) => m.acceptedBy.length === 0);
        const names = new Set(configured.filter((r) => r.connected).map((r) => r.relay));
        const holds = (relay: string) =>
          messages.slice(0, Math.max(head, 0)).every((m) => m.reported || !m.acceptedBy.some((r) => names.has(r)) || m.acceptedBy.includes(relay));
        const eligible = head < 0 ? [] : configured.filter((r) => r.connected && !isOffered(r.relay, String(head)) && holds(r.relay)).map((r) => r.relay);
        expect(offers.map((o) => o.relay)).toEqual(eligible);
        for (const offer of offers) expect(offer.msgId).toBe(String(head));
      }),
    );
  });
});

/** One step of the model: what the sender, a relay, the network or the receiver does next. */
type Step =
  | { kind: 'offer' }
  | { kind: 'answer'; pick: number; accept: boolean }
  | { kind: 'toggle'; relay: number }
  | { kind: 'deliver'; relay: number }
  | { kind: 'receipt' };

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.constant<Step>({ kind: 'offer' }),
  fc.record({ kind: fc.constant('answer' as const), pick: fc.nat(), accept: fc.boolean() }),
  fc.record({ kind: fc.constant('toggle' as const), relay: fc.nat({ max: 2 }) }),
  fc.record({ kind: fc.constant('deliver' as const), relay: fc.nat({ max: 2 }) }),
  fc.constant<Step>({ kind: 'receipt' }),
);

/**
 * Relays that each deliver their queue in the order they accepted (as a relay delivers a
 * route's ids), deciding each one's offers in the order they came, accepting or refusing
 * each, and the relays in any order among themselves; a receiver
 * that drops copies it has, and reports what it was handed in receipts that arrive late.
 */
class Model {
  readonly messages: RouteMessage[];
  readonly relays: { relay: string; connected: boolean; queue: number[] }[];
  readonly inFlight: { relay: number; index: number }[] = [];
  readonly handed: number[] = [];
  private readonly unreported: number[] = [];

  constructor(
    count: number,
    relays: number,
    private readonly window = 1,
  ) {
    this.messages = Array.from({ length: count }, (_, i) => msg(String(i)));
    this.relays = RELAYS.slice(0, relays).map((relay) => ({ relay, connected: true, queue: [] }));
  }

  run(s: Step): void {
    if (s.kind === 'offer') this.offer();
    else if (s.kind === 'answer') this.answer(s.pick, s.accept);
    else if (s.kind === 'toggle') this.toggle(s.relay);
    else if (s.kind === 'deliver') this.deliver(s.relay);
    else this.receipt();
  }

  /**
   * For each message, the first later message offered to a relay that lacked it while it
   * was unreported: only allowed when no connected relay held it (its relays were away).
   */
  readonly overtakenBy = new Map<number, number>();

  offer(): void {
    const offered = (relay: string, id: string) => this.inFlight.some((f) => this.relays[f.relay]!.relay === relay && String(f.index) === id);
    for (const o of offersNow(this.messages, this.relays, offered, this.window)) {
      const head = Number(o.msgId);
      this.messages.slice(0, head).forEach((m, i) => {
        // Pipelined behind a message on its way to the same relay: not passing it.
        if (m.acceptedBy.length === 0) return;
        if (m.reported || m.acceptedBy.length === 0 || m.acceptedBy.includes(o.relay)) return;
        expect(this.relays.filter((r) => r.connected && m.acceptedBy.includes(r.relay))).toEqual([]);
        this.overtakenBy.set(i, Math.min(this.overtakenBy.get(i) ?? Infinity, head));
      });
      this.inFlight.push({ relay: this.relays.findIndex((r) => r.relay === o.relay), index: head });
    }
  }

  /** Handed in send order, but where a message was overtaken while its relays were away, by what overtook it. */
  inOrder(): boolean {
    return this.handed.every((j, at) => this.handed.slice(at + 1).every((i) => i > j || (this.overtakenBy.get(i) ?? Infinity) <= j));
  }

  answer(pick: number, accept: boolean): void {
    if (this.inFlight.length === 0) return;
    // A relay decides one connection's sends in the order they reached it.
    const relayIndex = this.inFlight[pick % this.inFlight.length]!.relay;
    const [flight] = this.inFlight.splice(this.inFlight.findIndex((f) => f.relay === relayIndex), 1);
    const relay = this.relays[flight!.relay]!;
    if (!accept) {
      // Refused (or unanswered) while later messages were on their way to that relay: they may pass it.
      for (const later of this.inFlight.filter((f) => f.relay === flight!.relay && f.index > flight!.index)) {
        this.overtakenBy.set(flight!.index, Math.min(this.overtakenBy.get(flight!.index) ?? Infinity, later.index));
      }
      return;
    }
    relay.queue.push(flight!.index);
    const m = this.messages[flight!.index]!;
    this.messages[flight!.index] = { ...m, acceptedBy: [...m.acceptedBy, relay.relay] };
  }

  toggle(index: number): void {
    const relay = this.relays[index % this.relays.length]!;
    relay.connected = !relay.connected;
  }

  deliver(index: number): void {
    const next = this.relays[index % this.relays.length]!.queue.shift();
    if (next === undefined || this.handed.includes(next)) return;
    this.handed.push(next);
    this.unreported.push(next);
  }

  receipt(): void {
    const index = this.unreported.shift();
    if (index !== undefined) this.messages[index] = { ...this.messages[index]!, reported: true };
  }
}

/** The model run through `steps`, then every relay up and accepting and the receiver reading everything. */
function runModel(count: number, relays: number, steps: readonly Step[], each: (model: Model) => void, window = 1): void {
  const model = new Model(count, relays, window);
  for (const s of steps) {
    model.run(s);
    each(model);
  }
  for (const relay of model.relays) relay.connected = true;
  for (let round = 0; round < 4 * count * (relays + 1) && model.handed.length < count; round++) {
    model.offer();
    while (model.inFlight.length > 0) model.answer(0, true);
    for (let r = 0; r < relays; r++) while (model.relays[r]!.queue.length > 0) model.deliver(r);
    model.receipt();
    each(model);
  }
  expect([...model.handed].sort((a, b) => a - b)).toEqual(Array.from({ length: count }, (_, i) => i));
}

describe('the order rule on a model of relays and a receiver', () => {
  it('while every relay stays connected: hands the receiver a route’s messages in the order sent, whatever the relays answer and whichever it reads first, and all of them once the relays accept', () => {
    const connectedSteps = fc.array(step.filter((s) => s.kind !== 'toggle'), { maxLength: 120 });
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 6 }), fc.integer({ min: 1, max: 3 }), connectedSteps, (count, relays, steps) => {
        runModel(count, relays, steps, (model) => expect(model.handed).toEqual([...model.handed].sort((a, b) => a - b)));
      }),
      { numRuns: 500 },
    );
  });

  it('with relays going away: a message is overtaken only by what was offered while no connected relay held it, and all arrive', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 6 }), fc.integer({ min: 1, max: 3 }), fc.array(step, { maxLength: 120 }), (count, relays, steps) => {
        runModel(count, relays, steps, (model) => expect(model.inOrder()).toBe(true));
      }),
      { numRuns: 500 },
    );
  });

  it('pipelined (a window of 3): a message is overtaken only by one already on its way to a relay that refused it or left it unanswered, or while no connected relay held it', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 6 }), fc.integer({ min: 1, max: 3 }), fc.array(step, { maxLength: 120 }), (count, relays, steps) => {
        runModel(count, relays, steps, (model) => expect(model.inOrder()).toBe(true), 3);
      }),
      { numRuns: 500 },
    );
  });
});
