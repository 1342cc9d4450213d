/**
 * The edge of the PostgreSQL store that needs no database (src/relay/postgres/database.ts):
 * what counts as a connection string, what a log may show of it, the URL's own pool size,
 * what a failure says, and the deadline that stops a relay from waiting forever for a
 * primary.
 */
import { describe, expect, it } from 'vitest';
import { InterlinkError } from '../../src/errors.js';
import { DatabaseCalls } from '../../src/relay/postgres/health.js';
import { replicationOf } from '../../src/relay/postgres/replication.js';
import { connect, databaseError, DEFAULT_POOL_SIZE, guarded, isOutage, isPostgresUrl, redactedUrl, type Sql } from '../../src/relay/postgres/database.js';

describe('the PostgreSQL store: its connection string and its failures', () => {
  it('takes postgres:// and postgresql:// only, and never shows a password', () => {
    expect(isPostgresUrl('postgres://u@h/db')).toBe(true);
    expect(isPostgresUrl('postgresql://u@h1:5432,h2:5433/db?target_session_attrs=primary')).toBe(true);
    expect(isPostgresUrl('/var/lib/relay')).toBe(false);
    expect(isPostgresUrl('mysql://u@h/db')).toBe(false);
    expect(redactedUrl('postgres://relay:s3cr%40t@h1:5432,h2:5432/db')).toBe('postgres://relay:***@h1:5432,h2:5432/db');
    expect(redactedUrl('postgres://relay@h/db')).toBe('postgres://relay@h/db');
    expect(() => connect('/var/lib/relay')).toThrow(/not a postgres:\/\/ connection string/);
  });

  it('keeps the pool size the URL names, and its own otherwise', async () => {
    const named = connect('postgres://relay@127.0.0.1:1/db?max=3');
    const plain = connect('postgres://relay@127.0.0.1:1/db');
    try {
      expect(named.options.max).toBe(3);
      expect(plain.options.max).toBe(DEFAULT_POOL_SIZE);
    } finally {
      await Promise.all([named.end(), plain.end()]);
    }
    expect(() => connect('postgres://relay@127.0.0.1:1/db?max=lots')).toThrow(/max="lots" is not a pool size/);
  });

  it('says in a sentence what a failure means, as a storage error', () => {
    const coded = (code: string) => Object.assign(new Error('x'), { code });
    expect(databaseError(coded('ECONNREFUSED')).message).toMatch(/^the relay's database is unreachable \(ECONNREFUSED\)/);
    expect(databaseError(coded('25006')).message).toMatch(/read-only: it is a standby, and no primary is writable/);
    expect(databaseError(coded('57P01')).message).toMatch(/shutting down or starting up/);
    expect(databaseError(new Error('boom')).message).toBe("the relay's database failed: boom");
    expect(databaseError(coded('ECONNRESET')).code).toBe('storage');
    const own = new InterlinkError('storage', 'already said');
    expect(databaseError(own)).toBe(own);
  });

  it('refuses a call that outlives its deadline and leaves the query alone, and lets one that answers in time through', async () => {
    let cancelled = 0;
    const never = Object.assign(new Promise<never>(() => undefined), { cancel: () => void cancelled++ });
    await expect(guarded(() => never, 50)).rejects.toThrow(/did not answer within 0.05 s: no writable primary is reachable/);
    // Withdrawn while it connects, a query strands its connection in postgres.js.
    expect(cancelled).toBe(0);
    await expect(guarded(() => Promise.resolve(7), 50)).resolves.toBe(7);
    await expect(guarded(() => Promise.reject(Object.assign(new Error('x'), { code: 'ECONNREFUSED' })), 50)).rejects.toMatchObject({ code: 'storage' });
  });

  it('tells an outage from a failed call', () => {
    const coded = (code: string) => Object.assign(new Error('x'), { code });
    for (const code of ['ECONNREFUSED', 'ECONNRESET', 'CONNECTION_CLOSED', 'CONNECT_TIMEOUT', '25006', '57P01']) {
      expect([code, isOutage(coded(code)), isOutage(databaseError(coded(code)))]).toEqual([code, true, true]);
    }
    for (const code of ['23505', '42P01', '53300']) expect([code, isOutage(databaseError(coded(code)))]).toEqual([code, false]);
    expect(isOutage(new InterlinkError('storage', "the relay's database did not answer within 10 s: no writable primary is reachable"))).toBe(true);
    expect(isOutage(new Error('boom'))).toBe(false);
  });

  it('refuses every call at once while the database is down, asks with one commit at a time whether it is back, and lets calls through again once one commits', async () => {
    // A stand-in for the health row's commit: each answers when told.
    const commits: { resolve: () => void; reject: (err: unknown) => void }[] = [];
    const commitHealth = () => new Promise<void>((resolve, reject) => commits.push({ resolve, reject }));
    const calls = new DatabaseCalls(commitHealth, { deadlineMs: 50, stallMs: 5_000 });
    let back = 0;
    const down: string[] = [];
    calls.onBack(() => void back++);
    calls.onDown((why) => void down.push(why.message));
    try {
      await expect(calls.call(() => Promise.resolve('up'))).resolves.toBe('up');
      // A failed call that is not an outage changes nothing.
      await expect(calls.call(() => Promise.reject(Object.assign(new Error('dup'), { code: '23505' })))).rejects.toMatchObject({ code: 'storage' });
      expect(calls.down).toBeUndefined();

      expect(commits).toHaveLength(0);

      // A call that fails as an outage would asks the health row at once; its failure takes the database down.
      await expect(calls.call(() => Promise.reject(Object.assign(new Error('x'), { code: 'ECONNREFUSED' })))).rejects.toThrow(/unreachable \(ECONNREFUSED\)/);
      expect([commits.length, calls.down]).toEqual([1, undefined]);
      commits[0]!.reject(Object.assign(new Error('x'), { code: 'ECONNREFUSED' }));
      await until(() => calls.down !== undefined);
      expect(calls.down?.message).toMatch(/unreachable \(ECONNREFUSED\)/);
      expect(down).toHaveLength(1);
      let ran = 0;
      for (let i = 0; i < 5; i++) await expect(calls.call(() => Promise.resolve(ran++))).rejects.toThrow(/unreachable \(ECONNREFUSED\)/);
      expect(ran).toBe(0);
      expect(commits).toHaveLength(2);

      // The probe's commit fails: made again a second later, still one at a time.
      commits[1]!.reject(Object.assign(new Error('x'), { code: 'ECONNREFUSED' }));
      await until(() => commits.length === 3);
      // A standby refuses the write: not back yet.
      commits[2]!.reject(Object.assign(new Error('read-only'), { code: '25006' }));
      await until(() => commits.length === 4);
      expect([back, calls.down !== undefined]).toEqual([0, true]);
      commits[3]!.resolve();
      await until(() => back === 1);
      expect(calls.down).toBeUndefined();
      await expect(calls.call(() => Promise.resolve('again'))).resolves.toBe('again');

      // A call with no answer in time asks too; a database that commits the health row is slow there, not down.
      await expect(calls.call(() => new Promise(() => undefined))).rejects.toThrow(/did not answer within 0.05 s/);
      expect(commits).toHaveLength(5);
      commits[4]!.resolve();
      await new Promise((r) => setTimeout(r, 20));
      expect([calls.down, down.length]).toEqual([undefined, 1]);
    } finally {
      calls.close();
    }
  });

  it('counts the database down once its health row does not commit within the stall bound, answers the calls under way with that reason at once, and names a probe that does not commit', async () => {
    const commits: { resolve: () => void }[] = [];
    const calls = new DatabaseCalls(() => new Promise<void>((resolve) => commits.push({ resolve })), { deadlineMs: 60_000, stallMs: 100 });
    let back = 0;
    calls.onBack(() => void back++);
    try {
      const underWay = calls.call(() => new Promise(() => undefined));
      calls.beat(20);
      // The first beat never commits: the call under way is answered long before its own deadline.
      await expect(underWay).rejects.toThrow(/did not commit within 0.1 s \(its connections stall, or its primary waits for a synchronous standby that is not attached\)/);
      expect(calls.down?.message).toMatch(/did not commit within 0.1 s/);
      // The beat still waits, and one probe with it; no beat starts while the database is down.
      await new Promise((r) => setTimeout(r, 100));
      expect(commits).toHaveLength(2);
      commits[1]!.resolve();
      await until(() => back === 1);
      expect(calls.down).toBeUndefined();

      // Down for another reason, then a probe that answers nothing: the reason becomes the stall.
      await expect(calls.call(() => Promise.reject(Object.assign(new Error('x'), { code: 'ECONNRESET' })))).rejects.toThrow(/ECONNRESET/);
      await until(() => /did not commit/.test(calls.down?.message ?? ''));
    } finally {
      calls.close();
    }
  });

  it('takes a slow database that still commits for slow, not down: the beat waits while other commits return, and only a stretch with none is a stall', async () => {
    const calls = new DatabaseCalls(() => new Promise<void>(() => undefined), { deadlineMs: 60_000, stallMs: 500 });
    try {
      calls.beat(10);
      // Sends keep committing, each well within the stall bound, for three times that bound.
      const until3 = Date.now() + 1_500;
      while (Date.now() < until3) {
        calls.committed();
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(calls.down).toBeUndefined();
      await until(() => calls.down !== undefined);
      expect(calls.down?.message).toMatch(/did not commit within 0.5 s/);
    } finally {
      calls.close();
    }
  });

  it("does not take a blocked event loop for a stalled database: a commit answered while the relay was busy counts", async () => {
    const commits: { resolve: () => void }[] = [];
    // The first beat's commit is answered by the test; every later one at once.
    const commit = () => new Promise<void>((resolve) => (commits.push({ resolve }) > 1 ? resolve() : undefined));
    const calls = new DatabaseCalls(commit, { deadlineMs: 60_000, stallMs: 200 });
    let downs = 0;
    calls.onDown(() => void downs++);
    try {
      calls.beat(10);
      await until(() => commits.length === 1);
      // The database answers at once (as I/O, after the timers of the same turn); the relay's loop
      // is blocked past the stall bound (a burst of frames to verify), so the answer waits unread
      // behind the stall timer.
      setImmediate(() => commits[0]!.resolve());
      const blockedUntil = Date.now() + 600;
      while (Date.now() < blockedUntil) {
        // busy: the event loop runs nothing meanwhile
      }
      await new Promise((r) => setTimeout(r, 300));
      expect([downs, calls.down]).toEqual([0, undefined]);
    } finally {
      calls.close();
    }
  });

  it('reads what accepted means from synchronous_standby_names: a standby named, or the primary alone', () => {
    expect(['standby1', 'FIRST 1 (a, b)', ' ', ''].map(replicationOf)).toEqual(['synchronous', 'synchronous', 'single', 'single']);
  });
});

/** Polls `check` every 10 ms until it holds, failing after 5 s. */
async function until(check: () => boolean): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('the condition did not hold within 5 s');
    await new Promise((r) => setTimeout(r, 10));
  }
}
