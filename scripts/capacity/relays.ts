/**
 * The relays a capacity run loads: one it starts itself (`interlink-mcp relay` from
 * dist, as users run it, with connection caps raised to fit the run), several it starts on
 * a PostgreSQL primary with a synchronous standby it starts too (`--postgres-cluster`), or
 * the ones given,
 * whose memory and CPU are read only when their process ids are given too. Every relay's
 * key is learned through a real handshake (the welcome proves it) and pinned in the URL
 * the sessions use, so a session trusts exactly the relay the run measures.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import postgres from 'postgres';
import { join } from 'node:path';
import { relayEndpoint } from '../../src/config/relay-url.js';
import { RelayClient } from '../../src/link/client.js';
import { generateSigningKey } from '../../src/identity/ed25519.js';
import { startPgCluster, type PgCluster } from '../../test/helpers/postgres.js';
import { cpuSeconds, familyCpuSeconds, peakRssBytes, rssBytes, storageWriteBytes } from '../bench/proc.js';
import { startRelayProcess, type RelayProcess } from '../bench/relay-process.js';
import { CONNECTION_MARGIN, type Options } from './options.js';

const PROBE_TIMEOUT_MS = 10_000;
const STOP_GRACE_MS = 5_000;
/** The database the relays of `--postgres-cluster` share. */
const CLUSTER_DATABASE = 'relay';

export interface LoadedRelay {
  /** The URL without its pin, as given or as the relay printed it. */
  url: string;
  /** The URL with the relay's key pinned: what sessions connect to. */
  pinned: string;
  pid: number | undefined;
  /** Whether this run started it (and stops it). */
  own: boolean;
  /** Its /metrics, for its commit times (commits.ts): the relay this run starts serves them. */
  metricsUrl: string | undefined;
}

/** What /proc says about a relay process now; undefined figures where it cannot be read. */
export interface RelaySample {
  rssBytes: number | undefined;
  peakRssBytes: number | undefined;
  cpuSeconds: number | undefined;
  /** Bytes written to storage so far: the journal's and the roster file's writes. */
  writtenBytes: number | undefined;
}

const defined = (n: number) => (Number.isFinite(n) ? n : undefined);

export function sampleRelay(relay: LoadedRelay): RelaySample {
  if (relay.pid === undefined) return { rssBytes: undefined, peakRssBytes: undefined, cpuSeconds: undefined, writtenBytes: undefined };
  let cpu: number | undefined;
  try {
    cpu = cpuSeconds(relay.pid);
  } catch {
    cpu = undefined;
  }
  return { rssBytes: defined(rssBytes(relay.pid)), peakRssBytes: defined(peakRssBytes(relay.pid)), cpuSeconds: cpu, writtenBytes: storageWriteBytes(relay.pid) };
}

/** The key a relay proves over our nonce: a relay client that trusts whatever key the welcome proves, and records it. */
async function provenKey(url: string): Promise<string> {
  const endpoint = relayEndpoint(url);
  if (endpoint.pin !== undefined) return endpoint.pin;
  let proven: string | undefined;
  const probe = new RelayClient({
    url,
    key: generateSigningKey(),
    routes: [],
    logOutages: false,
    trust: { admit: (_endpoint, key) => ((proven = key), Promise.resolve({ trusted: true, firstUse: true })) },
  });
  probe.start();
  try {
    if (!(await probe.ready(PROBE_TIMEOUT_MS)) || proven === undefined) throw new Error(`relay ${endpoint.url} did not prove a key within ${PROBE_TIMEOUT_MS / 1000} s`);
    return proven;
  } finally {
    probe.close();
  }
}

/** The database of `--postgres-cluster` now: its server processes' CPU (both nodes) and the primary's WAL position. */
export interface DatabaseSample {
  /** Undefined where /proc cannot say. */
  cpuSeconds: number | undefined;
  walBytes: number;
}

export interface Relays {
  relays: LoadedRelay[];
  /** With `--postgres-cluster`: reads the database's figures. */
  database?: () => Promise<DatabaseSample>;
  /** Stops the relay this run started (SIGTERM, then SIGKILL after a grace) and removes its temporary store. */
  stop(): Promise<void>;
}

