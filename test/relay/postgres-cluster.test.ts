/**
 * The throwaway PostgreSQL clusters of test/helpers/postgres.ts, which the relay's
 * PostgreSQL store tests run against: a single node, a synchronous standby that takes
 * over after the primary is killed, and a close that leaves no server process behind.
 */
import { existsSync } from 'node:fs';
import { dirname } from 'node:path';
import postgres from 'postgres';
import { afterEach, describe, expect, it } from 'vitest';
import { closeAllPgClusters, livePids, postgresBinDir, startPgCluster, type PgNode } from '../helpers/postgres.js';

// CI installs PostgreSQL (.ci/run), so there a missing install fails these tests instead of skipping them.
const missing = postgresBinDir() === undefined && process.env.CI !== 'true';
const title = missing ? 'PostgreSQL test clusters (skipped: no initdb in $PG_BIN, /usr/lib/postgresql/<version>/bin or PATH)' : 'PostgreSQL test clusters';

afterEach(closeAllPgClusters);

function client(url: string): postgres.Sql {
  return postgres(url, { max: 1, connect_timeout: 5, onnotice: () => {} });
}

async function rows(query: Promise<readonly Record<string, unknown>[]>): Promise<Record<string, unknown>[]> {
  return [...(await query)];
}

/** The postmaster and the server processes that live as long as it does (checkpointer, WAL sender or receiver, startup, ...). */
async function serverPids(node: PgNode): Promise<number[]> {
  const sql = client(node.url());
  try {
    const activity = await sql`select pid from pg_stat_activity where backend_type not in ('client backend', 'autovacuum worker')`;
    return [await node.pid(), ...activity.map((row) => Number(row.pid))];
  } finally {
    await sql.end();
  }
}

describe.skipIf(missing)(title, () => {
  it('a single node keeps what a client writes in a database of its own', async () => {
    const cluster = await startPgCluster();
    expect(cluster.standby).toBeUndefined();
    await cluster.createDatabase('relay_test');
    await expect(cluster.createDatabase('relay; drop')).rejects.toThrow(/does not match/);

    const sql = client(cluster.url('relay_test'));
    try {
      await sql`create table notes (id int primary key, body text not null)`;
      await sql`insert into notes ${sql({ id: 1, body: 'hello' })}`;
      expect(await rows(sql`select id, body from notes`)).toEqual([{ id: 1, body: 'hello' }]);
      expect(await rows(sql`select current_database() as db, inet_server_port() as port`)).toEqual([{ db: 'relay_test', port: cluster.primary.port }]);
    } finally {
      await sql.end();
    }
    expect(await cluster.primary.isWritable()).toBe(true);
  });

  it('a synchronous standby has every committed row, and once promoted the cluster URL reaches it', async () => {
    const cluster = await startPgCluster({ standby: true });
    const { primary, standby } = cluster;
    if (standby === undefined) throw new Error('startPgCluster({ standby: true }) gave no standby');
    await cluster.createDatabase('relay_test');

    const onPrimary = client(primary.url('relay_test'));
    try {
      expect(await rows(onPrimary`select application_name, sync_state from pg_stat_replication`)).toEqual([{ application_name: 'standby', sync_state: 'sync' }]);
      await onPrimary`create table notes (id int primary key, body text not null)`;
      await onPrimary`insert into notes ${onPrimary({ id: 1, body: 'before failover' })}`;
    } finally {
      await onPrimary.end();
    }
    // A synchronous commit waits for the standby to flush the WAL, not to replay it: the row
    // shows there a moment later.
    const onStandby = client(standby.url('relay_test'));
    try {
      await expect.poll(() => rows(onStandby`select id, body from notes`), { timeout: 10_000, interval: 50 }).toEqual([{ id: 1, body: 'before failover' }]);
    } finally {
      await onStandby.end();
    }
    expect(await standby.isWritable()).toBe(false);

    const primaryPid = await primary.pid();
    await primary.kill9();
    expect(await livePids([primaryPid])).toEqual([]);
    expect(await primary.isWritable()).toBe(false);
    await standby.promote();
    expect(await standby.isWritable()).toBe(true);

    const sql = client(cluster.url('relay_test'));
    try {
      expect(await rows(sql`select inet_server_port() as port`)).toEqual([{ port: standby.port }]);
      expect(await rows(sql`select id, body from notes`)).toEqual([{ id: 1, body: 'before failover' }]);
      await sql`insert into notes ${sql({ id: 2, body: 'after failover' })}`;
      expect(await rows(sql`select id from notes order by id`)).toEqual([{ id: 1 }, { id: 2 }]);
    } finally {
      await sql.end();
    }
    await cluster.createDatabase('after_failover');
  });

  it('close stops every server process of the cluster and removes its directory, and may be called twice', async () => {
    const cluster = await startPgCluster({ standby: true, synchronous: false });
    const { primary, standby } = cluster;
    if (standby === undefined) throw new Error('startPgCluster({ standby: true }) gave no standby');
    const pids = [...(await serverPids(primary)), ...(await serverPids(standby))];
    // The postmasters and at least their checkpointers, WAL sender and WAL receiver.
    expect(pids.length).toBeGreaterThanOrEqual(6);
    expect(await livePids(pids)).toEqual(pids);

    await cluster.close();
    expect(await livePids(pids)).toEqual([]);
    expect(existsSync(dirname(primary.dataDir))).toBe(false);
    await cluster.close();
  });
});
