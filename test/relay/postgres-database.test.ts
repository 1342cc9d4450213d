/**
 * The edge of the PostgreSQL store that needs no database (src/relay/postgres/database.ts):
 * what counts as a connection string, what a log may show of it, the URL's own pool size,
 * what a failure says, and the deadline that stops a relay from waiting forever for a
 * primary.
 */
import { describe, expect, it } from 'vitest';
import { InterlinkError } from '../../src/errors.js';
import { connect, databaseError, DEFAULT_POOL_SIZE, guarded, isPostgresUrl, redactedUrl } from '../../src/relay/postgres/database.js';

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

  it('withdraws a call that outlives its deadline and refuses it, and lets one that answers in time through', async () => {
    let cancelled = 0;
    const never = Object.assign(new Promise<never>(() => undefined), { cancel: () => void cancelled++ });
    await expect(guarded(() => never, 50)).rejects.toThrow(/did not answer within 0.05 s: no writable primary is reachable/);
    expect(cancelled).toBe(1);
    const quick = Object.assign(Promise.resolve(7), { cancel: () => void cancelled++ });
    await expect(guarded(() => quick, 50)).resolves.toBe(7);
    expect(cancelled).toBe(1);
    await expect(guarded(() => Promise.reject(Object.assign(new Error('x'), { code: 'ECONNREFUSED' })), 50)).rejects.toMatchObject({ code: 'storage' });
  });
});
