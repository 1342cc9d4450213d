/**
 * `interlink-mcp relay migrate` as an operator leaving the embedded store meets it: a real
 * `relay --db DIR` carries messages and is stopped, migrate moves its queues into a
 * throwaway PostgreSQL cluster, and a `relay --store URL` started there presents the same
 * key and delivers every unacknowledged message with its id and its exact bytes, in order,
 * and none of the acknowledged ones.
 */
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import postgres from 'postgres';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PROTOCOL_VERSION } from '../../src/wire/frames.js';
import { expectOneLine, expectSuccess, runCli, userEnv } from '../helpers/cli.js';
import { tempDir } from '../helpers/fixtures.js';
import { closeAllPgClusters, postgresBinDir, startPgCluster } from '../helpers/postgres.js';
import { reapAll } from '../helpers/process.js';
import { startRelay, type RelayProcess } from '../helpers/spawn-relay.js';
import { newReader, TestClient, type Reader } from '../helpers/relay-test-client.js';

// CI installs PostgreSQL (.ci/run), so there a missing install fails these tests instead of skipping them.
const missing = postgresBinDir() === undefined && process.env.CI !== 'true';
const title = missing ? 'relay migrate (skipped: no initdb in $PG_BIN, /usr/lib/postgresql/<version>/bin or PATH)' : 'relay migrate';

let dir: { path: string; remove: () => Promise<void> };
let env: NodeJS.ProcessEnv;
const clients: TestClient[] = [];
beforeEach(async () => {
  dir = await tempDir('interlink-relay-migrate-');
  env = userEnv({ root: dir.path, configDir: join(dir.path, 'config'), stateDir: join(dir.path, 'state') });
});
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.terminate()));
  await reapAll();
  await closeAllPgClusters();
  await dir.remove();
});

/** Payload texts a re-serialization would change: spacing, escapes as written, number forms, multi-byte UTF-8, a newline. */
function payloadText(route: number, n: number): string {
  const variants = [
    `{"route":${route},"n":${n}}`,
    `{ "route" : ${route} ,  "n":${n}, "text":"caf\u00e9 \u2014 \u2713 \u{1F600}" }`,
    `{"route":${route},"n":${n},"escaped":"\\u00e9\\n\\"quoted\\"","decimal":2.50,"big":12345678901234567890,"exp":1E3}`,
    `{"route":${route},\n\t"n":${n},"nested":{"a":[1,2,{"b":null}],"c":[]}}`,
    `{"route":${route},"n":${n},"filler":"${'x'.repeat(20_000)}"}`,
  ];
  return variants[n % variants.length]!;
}

async function connect(url: string): Promise<TestClient> {
  const client = await TestClient.connect(url);
  clients.push(client);
  return client;
}

/** Sends `text` as the payload, exactly these bytes; resolves with the id the relay accepted it under. */
async function sendRaw(client: TestClient, route: string, text: string, ref: string): Promise<number> {
  client.raw(`{"v":${PROTOCOL_VERSION},"type":"send","ref":${JSON.stringify(ref)},"to":${JSON.stringify(route)},"payload":${text}}`);
  const reply = await client.reply(ref);
  if (reply.type !== 'accepted') throw new Error(`refused: ${JSON.stringify(reply)}`);
  return reply.id;
}

interface Received {
  id: number;
  /** The payload as the deliver frame carried it, byte for byte. */
  payload: string;
}

/** A reader of `reader`'s route that keeps each deliver frame's payload text as it arrived. */
async function readerOn(url: string, reader: Reader): Promise<{ client: TestClient; received: Received[] }> {
  const client = await connect(url);
  const received: Received[] = [];
  client.ws.on('message', (data) => {
    const text = data.toString();
    const head = /^\{"v":\d+,"type":"deliver","route":"[^"]*","id":(\d+),"payload":/.exec(text);
    if (head !== null) received.push({ id: Number(head[1]), payload: text.slice(head[0].length, -1) });
  });
  expect(await client.auth(reader)).toMatchObject({ type: 'auth_ok' });
  return { client, received };
}

/** Every file under `root` with a digest of its bytes. */
async function listing(root: string): Promise<Record<string, string>> {
  const files: Record<string, string> = {};
  for (const name of (await readdir(root, { recursive: true })).sort()) {
    const bytes = await readFile(join(root, name)).catch(() => undefined);
    if (bytes !== undefined) files[name] = createHash('sha256').update(bytes).digest('hex');
  }
  return files;
}

async function stop(relay: RelayProcess): Promise<void> {
  relay.child.process.kill('SIGTERM');
  expect(await relay.child.exited).toEqual({ code: 0, signal: null });
}

async function rows<T>(url: string, query: (sql: postgres.Sql) => Promise<T>): Promise<T> {
  const sql = postgres(url, { max: 1, onnotice: () => undefined });
  try {
    return await query(sql);
  } finally {
    await sql.end({ timeout: 5 });
  }
}

