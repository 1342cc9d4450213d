/**
 * Moving a `--db` relay's queues into PostgreSQL (`relay migrate`; docs/SCALING.md
 * "Moving a `--db` relay into PostgreSQL"), in one transaction: the tables if missing,
 * every queued message with its id, time, exact payload and `src`, the route and total
 * counts recomputed from them, the id sequence moved past them, the source key (so the
 * same address keeps the same `src`) and the relay key (so clients that pinned the relay
 * keep trusting it).
 *
 * Run twice, the second run finds exactly these messages there and changes nothing. A
 * database that holds any other queued message, or presents another relay key, is
 * refused whole: merging two relays' queues, or replacing a key clients already trust,
 * is not something to do by accident.
 */
import type postgres from 'postgres';
import { z } from 'zod';
import { InterlinkError } from '../../errors.js';
import { encodeBase64url } from '../../identity/base64url.js';
import { parseJsonWith } from '../../json.js';
import type { QueueData } from '../queues.js';
import type { RelayKey } from '../relay-key.js';
import { connect, guarded, int8, redactedUrl } from './database.js';
import { createRelayTables, relayKeyMeta, TOTAL_SHARDS } from './schema.js';

type Transaction = postgres.TransactionSql;

/** Up to the relay's 512 MiB of payload goes in one transaction: far beyond a relay's 10 s per call. */
const MIGRATION_DEADLINE_MS = 10 * 60_000;
/** Messages, and payload characters, one statement carries. */
const CHUNK_MESSAGES = 1_000;
const CHUNK_CHARS = 8 * 1024 * 1024;

/** What `relay migrate` read from the `--db` store, under its lock. */
export interface MigrationSource {
  /** The store's directory, for sentences. */
  db: string;
  data: QueueData;
  /** The HMAC key of `src`; undefined leaves the database its own. */
  sourceKey: Buffer | undefined;
  relayKey: RelayKey;
}

export interface Migration {
  /** Messages of the source now queued in the database. */
  moved: number;
  routes: number;
  /** An earlier run had moved them: this one changed nothing. */
  already: boolean;
}

interface Row {
  route: string;
  id: number;
  at: number;
  payload: string;
  src: string | null;
}


/**
 * Moves `from` into the database at `url` and says what it holds of it now. Nothing is
 * kept unless all of it is: a refusal or a failure leaves the database as it was (and
 * after a timeout, which may have come after the commit, running it again is safe).
 */
export async function migrateIntoPostgres(url: string, from: MigrationSource): Promise<Migration> {
  const target = redactedUrl(url);
  const sql = connect(url);
  try {
    // Unreachable, or no writable primary: said within a relay's deadline, not the migration's.
    await guarded(() => sql`SELECT 1`);
    return await guarded(() => sql.begin((tx) => migrate(tx, from, target)), MIGRATION_DEADLINE_MS);
  } catch (err) {
    if (!(err instanceof InterlinkError) || err.code !== 'storage') throw err;
    throw new InterlinkError('storage', `cannot move ${from.db} into ${target}: ${err.message}; ${from.db} is unchanged, and relay migrate may be run again`, undefined, { cause: err });
  } finally {
    await sql.end({ timeout: 5 }).catch(() => undefined);
  }
}

async function migrate(tx: Transaction, from: MigrationSource, target: string): Promise<Migration> {
  await createRelayTables(tx);
  // Relays already running on the database wait until this commits (their sends and
  // acknowledgements write these tables; their reads go on), so none takes an id below
  // the ones moved here, and the check below sees all they stored.
  await tx`LOCK TABLE relay_routes, relay_messages, relay_totals IN EXCLUSIVE MODE`;
  await claimRelayKey(tx, from, target);
  const rows = rowsOf(from.data);
  const [count] = await tx`SELECT count(*) AS queued FROM relay_messages`;
  const queued = z.object({ queued: int8 }).parse(count).queued;
  let already: boolean;
  if (queued === 0) {
    for (const chunk of chunksOf(rows)) await insert(tx, chunk);
    await recount(tx);
    already = false;
  } else if (queued === rows.length && (await matching(tx, rows)) === rows.length) {
    already = true;
  } else {
    throw new InterlinkError(
      'busy',
      `${target} already holds ${queued} queued messages, not exactly the ${rows.length} of ${from.db} (another relay's queues, or relays have served from it since an earlier migration): nothing was moved; migrate into a database that holds no queued messages`,
    );
  }
  // Only forward: ids continue above the moved ones and above any the database issued.
  const next = from.data.next_id;
  await tx`SELECT setval('relay_ids', ${next}) WHERE (SELECT last_value FROM relay_ids) < ${next}`;
  await claimSourceKey(tx, from, queued === 0, target);
  return { moved: rows.length, routes: from.data.routes.length, already };
}

