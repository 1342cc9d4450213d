/** What a session logs while a relay refuses its sends (src/agent/refusal-log.ts): the first, summaries with counts, the end. */
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { noteRefusal, RefusalLog, SUMMARY_MS, type Episode } from '../../src/agent/refusal-log.js';

describe('noteRefusal', () => {
  it('logs the first refusal, then at most one summary per SUMMARY_MS, and the summaries and the first count every refusal once', () => {
    const code = fc.constantFrom('queue_full', 'storage', 'timeout', 'error');
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.integer({ min: 0, max: 20_000 }), code), { minLength: 1, maxLength: 300 }), (events) => {
        let episode: Episode | undefined;
        let now = 0;
        let counted = 0;
        let lastLine = -Infinity;
        let lines = 0;
        for (const [gap, c] of events) {
          now += gap;
          const next = noteRefusal(episode, now, c);
          if (next.line.say !== 'nothing') {
            expect(now - lastLine).toBeGreaterThanOrEqual(lines === 0 ? 0 : SUMMARY_MS);
            lastLine = now;
            lines++;
          }
          if (next.line.say === 'first') counted += 1;
          if (next.line.say === 'summary') counted += Object.values(next.line.counts).reduce((a, b) => a + b, 0);
          episode = next.episode;
        }
        expect(lines).toBeLessThanOrEqual(1 + Math.floor(now / SUMMARY_MS));
        expect(counted + Object.values(episode!.counts).reduce((a, b) => a + b, 0)).toBe(events.length);
        expect(episode!.total).toBe(events.length);
      }),
    );
  });
});

describe('RefusalLog', () => {
  let lines: Record<string, unknown>[];
  beforeEach(() => {
    lines = [];
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
      lines.push(JSON.parse(String(chunk)) as Record<string, unknown>);
      return true;
    });
  });
  afterEach(() => vi.restoreAllMocks());

  it('writes three lines for a minute of refusals every 10 ms of two relays: first, summary with counts, accepting again', () => {
    let now = 0;
    const refusals = new RefusalLog(() => now);
    for (; now < SUMMARY_MS + 5_000; now += 10) refusals.refused('ws://a', now % 20 === 0 ? 'queue_full' : 'storage', { msg_id: 'm', message: 'full' });
    refusals.accepted('ws://a');
    refusals.accepted('ws://a');
    expect(lines.map((l) => l.event)).toEqual(['relay_refused_send', 'relay_still_refusing', 'relay_accepting_again']);
    expect(lines[1]).toMatchObject({ relay: 'ws://a', refusals: { queue_full: 1500, storage: 1500 }, total: 3001 });
    expect(lines[2]).toMatchObject({ relay: 'ws://a', refusals: 3500 });
  });
});
