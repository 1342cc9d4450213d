/**
 * Which store the relay tests run their relays on. `npm test` runs `test/relay` twice
 * (vitest.config.ts): on the embedded stores, and in the `relay-postgres` project on a
 * PostgreSQL cluster that `postgres-global-setup.ts` starts once for the run. There every
 * relay a test starts gets a schema of its own; a `dbDir` names the schema instead of a
 * folder, so a relay restarted on the same `dbDir` finds its queues again, as with the
 * journal.
 */
import { createHash, randomBytes } from 'node:crypto';
import postgres from 'postgres';
import { inject } from 'vitest';
import { RelayServer, type RelayOptions } from '../../src/relay/server.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The test cluster's database for relay stores (postgres-global-setup.ts); empty outside that project. */
    relayPgUrl: string;
  }
}

/** True in the project whose relays keep their queues in PostgreSQL. */
export const sharedStore = process.env.INTERLINK_TEST_RELAY_STORE === 'postgres';

function baseUrl(): string {
  const url = inject('relayPgUrl');
  if (url === undefined || url === '') throw new Error('INTERLINK_TEST_RELAY_STORE=postgres, but no cluster was provided (run the relay-postgres project of vitest.config.ts)');
  return url;
}

/** A schema of its own, made now, and the connection string that keeps a relay in it. */
export async function pgStoreUrl(name: string = randomBytes(12).toString('hex')): Promise<string> {
  const base = baseUrl();
  const schema = `t_${createHash('sha256').update(name).digest('hex').slice(0, 24)}`;
  const sql = postgres(base, { max: 1, onnotice: () => undefined });
  try {
    await sql.unsafe(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
  } finally {
    await sql.end({ timeout: 5 });
  }
  return `${base}${base.includes('?') ? '&' : '?'}search_path=${schema}`;
}

/** `options` as the project's store runs them: unchanged locally; on PostgreSQL, `dbDir` becomes a schema. */
export async function storeOptions(options: RelayOptions): Promise<RelayOptions> {
  if (!sharedStore || options.store !== undefined) return options;
  const { dbDir, ...rest } = options;
  return { ...rest, store: await pgStoreUrl(dbDir) };
}

/** `RelayServer.start` on the project's store. */
export async function startTestRelay(options: Partial<RelayOptions> = {}): Promise<RelayServer> {
  return RelayServer.start(await storeOptions({ host: '127.0.0.1', port: 0, ...options }));
}

/** The flags that keep a relay process's queues where the project's relays keep them: `--db DIR`, or `--store URL` of DIR's schema. */
export async function storeFlags(db: string): Promise<string[]> {
  return sharedStore ? ['--store', await pgStoreUrl(db)] : ['--db', db];
}

/** How many messages the schema of `db` holds queued (the relay-postgres project only). */
export async function queuedInSchema(db: string): Promise<number> {
  const sql = postgres(await pgStoreUrl(db), { max: 1, onnotice: () => undefined });
  try {
    const [row] = await sql`SELECT count(*)::int AS queued FROM relay_messages`;
    return Number(row?.queued);
  } finally {
    await sql.end({ timeout: 5 });
  }
}
