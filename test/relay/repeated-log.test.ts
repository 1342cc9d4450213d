/** Failures that repeat through an outage, logged with counts (src/relay/repeated-log.ts). */
import { describe, expect, it } from 'vitest';
import { RepeatedEvents } from '../../src/relay/repeated-log.js';

describe('repeated failures in the relay log', () => {
  it('writes the first of each event in full, then one line with the count per period while it repeats, and forgets an event that stopped', () => {
    let now = 0;
    const lines: { event: string; fields: Record<string, unknown> }[] = [];
    const repeats = new RepeatedEvents(() => now, (_level, event, fields) => lines.push({ event, fields }), 3_600_000);
    try {
      for (let i = 0; i < 1_000; i++) repeats.note('error', 'relay_commit_failed', { error: `e${i}` });
      repeats.note('warn', 'relay_read_failed', { route: 'r' });
      expect(lines).toEqual([
        { event: 'relay_commit_failed', fields: { error: 'e0' } },
        { event: 'relay_read_failed', fields: { route: 'r' } },
      ]);
      now = 10_000;
      repeats.summarize();
      expect(lines.slice(2)).toEqual([{ event: 'relay_repeated', fields: { of: 'relay_commit_failed', count: 999, since_ms: 10_000, message: 'relay_commit_failed 999 more times in 10 s' } }]);
      // Quiet for a period: forgotten, so the next one is written in full again.
      now = 20_000;
      repeats.summarize();
      repeats.note('error', 'relay_commit_failed', { error: 'again' });
      expect(lines.slice(3)).toEqual([{ event: 'relay_commit_failed', fields: { error: 'again' } }]);
    } finally {
      repeats.stop();
    }
  });
});
