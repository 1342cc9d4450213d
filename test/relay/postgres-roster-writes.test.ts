/**
 * Announcements stored in batches on PostgreSQL (relay/postgres/roster-writes.ts), with a
 * fake statement: one statement at a time, at most ROSTER_BATCH rows each, the newest word
 * per route written and the others answered as older, a failed statement rejecting every
 * row of it.
 */
import { describe, expect, it } from 'vitest';
import { ROSTER_BATCH, RosterWrites, type RosterRow } from '../../src/relay/postgres/roster-writes.js';

function row(route: string, ts: number): RosterRow {
  return { route, ts, body: `{"ts":${ts}}`, bytes: 10, heardAt: 1 };
}

describe('roster writes on PostgreSQL', () => {
  it('go in batches, one statement at a time, each route once with its newest word', async () => {
    const statements: RosterRow[][] = [];
    let running = 0;
    let most = 0;
    const writes = new RosterWrites(async (rows) => {
      running++;
      most = Math.max(most, running);
      statements.push([...rows]);
      await Promise.resolve();
      running--;
      return new Set(rows.map((r) => r.route));
    });
    const many = Array.from({ length: ROSTER_BATCH + 10 }, (_, i) => writes.add(row(`k#s${i}`, 1)));
    const [older, newer] = [writes.add(row('k#s0', 0)), writes.add(row('k#s0', 5))];
    expect((await Promise.all(many)).every(Boolean)).toBe(true);
    expect([await older, await newer]).toEqual([false, true]);
    expect(most).toBe(1);
    expect(statements.map((s) => s.length)).toEqual([ROSTER_BATCH, 11]);
    expect(statements[1]!.filter((r) => r.route === 'k#s0')).toEqual([row('k#s0', 5)]);
  });

  it('answers a row the table held newer as older, and rejects every row of a failed statement', async () => {
    let fail = false;
    const writes = new RosterWrites(async (rows) => {
      if (fail) throw new Error('the database failed');
      return new Set(rows.filter((r) => r.ts > 1).map((r) => r.route));
    });
    expect(await Promise.all([writes.add(row('a#1', 1)), writes.add(row('b#1', 2))])).toEqual([false, true]);
    fail = true;
    await expect(writes.add(row('c#1', 3))).rejects.toThrow('the database failed');
    fail = false;
    expect(await writes.add(row('c#1', 3))).toBe(true);
  });
});
