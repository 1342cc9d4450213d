/**
 * The relay's tables in PostgreSQL (DESIGN.md "The relay": "Where the queues live"), in
 * the first schema of the connection's search_path. Created by the first relay that
 * opens the database, under an advisory lock so relays started together do not race;
 * `relay_meta.schema_version` says which layout a database holds.
 *
 * Why the two functions look as they do:
 * - **Order per route.** `relay_enqueue_readers` first locks the rows of its routes in
 *   `relay_routes` (an upsert locks them until commit), and only then takes ids from the
 *   sequence. Two transactions on one route therefore take their ids in the order they
 *   commit: a reader that read up to id N never finds a later commit with an id below N on
 *   that route. A sequence alone would not do: ids 10 and 11 taken by two transactions can
 *   commit 11 first, and a reader that moved past 11 would skip 10. One call stores a
 *   batch: the sends of one connection that reached this relay process while its previous
 *   batch was committing, in the order they arrived (send-batches.ts). With each id it returns
 *   `follows`, the route's newest id queued before it, read under that lock: a reader that
 *   was sent up to `follows` is sent the message without reading it back (delivery.ts).
 *   `relay_enqueue_follows` (without `readers`) and `relay_enqueue` (without `follows`
 *   either) stay for relays of earlier releases.
 * - **Who reads a route.** `relay_readers` holds a row per route and relay process that
 *   has a reader of it; a relay process tells the others of a commit only when they read
 *   its route, on their own channels (channels.ts). `relay_enqueue_readers` returns those
 *   processes with a route's first message, read under the route's row lock, and
 *   `relay_watch` writes a reader's row under the same lock before the reader's first
 *   read: an enqueue that committed first is found by that read, and one that commits
 *   after finds the row. Rows of a relay process that stopped beating
 *   (`relay_readers_beat`) go after a while.
 * - **Bounds in the same transaction.** A route's count is exact (its row is locked), and
 *   so is a connection's (one batch at a time per connection) and, when the per-address
 *   share is on, an address's (an advisory lock on it for the transaction). The
 *   relay-wide totals are 64 counter rows (a route counts in row `hash & 63`), summed
 *   without a lock, so sends to different routes do not queue behind one hot row; two
 *   batches committing at once may each see the other's room, so the totals can pass
 *   their bound by at most the sends in flight (the relays' pool sizes times a batch).
 * - **No deadlock.** Every transaction takes its locks in one order: the sender's
 *   address, its routes sorted, then counter rows sorted (`relay_ack_many`: the routes of
 *   the acknowledgements it stores, sorted, then their counter rows sorted; `relay_watch`:
 *   the routes sorted, then its own rows of `relay_readers`).
 * - **Acknowledgements together.** `relay_ack_many` removes the acknowledged messages of
 *   many routes in one transaction: a relay stores the acknowledgements that reached it
 *   while its previous ones were committing together, so a commit (and, with a
 *   synchronous standby, its round trip) is shared. It commits with `synchronous_commit`
 *   off: a lost acknowledgement only delivers its messages again, so it need not wait for
 *   the WAL flush or the standby (the next enqueue's commit flushes it). `relay_ack` (one route) stays for
 *   relays of the previous release that share the database during an upgrade.
 * - **Plans made once.** Each function's statements run with `plan_cache_mode =
 *   force_generic_plan`: every one finds its rows by a key, so the plan does not depend
 *   on the values, and planning them again for each call (PostgreSQL's custom plans)
 *   cost about a quarter of the functions' time.
 * - **Nothing dropped.** A send past a bound is refused and stores nothing; only
 *   `relay_ack_many` (acknowledgements, or expiry) deletes.
 */
import type postgres from 'postgres';
import { z } from 'zod';
import { InterlinkError } from '../../errors.js';

export const SCHEMA_VERSION = 1;

/** `relay_meta.relay_key`: the key every relay of the database presents, as JSON. */
export const relayKeyMeta = z.object({ seed: z.string(), key: z.string() });

/** Routes hash into this many counter rows of `relay_totals`. */
export const TOTAL_SHARDS = 64;