describe.skipIf(missing)(title, () => {
  it('moves a stopped --db relay into PostgreSQL: same key, same ids, same bytes, in order, acknowledged ones never; run again it changes nothing', async () => {
    const cluster = await startPgCluster();
    await cluster.createDatabase('relay_migrate');
    const url = cluster.url('relay_migrate');
    const db = join(dir.path, 'db');

    // A --db relay carries messages to three routes; two of them are acknowledged.
    const old = await startRelay({ db });
    const readers = [newReader('a'), newReader('b'), newReader('c')];
    const sender = await connect(old.url);
    const sent: { route: number; id: number; payload: string }[] = [];
    for (let n = 0; n < 12; n++) {
      const route = n % 3;
      const payload = payloadText(route, n);
      sent.push({ route, id: await sendRaw(sender, readers[route]!.route, payload, `s${n}`), payload });
    }
    const first = await readerOn(old.url, readers[0]!);
    await first.client.waitForDeliveries(4, readers[0]!.route);
    const acked = [sent[0]!.id, sent[6]!.id];
    first.client.ack(readers[0]!.route, acked);
    // Sent after the acknowledgement on the same connection: once accepted, the acknowledgement is committed too.
    const last = payloadText(2, 12);
    sent.push({ route: 2, id: await sendRaw(first.client, readers[2]!.route, last, 'after-ack'), payload: last });
    await stop(old);

    const before = await listing(db);
    const moved = await runCli(['relay', 'migrate', '--db', db, '--store', url], env);
    expect(expectSuccess(moved)).toBe(`moved 11 messages of 3 routes from ${db} into ${url}; the relay key ${old.key} came along\n`);
    expect(await listing(db)).toEqual(before);

    // Run again: the same messages are there, so nothing changes.
    const again = await runCli(['relay', 'migrate', '--db', db, '--store', url, '--json'], env);
    expect(JSON.parse(expectSuccess(again))).toEqual({ moved: 11, routes: 3, db, store: url, key: old.key, already: true });
    const sourceKey = (await readFile(join(db, 'sources.key'))).toString('base64url');
    const stored = await rows(url, async (sql) => ({
      meta: await sql`SELECT name, value FROM relay_meta WHERE name = 'source_key'`,
      routes: await sql`SELECT r.route FROM relay_routes r JOIN (SELECT route, count(*)::int AS n, sum(bytes)::bigint AS b FROM relay_messages GROUP BY route) m USING (route) WHERE r.messages = m.n AND r.bytes = m.b`,
      totals: await sql`SELECT (SELECT sum(messages)::int FROM relay_totals) AS messages, (SELECT sum(bytes)::text FROM relay_totals) AS bytes, (SELECT sum(bytes)::text FROM relay_messages) AS payload, (SELECT count(*)::int FROM relay_messages WHERE src IS NULL) AS without_src`,
      sequence: await sql`SELECT last_value::text AS last FROM relay_ids`,
    }));
    expect(stored.meta).toEqual([{ name: 'source_key', value: sourceKey }]);
    expect(stored.routes).toHaveLength(3);
    expect(stored.totals).toEqual([{ messages: 11, bytes: stored.totals[0]!.payload, payload: stored.totals[0]!.payload, without_src: 0 }]);
    expect(Number(stored.sequence[0]!.last)).toBeGreaterThan(Math.max(...sent.map((s) => s.id)));

    // The same ids with other bytes are not these messages: refused, and nothing changes.
    const changed = sent[1]!;
    await rows(url, (sql) => sql`UPDATE relay_messages SET payload = ${changed.payload.replace('caf', 'CAF')} WHERE id = ${changed.id}`);
    const differs = await runCli(['relay', 'migrate', '--db', db, '--store', url], env);
    expect(expectOneLine(differs, 1, 'other bytes')).toContain(`already holds 11 queued messages, not exactly the 11 of ${db}`);
    await rows(url, (sql) => sql`UPDATE relay_messages SET payload = ${changed.payload} WHERE id = ${changed.id}`);

    // A relay on PostgreSQL presents the same key and delivers exactly what was left, as it was sent.
    const relay = await startRelay({ args: ['--store', url] });
    expect(relay.key).toBe(old.key);
    const oldIds = sent.map((s) => s.id);
    for (const [route, reader] of readers.entries()) {
      const expected = sent.filter((s) => s.route === route && !acked.includes(s.id)).map((s) => ({ id: s.id, payload: s.payload }));
      const { client, received } = await readerOn(relay.url, reader);
      await client.waitForDeliveries(expected.length, reader.route);
      // A new send comes after every old one: by the time it is delivered, nothing acknowledged came first.
      const next = await sendRaw(client, reader.route, payloadText(route, 100), `new${route}`);
      expect(next).toBeGreaterThan(Math.max(...oldIds));
      await client.waitForDeliveries(expected.length + 1, reader.route);
      expect(received).toEqual([...expected, { id: next, payload: payloadText(route, 100) }]);
    }
    await stop(relay);

    // Now the database holds what relays did since: moving the old queues again is refused, in one line.
    const late = await runCli(['relay', 'migrate', '--db', db, '--store', url], env);
    expect(late.stdout).toBe('');
    expect(expectOneLine(late, 1, 'migrate after relays served')).toBe(
      `interlink-mcp relay: ${url} already holds 14 queued messages, not exactly the 11 of ${db} (another relay's queues, or relays have served from it since an earlier migration): nothing was moved; migrate into a database that holds no queued messages\n`,
    );
  });

  it('refuses a database that already presents another relay key, naming both', async () => {
    const cluster = await startPgCluster();
    await cluster.createDatabase('relay_keys');
    const url = cluster.url('relay_keys');
    const [dbA, dbB] = [join(dir.path, 'a'), join(dir.path, 'b')];
    const a = await startRelay({ db: dbA });
    await stop(a);
    const b = await startRelay({ db: dbB });
    await stop(b);
    expect(b.key).not.toBe(a.key);

    expect(expectSuccess(await runCli(['relay', 'migrate', '--db', dbA, '--store', url], env))).toBe(
      `moved 0 messages of 0 routes from ${dbA} into ${url}; the relay key ${a.key} came along\n`,
    );
    const refused = await runCli(['relay', 'migrate', '--db', dbB, '--store', url], env);
    expect(refused.stdout).toBe('');
    expect(expectOneLine(refused, 1, 'another relay key')).toBe(
      `interlink-mcp relay: ${url} already has the relay key ${a.key}, not ${b.key} of ${dbB}: clients that pinned ${b.key} would refuse it, so nothing was moved (migrate into a database no relay has used, or delete its relay_meta row 'relay_key' if no client relies on ${a.key})\n`,
    );
  });

  it('refuses while a relay runs on DIR, in one line, and leaves the database alone', async () => {
    const cluster = await startPgCluster();
    await cluster.createDatabase('relay_busy');
    const url = cluster.url('relay_busy');
    const db = join(dir.path, 'db');
    const running = await startRelay({ db });
    await (await connect(running.url)).send(newReader().route, { n: 1 });

    const refused = await runCli(['relay', 'migrate', '--db', db, '--store', url, '--json'], env);
    const line = `${db} is in use by a running relay: stop it (interlink-mcp relay stop --db ${db}) and run relay migrate again; nothing was moved`;
    expect(expectOneLine(refused, 1, 'relay running')).toBe(`interlink-mcp relay: ${line}\n`);
    expect(JSON.parse(refused.stdout)).toEqual({ error: { code: 'busy', message: line } });
    const tables = await rows(url, (sql) => sql`SELECT to_regclass('relay_messages') IS NOT NULL AS present`);
    expect(tables).toEqual([{ present: false }]);
    await stop(running);
  });

  it('exits 64 with one line on a command line it does not take, and 1 with one line when the database is unreachable', async () => {
    const db = join(dir.path, 'db');
    await stop(await startRelay({ db }));
    const url = 'postgres://postgres@127.0.0.1:1/none';
    const usage: [string[], RegExp][] = [
      [['--db', db], /relay migrate needs --db DIR and --store URL/],
      [['--store', url], /relay migrate needs --db DIR and --store URL/],
      [['--db', db, '--store', 'mysql://root@127.0.0.1/relay'], /--store "mysql:\/\/root@127\.0\.0\.1\/relay" is not a postgres:\/\/ connection string/],
      [['--db', join(dir.path, 'missing'), '--store', url], /is not a directory/],
      [['extra', '--db', db, '--store', url], /^interlink-mcp relay: usage: interlink-mcp relay migrate --db DIR --store URL/],
      [['--db', db, '--store', url, '--frob'], /unknown option --frob/],
    ];
    for (const [args, reason] of usage) {
      const run = await runCli(['relay', 'migrate', ...args], env);
      expect(run.stdout).toBe('');
      expect(expectOneLine(run, 64, args.join(' '))).toMatch(reason);
    }
    const unreachable = await runCli(['relay', 'migrate', '--db', db, '--store', url], env);
    expect(unreachable.stdout).toBe('');
    expect(expectOneLine(unreachable, 1, 'unreachable')).toMatch(
      new RegExp(`^interlink-mcp relay: cannot move ${db} into ${url.replace(/[.?]/g, '\\$&')}: the relay's database is unreachable \\(ECONNREFUSED\\).*; ${db} is unchanged, and relay migrate may be run again\\n$`),
    );
  });
});
