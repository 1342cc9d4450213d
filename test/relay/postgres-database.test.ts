/**
 * The edge of the PostgreSQL store that needs no database (src/relay/postgres/database.ts):
 * what counts as a connection string, what a log may show of it, the URL's own pool size,
 * what a failure says, and the deadline that stops a relay from waiting forever for a
 * primary.
 */
import { describe, expect, it } from 'vitest';
import { InterlinkError } from '../../src/errors.js';
import { connect, DatabaseCalls, databaseError, DEFAULT_POOL_SIZE, guarded, isOutage, isPostgresUrl, redactedUrl, type Sql } from '../../src/relay/postgres/database.js';

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

  it('refuses every call at once while the database is down, asks with one probe at a time whether it is back, and lets calls through again once it is', async () => {
    // A stand-in for the driver's tagged template: the probe's query answers when told.
    const probes: { resolve: (rows: unknown[]) => void; reject: (err: unknown) => void }[] = [];
    const sql = (() => new Promise((resolve, reject) => probes.push({ resolve, reject }))) as unknown as Sql;
    const calls = new DatabaseCalls(sql, 50);
    let back = 0;
    calls.onBack = () => void back++;
    try {
      await expect(calls.call(() => Promise.resolve('up'))).resolves.toBe('up');
      // A failed call that is not an outage changes nothing.
      await expect(calls.call(() => Promise.reject(Object.assign(new Error('dup'), { code: '23505' })))).rejects.toMatchObject({ code: 'storage' });
      expect(calls.down).toBeUndefined();

      await expect(calls.call(() => Promise.reject(Object.assign(new Error('x'), { code: 'ECONNREFUSED' })))).rejects.toThrow(/unreachable \(ECONNREFUSED\)/);
      expect(calls.down?.message).toMatch(/unreachable \(ECONNREFUSED\)/);
      let ran = 0;
      for (let i = 0; i < 5; i++) await expect(calls.call(() => Promise.resolve(ran++))).rejects.toThrow(/unreachable \(ECONNREFUSED\)/);
      expect(ran).toBe(0);
      expect(probes).toHaveLength(1);

      // The probe fails: asked again a second later, still one at a time.
      probes[0]!.reject(Object.assign(new Error('x'), { code: 'ECONNREFUSED' }));
      const deadline = Date.now() + 5_000;
      while (probes.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect(probes).toHaveLength(2);
      // A standby answers with no row: not back yet.
      probes[1]!.resolve([]);
      while (probes.length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect([probes.length, back, calls.down !== undefined]).toEqual([3, 0, true]);
      probes[2]!.resolve([{ '?column?': 1 }]);
      await new Promise((r) => setImmediate(r));
      expect([back, calls.down]).toEqual([1, undefined]);
      await expect(calls.call(() => Promise.resolve('again'))).resolves.toBe('again');

      // No answer in time is an outage too.
      await expect(calls.call(() => new Promise(() => undefined))).rejects.toThrow(/did not answer within 0.05 s/);
      expect(calls.down?.message).toMatch(/did not answer within 0.05 s/);
    } finally {
      calls.close();
    }
  });
});