export const CREATE_SCHEMA = `
CREATE TABLE IF NOT EXISTS relay_meta (
  name text PRIMARY KEY,
  value text NOT NULL
);
CREATE SEQUENCE IF NOT EXISTS relay_ids AS bigint MINVALUE 1 MAXVALUE 9007199254740991;
CREATE TABLE IF NOT EXISTS relay_messages (
  route text NOT NULL,
  id bigint NOT NULL,
  at bigint NOT NULL,
  payload text NOT NULL,
  bytes integer NOT NULL,
  src text,
  origin text,
  PRIMARY KEY (route, id)
);
CREATE INDEX IF NOT EXISTS relay_messages_at ON relay_messages (at);
CREATE INDEX IF NOT EXISTS relay_messages_src ON relay_messages (src) WHERE src IS NOT NULL;
CREATE INDEX IF NOT EXISTS relay_messages_origin ON relay_messages (origin) WHERE origin IS NOT NULL;
CREATE TABLE IF NOT EXISTS relay_routes (
  route text PRIMARY KEY,
  messages integer NOT NULL,
  bytes bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS relay_totals (
  shard integer PRIMARY KEY,
  messages bigint NOT NULL,
  bytes bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS relay_roster (
  route text PRIMARY KEY,
  kind text NOT NULL CHECK (kind IN ('announce', 'goodbye')),
  ts bigint NOT NULL,
  body text,
  bytes integer NOT NULL,
  heard_at bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS relay_roster_heard ON relay_roster (heard_at);

CREATE TABLE IF NOT EXISTS relay_readers (
  route text NOT NULL,
  instance text NOT NULL,
  heard_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (route, instance)
);
CREATE INDEX IF NOT EXISTS relay_readers_instance ON relay_readers (instance);
CREATE INDEX IF NOT EXISTS relay_readers_heard ON relay_readers (heard_at);

CREATE OR REPLACE FUNCTION relay_enqueue_readers(
  p_instance text,
  p_at bigint, p_routes text[], p_payloads text[], p_src text, p_origin text,
  p_route_max integer, p_messages_max bigint, p_bytes_max bigint,
  p_address_messages bigint, p_address_bytes bigint,
  p_connection_messages bigint, p_connection_bytes bigint
) RETURNS TABLE (outcome text, id bigint, follows bigint, readers text)
LANGUAGE plpgsql SET search_path FROM CURRENT SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
  i integer;
  k integer;
  seen_routes text[] := '{}';
  seen_last bigint[] := '{}';
  size integer;
  queued integer;
  total_messages bigint;
  total_bytes bigint;
  address_messages bigint := 0;
  address_bytes bigint := 0;
  connection_messages bigint := 0;
  connection_bytes bigint := 0;
  shards integer[] := '{}';
  sizes bigint[] := '{}';
  refusal text;
  new_id bigint;
BEGIN
  -- Locks in one order everywhere: the sender's address, its routes sorted, then counter rows sorted.
  IF p_address_messages IS NOT NULL AND p_src IS NOT NULL THEN
    PERFORM pg_advisory_xact_lock(hashtext('interlink-relay-src'), hashtext(p_src));
    SELECT count(*), coalesce(sum(m.bytes), 0) INTO address_messages, address_bytes FROM relay_messages m WHERE m.src = p_src;
  END IF;
  INSERT INTO relay_routes AS r (route, messages, bytes)
    SELECT DISTINCT u.route, 0, 0 FROM unnest(p_routes) AS u(route) ORDER BY 1
    ON CONFLICT (route) DO UPDATE SET messages = r.messages;
  IF p_connection_messages IS NOT NULL THEN
    SELECT count(*), coalesce(sum(m.bytes), 0) INTO connection_messages, connection_bytes FROM relay_messages m WHERE m.origin = p_origin;
  END IF;
  SELECT coalesce(sum(t.messages), 0), coalesce(sum(t.bytes), 0) INTO total_messages, total_bytes FROM relay_totals t;
  FOR i IN 1 .. coalesce(array_length(p_payloads, 1), 0) LOOP
    size := octet_length(p_payloads[i]);
    SELECT r.messages INTO queued FROM relay_routes r WHERE r.route = p_routes[i];
    refusal := CASE
      WHEN queued >= p_route_max THEN 'routeMessages'
      WHEN total_messages >= p_messages_max THEN 'messages'
      WHEN total_bytes + size > p_bytes_max THEN 'bytes'
      WHEN p_connection_messages IS NOT NULL AND (connection_messages >= p_connection_messages OR connection_bytes + size > p_connection_bytes) THEN 'perConnection'
      WHEN p_address_messages IS NOT NULL AND p_src IS NOT NULL AND (address_messages >= p_address_messages OR address_bytes + size > p_address_bytes) THEN 'perAddress'
    END;
    readers := NULL;
    IF refusal IS NOT NULL THEN
      outcome := refusal;
      id := NULL;
      follows := NULL;
    ELSE
      -- The route's newest queued id before this message: its row is locked, so no other
      -- transaction stores to it until this one ends, and every earlier commit is seen.
      k := array_position(seen_routes, p_routes[i]);
      IF k IS NULL THEN
        seen_routes := seen_routes || p_routes[i];
        seen_last := seen_last || (SELECT max(m.id) FROM relay_messages m WHERE m.route = p_routes[i]);
        k := array_length(seen_routes, 1);
        -- The other relay processes that read the route, on the route's first message in
        -- this call, read under its row lock as relay_watch writes them (see above).
        IF p_instance IS NOT NULL THEN
          readers := coalesce((SELECT string_agg(w.instance, ',') FROM relay_readers w WHERE w.route = p_routes[i] AND w.instance <> p_instance), '');
        END IF;
      END IF;
      follows := seen_last[k];
      new_id := nextval('relay_ids');
      seen_last[k] := new_id;
      INSERT INTO relay_messages (route, id, at, payload, bytes, src, origin)
        VALUES (p_routes[i], new_id, p_at, p_payloads[i], size, p_src, p_origin);
      UPDATE relay_routes r SET messages = r.messages + 1, bytes = r.bytes + size WHERE r.route = p_routes[i];
      total_messages := total_messages + 1;
      total_bytes := total_bytes + size;
      connection_messages := connection_messages + 1;
      connection_bytes := connection_bytes + size;
      address_messages := address_messages + 1;
      address_bytes := address_bytes + size;
      shards := shards || (hashtext(p_routes[i]) & ${TOTAL_SHARDS - 1});
      sizes := sizes || size::bigint;
      outcome := 'enqueued';
      id := new_id;
    END IF;
    RETURN NEXT;
  END LOOP;
  -- Rows this call made for routes left with nothing queued go again.
  DELETE FROM relay_routes r WHERE r.route = ANY (p_routes) AND r.messages = 0;
  INSERT INTO relay_totals AS t (shard, messages, bytes)
    SELECT u.shard, count(*), sum(u.size) FROM unnest(shards, sizes) AS u(shard, size) GROUP BY u.shard ORDER BY u.shard
    ON CONFLICT (shard) DO UPDATE SET messages = t.messages + excluded.messages, bytes = t.bytes + excluded.bytes;
END
$fn$;

-- What relays of the previous release call: the same, without \`readers\`; and before
-- them, without \`follows\`.
CREATE OR REPLACE FUNCTION relay_enqueue_follows(
  p_at bigint, p_routes text[], p_payloads text[], p_src text, p_origin text,
  p_route_max integer, p_messages_max bigint, p_bytes_max bigint,
  p_address_messages bigint, p_address_bytes bigint,
  p_connection_messages bigint, p_connection_bytes bigint
) RETURNS TABLE (outcome text, id bigint, follows bigint)
LANGUAGE sql SET search_path FROM CURRENT AS $fn$
  SELECT e.outcome, e.id, e.follows FROM relay_enqueue_readers(NULL, p_at, p_routes, p_payloads, p_src, p_origin, p_route_max, p_messages_max, p_bytes_max,
    p_address_messages, p_address_bytes, p_connection_messages, p_connection_bytes) AS e
$fn$;

CREATE OR REPLACE FUNCTION relay_enqueue(
  p_at bigint, p_routes text[], p_payloads text[], p_src text, p_origin text,
  p_route_max integer, p_messages_max bigint, p_bytes_max bigint,
  p_address_messages bigint, p_address_bytes bigint,
  p_connection_messages bigint, p_connection_bytes bigint
) RETURNS TABLE (outcome text, id bigint)
LANGUAGE sql SET search_path FROM CURRENT AS $fn$
  SELECT e.outcome, e.id FROM relay_enqueue_readers(NULL, p_at, p_routes, p_payloads, p_src, p_origin, p_route_max, p_messages_max, p_bytes_max,
    p_address_messages, p_address_bytes, p_connection_messages, p_connection_bytes) AS e
$fn$;

CREATE OR REPLACE FUNCTION relay_ack(p_route text, p_ids bigint[]) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
  removed integer;
  freed bigint;
  left_over integer;
BEGIN
  -- The route's row first, in the order relay_enqueue_readers locks.
  PERFORM 1 FROM relay_routes r WHERE r.route = p_route FOR UPDATE;
  IF NOT FOUND THEN
    RETURN 0;
  END IF;
  WITH gone AS (
    DELETE FROM relay_messages m WHERE m.route = p_route AND m.id = ANY (p_ids) RETURNING m.bytes
  ) SELECT count(*), coalesce(sum(gone.bytes), 0) INTO removed, freed FROM gone;
  IF removed = 0 THEN
    RETURN 0;
  END IF;
  UPDATE relay_routes r SET messages = r.messages - removed, bytes = r.bytes - freed
    WHERE r.route = p_route RETURNING r.messages INTO left_over;
  IF left_over = 0 THEN
    DELETE FROM relay_routes r WHERE r.route = p_route;
  END IF;
  UPDATE relay_totals t SET messages = t.messages - removed, bytes = t.bytes - freed
    WHERE t.shard = hashtext(p_route) & ${TOTAL_SHARDS - 1};
  RETURN removed;
END
$fn$;

CREATE OR REPLACE FUNCTION relay_ack_many(p_routes text[], p_ids bigint[]) RETURNS TABLE (acked_route text, acked_id bigint)
LANGUAGE plpgsql SET search_path FROM CURRENT SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
  gone_routes text[];
  gone_ids bigint[];
  gone_bytes bigint[];
BEGIN
  -- Committed without waiting for the WAL flush or the standby (until the transaction
  -- ends): an acknowledgement lost in a crash or a failover only delivers those messages
  -- again, which receivers discard by (from, msg_id); the next synchronous commit (any
  -- enqueue) flushes it anyway.
  PERFORM set_config('synchronous_commit', 'off', true);
  -- The routes' rows first, sorted, then counter rows sorted: the order relay_enqueue_readers locks in.
  PERFORM 1 FROM relay_routes r WHERE r.route = ANY (p_routes) ORDER BY r.route FOR UPDATE;
  WITH gone AS (
    DELETE FROM relay_messages m
      USING (SELECT DISTINCT u.route, u.id FROM unnest(p_routes, p_ids) AS u(route, id)) AS w
      WHERE m.route = w.route AND m.id = w.id
      RETURNING m.route, m.id, m.bytes
  ) SELECT array_agg(g.route), array_agg(g.id), array_agg(g.bytes) INTO gone_routes, gone_ids, gone_bytes FROM gone g;
  IF gone_routes IS NULL THEN
    RETURN;
  END IF;
  UPDATE relay_routes r SET messages = r.messages - c.n, bytes = r.bytes - c.freed
    FROM (SELECT g.route, count(*)::integer AS n, sum(g.bytes)::bigint AS freed FROM unnest(gone_routes, gone_bytes) AS g(route, bytes) GROUP BY g.route) AS c
    WHERE r.route = c.route;
  DELETE FROM relay_routes r WHERE r.route = ANY (gone_routes) AND r.messages = 0;
  PERFORM 1 FROM relay_totals t
    WHERE t.shard IN (SELECT hashtext(g.route) & ${TOTAL_SHARDS - 1} FROM unnest(gone_routes) AS g(route))
    ORDER BY t.shard FOR UPDATE;
  UPDATE relay_totals t SET messages = t.messages - c.n, bytes = t.bytes - c.freed
    FROM (SELECT hashtext(g.route) & ${TOTAL_SHARDS - 1} AS shard, count(*) AS n, sum(g.bytes) AS freed
          FROM unnest(gone_routes, gone_bytes) AS g(route, bytes) GROUP BY 1) AS c
    WHERE t.shard = c.shard;
  RETURN QUERY SELECT g.route, g.id FROM unnest(gone_routes, gone_ids) AS g(route, id);
END
$fn$;

CREATE OR REPLACE FUNCTION relay_watch(p_instance text, p_routes text[]) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT SET plan_cache_mode = force_generic_plan AS $fn$
BEGIN
  -- The routes' rows first, sorted, locked as relay_enqueue_readers locks them: an enqueue
  -- that holds one commits before this goes on (the reader's first read, after this
  -- commits, finds its message), and one that comes after finds this reader.
  INSERT INTO relay_routes AS r (route, messages, bytes)
    SELECT DISTINCT u.route, 0, 0 FROM unnest(p_routes) AS u(route) ORDER BY 1
    ON CONFLICT (route) DO UPDATE SET messages = r.messages;
  INSERT INTO relay_readers AS w (route, instance)
    SELECT DISTINCT u.route, p_instance FROM unnest(p_routes) AS u(route)
    ON CONFLICT (route, instance) DO UPDATE SET heard_at = now();
  DELETE FROM relay_routes r WHERE r.route = ANY (p_routes) AND r.messages = 0;
END
$fn$;

CREATE OR REPLACE FUNCTION relay_readers_beat(p_instance text, p_routes text[], p_stale_ms bigint) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT SET plan_cache_mode = force_generic_plan AS $fn$
BEGIN
  -- Nothing waits on it: a beat lost in a crash is made again at the next.
  PERFORM set_config('synchronous_commit', 'off', true);
  DELETE FROM relay_readers w WHERE w.instance = p_instance AND w.route <> ALL (p_routes);
  UPDATE relay_readers w SET heard_at = now() WHERE w.instance = p_instance;
  -- The rows of relay processes that stopped beating: they no longer hear notices.
  DELETE FROM relay_readers w WHERE w.heard_at < now() - p_stale_ms * interval '1 millisecond';
END
$fn$;
`;