/** Starts the run's relay, or takes the given ones; either way every relay's key is proven and pinned. */
export async function loadRelays(projectRoot: string, options: Options): Promise<Relays> {
  if (options.relays.length > 0) {
    const relays: LoadedRelay[] = [];
    for (const [i, given] of options.relays.entries()) {
      const key = await provenKey(given);
      const url = relayEndpoint(given).url;
      relays.push({ url, pinned: `${url}#key=${key}`, pid: options.relayPids[i], own: false, metricsUrl: undefined });
    }
    return { relays, stop: () => Promise.resolve() };
  }
  if (options.postgresCluster > 0) return clusterRelays(projectRoot, options);
  const scratch = options.db === undefined && options.store === undefined ? await mkdtemp(join(tmpdir(), 'interlink-capacity-')) : undefined;
  const cap = String(options.sessions + CONNECTION_MARGIN);
  const flags = ['--max-connections', cap, '--max-connections-per-address', cap, ...(options.store !== undefined ? ['--store', options.store] : [])];
  const child = await startRelayProcess(projectRoot, options.store !== undefined ? undefined : (options.db ?? scratch), { flags, metrics: true }).catch(async (err: unknown) => {
    if (scratch !== undefined) await rm(scratch, { recursive: true, force: true });
    throw err;
  });
  let stopped: Promise<void> | undefined;
  const stop = async () => {
    await stopRelay(child);
    if (scratch !== undefined) await rm(scratch, { recursive: true, force: true });
  };
  return { relays: [loaded(child)], stop: () => (stopped ??= stop()) };
}

const loaded = (child: RelayProcess): LoadedRelay => ({ url: child.url, pinned: `${child.url}#key=${child.key}`, pid: child.pid, own: true, metricsUrl: child.metricsUrl });

/** SIGTERM, then SIGKILL after a grace. */
async function stopRelay(child: RelayProcess): Promise<void> {
  const timer = setTimeout(() => {
    try {
      process.kill(child.pid, 'SIGKILL');
    } catch {
      // Gone already.
    }
  }, STOP_GRACE_MS);
  await child.stop();
  clearTimeout(timer);
}

/**
 * `--postgres-cluster N`: a throwaway PostgreSQL primary with a synchronous standby
 * (test/helpers/postgres.ts, as the relay-stores benchmark starts it) and N relays on it,
 * started one after the other so that the first stores the relay key the others load.
 * Each relay's caps fit every session, as a relay of a cluster takes the sessions of one
 * that drops.
 */
async function clusterRelays(projectRoot: string, options: Options): Promise<Relays> {
  const cap = String(options.sessions + CONNECTION_MARGIN);
  const started: RelayProcess[] = [];
  let cluster: PgCluster | undefined;
  let stopped: Promise<void> | undefined;
  let sql: postgres.Sql | undefined;
  const stop = async () => {
    await sql?.end({ timeout: 1 });
    await Promise.allSettled(started.map(stopRelay));
    await cluster?.close();
  };
  let postmasters: number[];
  try {
    cluster = await startPgCluster({ standby: true, synchronous: true });
    await cluster.createDatabase(CLUSTER_DATABASE);
    postmasters = await Promise.all([cluster.primary, ...(cluster.standby !== undefined ? [cluster.standby] : [])].map((node) => node.pid()));
    sql = postgres(cluster.url(), { max: 1, onnotice: () => {} });
    const flags = ['--max-connections', cap, '--max-connections-per-address', cap, '--store', cluster.url(CLUSTER_DATABASE)];
    for (let i = 0; i < options.postgresCluster; i++) started.push(await startRelayProcess(projectRoot, undefined, { flags, metrics: true }));
  } catch (err) {
    await stop();
    throw err;
  }
  const db = sql;
  const database = async (): Promise<DatabaseSample> => {
    const [row] = await db<{ wal: string }[]>`select pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::text as wal`;
    const cpus = postmasters.map(familyCpuSeconds);
    return { cpuSeconds: cpus.some((c) => c === undefined) ? undefined : cpus.reduce<number>((a, b) => a + b!, 0), walBytes: Number(row!.wal) };
  };
  return { relays: started.map(loaded), database, stop: () => (stopped ??= stop()) };
}
