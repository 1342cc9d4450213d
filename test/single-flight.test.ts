/** The single-flight pass loop shared by outbound, the pairing control outbox and the notifier. */
import { describe, expect, it } from 'vitest';
import { SingleFlight } from '../src/single-flight.js';

/** A pass that waits, each time, until the test lets it finish; counts starts and overlaps. */
function gatedPass() {
  const gates: (() => void)[] = [];
  const state = { started: 0, active: 0, overlapped: false, failNext: false };
  const pass = async () => {
    state.started++;
    state.active++;
    if (state.active > 1) state.overlapped = true;
    const fail = state.failNext;
    state.failNext = false;
    await new Promise<void>((resolve) => gates.push(resolve));
    state.active--;
    if (fail) throw new Error('pass failed');
  };
  /** Lets the oldest waiting pass finish. */
  const release = () => {
    const gate = gates.shift();
    if (gate === undefined) throw new Error('no pass is waiting');
    gate();
  };
  return { pass, state, release, waiting: () => gates.length };
}

/** Resolves once `check` holds, checked after each turn of the event loop; fails after `turns`. */
async function untilTrue(check: () => boolean, what: string, turns = 1_000): Promise<void> {
  for (let i = 0; i < turns; i++) {
    if (check()) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error(`never happened: ${what}`);
}

function flight(pass: () => Promise<void>, errors: unknown[] = []): SingleFlight {
  return new SingleFlight(pass, (err) => errors.push(err));
}

describe('single flight', () => {
  it('runs exactly one more pass for kicks that come while a pass runs, never two at once', async () => {
    const p = gatedPass();
    const loop = flight(p.pass);
    const first = loop.kick();
    const second = loop.kick();
    const third = loop.kick();
    expect(second).toBe(third);
    expect(p.state.started).toBe(1);
    p.release();
    await first;
    await untilTrue(() => p.waiting() === 1, 'the second pass to start');
    expect(p.state.started).toBe(2);
    p.release();
    await second;
    await loop.settled();
    expect(p.state.started).toBe(2);
    expect(p.state.overlapped).toBe(false);
  });

  it('resolves a kick made during a pass only once the pass after it has run', async () => {
    const p = gatedPass();
    const loop = flight(p.pass);
    void loop.kick();
    let done = false;
    const later = loop.kick().then(() => (done = true));
    p.release();
    await untilTrue(() => p.waiting() === 1, 'the second pass to start');
    expect(done).toBe(false);
    p.release();
    await later;
    expect(p.state.started).toBe(2);
  });

  it('runs a fresh pass for a kick after the last one ended', async () => {
    const p = gatedPass();
    const loop = flight(p.pass);
    const first = loop.kick();
    p.release();
    await first;
    const next = loop.kick();
    expect(p.state.started).toBe(2);
    p.release();
    await next;
  });

  it('reports a failed pass and keeps running later kicks', async () => {
    const p = gatedPass();
    const errors: unknown[] = [];
    const loop = flight(p.pass, errors);
    p.state.failNext = true;
    const failing = loop.kick();
    const after = loop.kick();
    p.release();
    await failing;
    expect(errors.map((e) => (e as Error).message)).toEqual(['pass failed']);
    await untilTrue(() => p.waiting() === 1, 'the pass after the failed one to start');
    p.release();
    await after;
    const again = loop.kick();
    p.release();
    await again;
    expect(p.state.started).toBe(3);
    expect(errors).toHaveLength(1);
  });

  it('reports a pass that throws before its first await like any other failure', async () => {
    const errors: unknown[] = [];
    const loop = flight(() => {
      throw new Error('at once');
    }, errors);
    await loop.kick();
    await loop.kick();
    expect(errors.map((e) => (e as Error).message)).toEqual(['at once', 'at once']);
  });

  it('stop waits for the pass under way and starts no other, even one already asked for', async () => {
    const p = gatedPass();
    const loop = flight(p.pass);
    void loop.kick();
    const queued = loop.kick();
    let stopped = false;
    const stopping = loop.stop().then(() => (stopped = true));
    await untilTrue(() => p.waiting() === 1, 'the first pass to wait');
    expect(stopped).toBe(false);
    p.release();
    await stopping;
    await queued;
    await loop.kick();
    expect(p.state.started).toBe(1);
    expect(p.waiting()).toBe(0);
  });

  it('kicks once at start, and the interval goes once stopped', async () => {
    const p = gatedPass();
    const loop = flight(p.pass);
    loop.start(60_000);
    expect(p.state.started).toBe(1);
    p.release();
    await loop.stop();
    await loop.kick();
    expect(p.state.started).toBe(1);
  });

  it('wakes itself when a pass says the next is due, and only after the idle interval when none says', async () => {
    // The first three passes ask for another at once (work waiting); then nothing is due.
    const runs: number[] = [];
    const loop = new SingleFlight(
      async () => {
        runs.push(Date.now());
        return runs.length <= 3 ? 0 : undefined;
      },
      () => undefined,
    );
    loop.start(60_000);
    await untilTrue(() => runs.length >= 4, 'four passes, three of them asked for', 100_000);
    // Nothing is due now: with an idle interval of a minute no fifth pass comes by itself.
    for (let i = 0; i < 200; i++) await new Promise((resolve) => setImmediate(resolve));
    expect(runs.length).toBe(4);
    await loop.stop();
  });

  it('never waits longer than the idle interval, whatever a pass asks for', async () => {
    let passes = 0;
    const loop = new SingleFlight(
      async () => {
        passes++;
        return 3_600_000;
      },
      () => undefined,
    );
    loop.start(5);
    await untilTrue(() => passes >= 3, 'passes every idle interval', 100_000);
    await loop.stop();
    const stoppedAt = passes;
    for (let i = 0; i < 50; i++) await new Promise((resolve) => setTimeout(resolve, 1));
    expect(passes).toBe(stoppedAt);
  });
});
