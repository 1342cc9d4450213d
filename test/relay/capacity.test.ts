/**
 * The capacity run (`npm run capacity`, scripts/capacity): 200 simulated sessions
 * against the relay process it starts, for a few seconds. What it reports must add up —
 * every session connected and found by its pair, every accepted message delivered and
 * receipted, relay figures read from /proc — with no timing threshold: the figures
 * themselves are for people to read. And the pure choices of who pairs with whom, who
 * sends and which worker runs whom.
 */
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { parseOptions, UsageError } from '../../scripts/capacity/options.js';
import { chosen, pairOf, relayOf, splitSessions } from '../../scripts/capacity/plan.js';
import { reapChildren, startChild } from '../helpers/children.js';

const RUN = join(import.meta.dirname, '..', '..', 'dist', 'scripts', 'capacity', 'run.js');
const count = z.number().int().min(0);
const bytes = z.number().positive();

/** The parts of the run's JSON this test checks. */
const reportSchema = z.object({
  sessions: count,
  senders: count,
  connected: count,
  connect_failed: count,
  connected_at_end: count,
  disconnects: count,
  roster: z.object({ checked: count, answered: count, found: count, foundFirst: count, entriesMax: count }),
  messages: z.object({ sent: count, accepted: count, delivered: count, lost: count, unanswered: count, duplicates: count, refused: z.record(z.string(), count), rejected: z.record(z.string(), count) }),
  receipts: z.object({ sent: count, accepted: count, delivered: count, messages_receipted: count }),
  latency_ms: z.object({ accept_to_deliver: z.object({ count: count, p50: z.number().min(0), p99: z.number().min(0) }) }),
  relay: z.object({ rss_peak_bytes: bytes, rss_end_bytes: bytes, traffic_cpu_seconds: z.number().min(0), cpu_ms_per_message: z.number().min(0) }),
});

afterEach(reapChildren);

describe('npm run capacity', () => {
  it('connects 200 sessions, finds every pair, and loses nothing', { timeout: 120_000 }, async () => {
    const run = startChild(RUN, ['--sessions', '200', '--rate', '0.05', '--duration', '3s', '--idle', '1s', '--drain', '15s', '--deadline', '100s', '--json']);
    const { code, stdout, stderr } = await run.done;
    expect(code, stderr).toBe(0);
    const report = reportSchema.parse(JSON.parse(stdout));
    expect(report.sessions).toBe(200);
    expect([report.connected, report.connected_at_end, report.connect_failed, report.disconnects]).toEqual([200, 200, 0, 0]);
    // Each check asks for its pair's key and gets that entry alone, never the roster.
    expect(report.roster).toMatchObject({ checked: 200, answered: 200, found: 200, foundFirst: 200, entriesMax: 1 });
    const m = report.messages;
    expect(report.senders).toBe(10);
    expect(m.sent).toBeGreaterThan(0);
    expect([m.accepted, m.delivered]).toEqual([m.sent, m.sent]);
    expect([m.lost, m.unanswered, m.duplicates, m.refused, m.rejected]).toEqual([0, 0, 0, {}, {}]);
    expect(report.latency_ms.accept_to_deliver.count).toBe(m.delivered);
    // Every message was reported back by a receipt, and every receipt arrived.
    expect(report.receipts.messages_receipted).toBe(m.delivered);
    expect([report.receipts.accepted, report.receipts.delivered]).toEqual([report.receipts.sent, report.receipts.sent]);
  });

  it('refuses an odd number of sessions with its usage', async () => {
    const { code, stderr } = await startChild(RUN, ['--sessions', '3']).done;
    expect(code).toBe(64);
    expect(stderr).toContain('--sessions "3": an even whole number');
  });
});

describe('the capacity options', () => {
  it('starts two or more relays on a PostgreSQL cluster, and nothing else with them', () => {
    expect(parseOptions(['--sessions', '200'])).toMatchObject({ postgresCluster: 0 });
    expect(parseOptions(['--sessions', '200', '--postgres-cluster', '2'])).toMatchObject({ postgresCluster: 2, relays: [], store: undefined });
    expect(() => parseOptions(['--postgres-cluster', '1'])).toThrow(UsageError);
    for (const other of [['--store', 'postgres://x@127.0.0.1/db'], ['--db', '/tmp/x'], ['--relays', 'ws://127.0.0.1:1']]) {
      expect(() => parseOptions(['--postgres-cluster', '2', ...other])).toThrow('--postgres-cluster starts its own relays and store');
    }
  });
});

describe('the capacity plan', () => {
  it('pairs sessions in twos, on one relay and in one worker', () => {
    expect([0, 1, 2, 3].map(pairOf)).toEqual([1, 0, 3, 2]);
    expect([0, 1, 2, 3, 4, 5].map((i) => relayOf(i, 2))).toEqual([0, 0, 1, 1, 0, 0]);
    const blocks = splitSessions(18_000, 3);
    expect(blocks).toEqual([
      { first: 0, count: 6_000 },
      { first: 6_000, count: 6_000 },
      { first: 12_000, count: 6_000 },
    ]);
    for (const { first, count } of splitSessions(22, 4)) expect([first % 2, count % 2]).toEqual([0, 0]);
    expect(splitSessions(22, 4).reduce((n, b) => n + b.count, 0)).toBe(22);
  });

  it('chooses the given fraction of sessions, spread evenly', () => {
    const picked = (n: number, fraction: number) => Array.from({ length: n }, (_, i) => i).filter((i) => chosen(i, fraction));
    expect(picked(1_000, 0.01)).toHaveLength(10);
    expect(picked(1_000, 0.01)[0]).toBe(99);
    expect(picked(200, 1)).toHaveLength(200);
    expect(picked(200, 0)).toHaveLength(0);
    expect(picked(18_000, 0.01)).toHaveLength(180);
  });
});
