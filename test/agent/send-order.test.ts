/**
 * The sender's half of message order: the send clock (strictly increasing signed
 * timestamps, resumed from the outbox after a restart) and the turns that sign
 * concurrent `send_message` calls in the order they began.
 */
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Turns } from '../../src/agent/turns.js';
import { MAX_LEAD_MS, SendClock, nextTimestamp } from '../../src/outbox/clock.js';
import { Outbox } from '../../src/outbox/outbox.js';
import { message, newIdentity, tempDir } from '../helpers/fixtures.js';

const T0 = 1_900_000_000_000;

describe('send clock', () => {
  it('strictly increases while the wall clock stays within MAX_LEAD_MS of it, never runs further ahead, and otherwise follows the wall clock', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: -MAX_LEAD_MS, max: 5_000 }), { maxLength: 200 }), (steps) => {
        let wall = T0;
        const clock = new SendClock(0, () => wall);
        let last = 0;
        for (const step of steps) {
          wall += step;
          const ts = clock.next();
          if (wall >= last + 1 - MAX_LEAD_MS) expect(ts).toBeGreaterThan(last);
          else expect(ts).toBe(wall);
          expect(ts).toBeGreaterThanOrEqual(wall);
          expect(ts - wall).toBeLessThanOrEqual(MAX_LEAD_MS);
          // No gaps: the wall clock, or one past the last timestamp.
          expect([wall, last + 1]).toContain(ts);
          last = ts;
        }
      }),
    );
  });

  it('follows the wall clock again when it was set back further than MAX_LEAD_MS, so receivers do not refuse the messages as from the future', () => {
    expect(nextTimestamp(T0, T0 + MAX_LEAD_MS - 1)).toBe(T0 + MAX_LEAD_MS);
    expect(nextTimestamp(T0, T0 + MAX_LEAD_MS)).toBe(T0);
    expect(nextTimestamp(T0, T0 - 10)).toBe(T0);
  });

  it('resumes above every message in the outbox after a restart, even with the wall clock behind them', async () => {
    const dir = await tempDir();
    try {
      const [alice, bob] = [newIdentity(41), newIdentity(42)];
      const path = join(dir.path, 'outbox', alice.key, 'a1.json');
      const before = await Outbox.open(path);
      expect(await before.lastTimestamp()).toBe(0);
      for (const ts of [T0 + 500, T0 + 900, T0 + 700]) await before.add(message(alice, bob, { ts }), `${bob.key}#b1`);
      await before.close();
      const after = await Outbox.open(path);
      expect(await after.lastTimestamp()).toBe(T0 + 900);
      expect(new SendClock(await after.lastTimestamp(), () => T0).next()).toBe(T0 + 901);
      // Pending messages are offered in the order they were signed.
      expect((await after.pending()).map((r) => r.envelope.ts)).toEqual([T0 + 500, T0 + 700, T0 + 900]);
      await after.close();
    } finally {
      await dir.remove();
    }
  });
});

describe('send turns', () => {
  it('runs each call’s step in the order the calls began, whatever their earlier work took, and goes on after a failed one', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.record({ delay: fc.integer({ min: 0, max: 3 }), fails: fc.boolean() }), { minLength: 1, maxLength: 12 }), async (calls) => {
        const turns = new Turns();
        const order: number[] = [];
        const call = async (i: number, delay: number, fails: boolean) => {
          const turn = turns.take();
          try {
            for (let k = 0; k < delay; k++) await new Promise((r) => setImmediate(r));
            if (fails) throw new Error('refused before its turn');
            await turn.ready;
            order.push(i);
          } finally {
            turn.done();
          }
        };
        await Promise.allSettled(calls.map((c, i) => call(i, c.delay, c.fails)));
        expect(order).toEqual(calls.flatMap((c, i) => (c.fails ? [] : [i])));
      }),
      { numRuns: 100 },
    );
  });
});