/** The source's relay key becomes the database's, unless it already has another (named with ours, public parts only). */
async function claimRelayKey(tx: Transaction, from: MigrationSource, target: string): Promise<void> {
  const ours = { seed: encodeBase64url(from.relayKey.signingKey.seed), key: from.relayKey.key };
  await tx`INSERT INTO relay_meta (name, value) VALUES ('relay_key', ${JSON.stringify(ours)}) ON CONFLICT (name) DO NOTHING`;
  const [row] = await tx`SELECT value FROM relay_meta WHERE name = 'relay_key'`;
  const stored = parseJsonWith(relayKeyMeta, z.object({ value: z.string() }).parse(row).value);
  if (!stored.ok) throw new InterlinkError('bad_key', `the relay key kept in ${target} (relay_meta.relay_key) is damaged: nothing was moved; restore it, or delete that row`);
  if (stored.value.key !== ours.key) {
    throw new InterlinkError(
      'key_exists',
      `${target} already has the relay key ${stored.value.key}, not ${ours.key} of ${from.db}: clients that pinned ${ours.key} would refuse it, so nothing was moved (migrate into a database no relay has used, or delete its relay_meta row 'relay_key' if no client relies on ${stored.value.key})`,
    );
  }
  if (stored.value.seed !== ours.seed) throw new InterlinkError('bad_key', `the relay key kept in ${target} (relay_meta.relay_key) names ${ours.key} with another seed: nothing was moved; delete that row and run relay migrate again`);
}

/**
 * The source's key of `src` replaces the database's while the database holds no message
 * counted by its own; holding these very messages, it must already be this key.
 */
async function claimSourceKey(tx: Transaction, from: MigrationSource, wasEmpty: boolean, target: string): Promise<void> {
  if (from.sourceKey === undefined) return;
  const ours = encodeBase64url(from.sourceKey);
  if (wasEmpty) {
    await tx`INSERT INTO relay_meta (name, value) VALUES ('source_key', ${ours}) ON CONFLICT (name) DO UPDATE SET value = excluded.value`;
    return;
  }
  await tx`INSERT INTO relay_meta (name, value) VALUES ('source_key', ${ours}) ON CONFLICT (name) DO NOTHING`;
  const [row] = await tx`SELECT value FROM relay_meta WHERE name = 'source_key'`;
  if (z.object({ value: z.string() }).parse(row).value !== ours) {
    throw new InterlinkError('key_exists', `${target} holds the messages of ${from.db} but counts senders by another source key (relay_meta.source_key): nothing was changed; a relay counts by the key in the database`);
  }
}

function rowsOf(data: QueueData): Row[] {
  return data.routes.flatMap(({ route, messages }) => messages.map((m) => ({ route, id: m.id, at: m.at, payload: m.payload, src: m.src ?? null })));
}

function* chunksOf(rows: readonly Row[]): Generator<Row[]> {
  let chunk: Row[] = [];
  let chars = 0;
  for (const row of rows) {
    if (chunk.length > 0 && (chunk.length >= CHUNK_MESSAGES || chars + row.payload.length > CHUNK_CHARS)) {
      yield chunk;
      chunk = [];
      chars = 0;
    }
    chunk.push(row);
    chars += row.payload.length;
  }
  if (chunk.length > 0) yield chunk;
}

/** One chunk as columns: bigints as text, so no id loses precision on the way. */
function columns(rows: readonly Row[]): [string[], string[], string[], string[], (string | null)[]] {
  return [rows.map((r) => r.route), rows.map((r) => String(r.id)), rows.map((r) => String(r.at)), rows.map((r) => r.payload), rows.map((r) => r.src)];
}

async function insert(tx: Transaction, rows: readonly Row[]): Promise<void> {
  const [routes, ids, ats, payloads, srcs] = columns(rows);
  await tx`
    INSERT INTO relay_messages (route, id, at, payload, bytes, src)
    SELECT u.route, u.id, u.at, u.payload, octet_length(u.payload), u.src
    FROM unnest(${routes}::text[], ${ids}::bigint[], ${ats}::bigint[], ${payloads}::text[], ${srcs}::text[]) AS u(route, id, at, payload, src)`;
}

/** How many of `rows` the database holds exactly: same route, id, time, payload bytes and `src`. */
async function matching(tx: Transaction, rows: readonly Row[]): Promise<number> {
  let same = 0;
  for (const chunk of chunksOf(rows)) {
    const [routes, ids, ats, payloads, srcs] = columns(chunk);
    const [row] = await tx`
      SELECT count(*) AS same
      FROM unnest(${routes}::text[], ${ids}::bigint[], ${ats}::bigint[], ${payloads}::text[], ${srcs}::text[]) AS u(route, id, at, payload, src)
      JOIN relay_messages m ON m.route = u.route AND m.id = u.id
      WHERE m.at = u.at AND m.payload = u.payload AND m.bytes = octet_length(u.payload) AND m.src IS NOT DISTINCT FROM u.src`;
    same += z.object({ same: int8 }).parse(row).same;
  }
  return same;
}

/** The per-route rows and the counter rows of `relay_totals` (schema.ts), from the messages themselves. */
async function recount(tx: Transaction): Promise<void> {
  await tx`DELETE FROM relay_routes`;
  await tx`INSERT INTO relay_routes (route, messages, bytes) SELECT route, count(*), sum(bytes) FROM relay_messages GROUP BY route`;
  await tx`DELETE FROM relay_totals`;
  await tx`
    INSERT INTO relay_totals (shard, messages, bytes)
    SELECT hashtext(route) & ${TOTAL_SHARDS - 1}, count(*), sum(bytes) FROM relay_messages GROUP BY 1`;
}