/**
 * Makes the relay's tables where the connection's search_path puts them, if missing, in
 * the caller's transaction and under the advisory lock relays take to make them; refuses
 * a layout newer than this program's. Returns the schema.
 */
export async function createRelayTables(tx: postgres.TransactionSql): Promise<string> {
  const [where] = await tx`SELECT current_schema() AS schema`;
  const schema = z.object({ schema: z.string().nullable() }).parse(where).schema;
  if (schema === null) throw new InterlinkError('storage', 'the connection has no schema to keep the relay tables in (check search_path)');
  await tx`SELECT pg_advisory_xact_lock(hashtext('interlink-relay-schema'))`;
  const [exists] = await tx`SELECT to_regclass('relay_meta') IS NOT NULL AS present`;
  if (z.object({ present: z.boolean() }).parse(exists).present) {
    const [row] = await tx`SELECT value FROM relay_meta WHERE name = 'schema_version'`;
    const version = row === undefined ? undefined : Number(z.object({ value: z.string() }).parse(row).value);
    if (version !== undefined && version > SCHEMA_VERSION) {
      throw new InterlinkError('storage', `the database holds relay tables of layout ${version}, newer than this relay's ${SCHEMA_VERSION}: upgrade interlink-mcp`);
    }
  }
  await tx.unsafe(CREATE_SCHEMA);
  await tx`INSERT INTO relay_meta (name, value) VALUES ('schema_version', ${String(SCHEMA_VERSION)}) ON CONFLICT (name) DO NOTHING`;
  return schema;
}
