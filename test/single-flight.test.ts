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
});
