/**
 * What only a shared store does (DESIGN.md "The relay": "Where the queues live"): several
 * relay processes on one PostgreSQL database, any of them serving any route. Runs in the
 * `relay-postgres` project (vitest.config.ts), on its cluster; the database-down case
 * starts a cluster of its own.
 */
import postgres from 'postgres';
import { afterEach, describe, expect, it } from 'vitest';
import { signAnnouncement } from '../../src/presence/announcement.js';
import { MAX_PAYLOAD_BYTES } from '../../src/wire/frames.js';
import { MAX_UNCOMMITTED_BYTES } from '../../src/relay/sends.js';
import type { RelayServer } from '../../src/relay/server.js';
import { SCHEMA_VERSION } from '../../src/relay/postgres/schema.js';
import { channelOf, instanceChannelOf } from '../../src/relay/postgres/channels.js';
import { readersOf } from '../../src/relay/postgres/readers.js';
import { rm } from 'node:fs/promises';
import { createConnection, createServer, type Socket } from 'node:net';
import fc from 'fast-check';
import { arrayLiteral, connect as connectDatabase } from '../../src/relay/postgres/database.js';
import { join } from 'node:path';
import { runCli, userEnv } from '../helpers/cli.js';
import { eventually, startPeer, type Peer } from '../helpers/mcp.js';
import { closeAllPgClusters, startPgCluster } from '../helpers/postgres.js';
import { pairedRoot } from '../helpers/traffic.js';
import { closedAfterEach } from '../helpers/relay-harness.js';
import { pgStoreUrl, startTestRelay } from '../helpers/relay-store.js';
import { newReader, TestClient, until, upgradeRefusal, type Accepted } from '../helpers/relay-test-client.js';

const { relays, clients } = closedAfterEach();
afterEach(closeAllPgClusters);

/** Well below the 15 s resync: a delivery within it came from a notice. */
const NOTICE_DEADLINE_MS = 5_000;

async function relayOn(store: string, options: Parameters<typeof startTestRelay>[0] = {}): Promise<RelayServer> {
  const relay = await startTestRelay({ store, ...options });
  relays.push(relay);
  return relay;
}

async function connect(relay: RelayServer, options: { autoAck?: boolean } = {}): Promise<TestClient> {
  const client = await TestClient.connect(relay.url, options);
  clients.push(client);
  return client;
}

/** Waits until the store holds `count` messages, read from the database itself. */
async function untilQueued(store: string, count: number): Promise<void> {
  const sql = postgres(store, { max: 1, onnotice: () => undefined });
  try {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const [row] = await sql`SELECT count(*)::int AS queued FROM relay_messages`;
      if (row?.queued === count) return;
      if (Date.now() > deadline) throw new Error(`the store holds ${String(row?.queued)} messages, not ${count}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  } finally {
    await sql.end({ timeout: 5 });
  }
}

function idOf(reply: { type: string }): number {
  if (reply.type !== 'accepted') throw new Error(`refused: ${JSON.stringify(reply)}`);
  return (reply as Accepted).id;
}

describe.runIf(process.env.INTERLINK_TEST_RELAY_STORE === 'postgres')('relays sharing one PostgreSQL store', () => {
  it('present one key, and deliver through one relay what was sent through the other, woken by a notice', async () => {
    const store = await pgStoreUrl();
    const [a, b] = [await relayOn(store), await relayOn(store)];
    expect(b.key).toBe(a.key);
    const reader = newReader();
    const onB = await connect(b);
    await onB.auth(reader);
    const ids = await Promise.all([1, 2, 3].map(async (n) => idOf(await (await connect(a)).send(reader.route, { n }))));
    const got = await onB.waitForDeliveries(3, reader.route, NOTICE_DEADLINE_MS);
    expect(got.map((d) => d.id).sort((x, y) => x - y)).toEqual([...ids].sort((x, y) => x - y));

    // Acknowledged on B: a reader on A finds nothing left but what is sent next.
    onB.ack(reader.route, ids);
    await untilQueued(store, 0);
    const onA = await connect(a);
    await onA.auth(reader);
    const marker = idOf(await onA.send(reader.route, { marker: true }));
    expect((await onA.waitForDeliveries(1, reader.route)).map((d) => d.id)).toEqual([marker]);
  });

  it('send what one relay committed to the reader on the other from the notice, without reading the store; read what a notice cannot carry; and take no message from a notice the relays did not tag', async () => {
    const store = await pgStoreUrl();
    const [a, b] = [await relayOn(store), await relayOn(store)];
    const reader = newReader();
    const onB = await connect(b);
    await onB.auth(reader);
    const reads = () => Number(/^interlink_relay_store_reads_total (\d+)$/m.exec(b.renderMetrics())?.[1]);
    await until('the read at auth', () => (reads() === 1 ? true : undefined));
    const sender = await connect(a);
    const sent: { id: number; payload: Record<string, unknown> }[] = [];
    const send = async (payload: Record<string, unknown>) => sent.push({ id: idOf(await sender.send(reader.route, payload)), payload });
    for (let n = 0; n < 3; n++) await send({ n });
    await onB.waitForDeliveries(3, reader.route, NOTICE_DEADLINE_MS);
    expect(reads()).toBe(1);
    // Too large for a notice: B reads it.
    await send({ big: 'z'.repeat(10_000) });
    await onB.waitForDeliveries(4, reader.route, NOTICE_DEADLINE_MS);
    expect(reads()).toBe(2);

    // Anyone who can connect to the database can NOTIFY on the relays' channel. A notice
    // without the relays' tag, claiming a message far ahead, is only a wake-up: B reads,
    // finds nothing new, and its reader's next message still comes.
    const schema = /search_path=([a-z0-9_]+)/.exec(store)![1]!;
    const sql = postgres(store, { max: 1, onnotice: () => undefined });
    try {
      // On the channel every relay hears, and on B's own (its name is in relay_readers).
      const [row] = await sql<{ instance: string }[]>`SELECT instance FROM relay_readers WHERE route = ${reader.route}`;
      for (const channel of [channelOf(schema), instanceChannelOf(schema, row!.instance)]) {
        for (const forged of [`forged\nq ${reader.route}\nm - 999999999999999 2\n{}`, `forged\nt ${'0'.repeat(64)}\nq ${reader.route}\nm - 999999999999999 2\n{}`]) {
          const before = reads();
          await sql.notify(channel, forged);
          await until('the read a forged notice causes', () => (reads() === before + 1 ? true : undefined));
        }
      }
    } finally {
      await sql.end({ timeout: 5 });
    }
    await send({ after: true });
    const got = await onB.waitForDeliveries(5, reader.route, NOTICE_DEADLINE_MS);
    expect(got.map((d) => ({ id: d.id, payload: d.payload }))).toEqual(sent);
  });

  it('tell a relay process of a commit only when it reads the route, on its own channel; note each reader before its first read, so none misses a commit made meanwhile; and forget a reader once it goes', async () => {
    const store = await pgStoreUrl();
    const schema = /search_path=([a-z0-9_]+)/.exec(store)![1]!;
    const [a, b] = [await relayOn(store), await relayOn(store)];
    const sql = postgres(store, { max: 1, onnotice: () => undefined });
    const heard = new Map<string, string[]>();
    const listen = async (channel: string) => {
      heard.set(channel, []);
      await sql.listen(channel, (payload) => heard.get(channel)!.push(payload));
    };
    const readersOfRoute = async (route: string) => (await sql<{ instance: string }[]>`SELECT instance FROM relay_readers WHERE route = ${route}`).map((r) => r.instance);
    try {
      const reader = newReader();
      const onB = await connect(b);
      await onB.auth(reader);
      // B notes its reader in the database (before the reader's first read).
      const [instance, ...more] = await eventually(async () => {
        const found = await readersOfRoute(reader.route);
        return found.length > 0 ? found : undefined;
      }, 10_000, "B's row for its reader");
      expect(more).toEqual([]);
      const own = instanceChannelOf(schema, instance!);
      await listen(own);
      await listen(channelOf(schema));
      const naming = (channel: string) => heard.get(channel)!.filter((n) => n.includes(`\nq ${reader.route}\n`)).length;

      const fromA = await connect(a);
      const fromB = await connect(b);
      idOf(await fromA.send(reader.route, { n: 1 }));
      await onB.waitForDeliveries(1, reader.route, NOTICE_DEADLINE_MS);
      await until("A's notice on B's channel", () => (naming(own) === 1 ? true : undefined));
      // Sent through B, which reads the route itself: no notice. Then one more through A, whose notice comes after.
      idOf(await fromB.send(reader.route, { n: 2 }));
      await onB.waitForDeliveries(2, reader.route, NOTICE_DEADLINE_MS);
      idOf(await fromA.send(reader.route, { n: 3 }));
      await until("A's second notice on B's channel", () => (naming(own) === 2 ? true : undefined));
      expect(naming(channelOf(schema))).toBe(0);
      expect((await onB.waitForDeliveries(3, reader.route, NOTICE_DEADLINE_MS)).map((d) => d.payload)).toEqual([{ n: 1 }, { n: 2 }, { n: 3 }]);

      // Readers that start on B while A commits to their routes: each gets its message from the notice or from its first read, never only at the resync.
      const fresh = Array.from({ length: 12 }, () => newReader());
      const readers = await Promise.all(fresh.map(() => connect(b)));
      await Promise.all(fresh.map(async (r, i) => Promise.all([readers[i]!.auth(r), fromA.send(r.route, { to: i }).then(idOf)])));
      await Promise.all(fresh.map((r, i) => readers[i]!.waitForDeliveries(1, r.route, NOTICE_DEADLINE_MS)));

      // The reader goes: its row goes, and A tells B nothing of the route's next message.
      await onB.close();
      await eventually(async () => ((await readersOfRoute(reader.route)).length === 0 ? true : undefined), 10_000, "the reader's row removed");
      idOf(await fromA.send(reader.route, { n: 4 }));
      const later = newReader();
      const onLater = await connect(b);
      await onLater.auth(later);
      idOf(await fromA.send(later.route, { marker: true }));
      await onLater.waitForDeliveries(1, later.route, NOTICE_DEADLINE_MS);
      expect(naming(own)).toBe(2);
    } finally {
      await sql.end({ timeout: 5 });
    }
  });

  it("note a reader only after a commit that read the route's readers before it: the reader's first read finds that commit, though no notice names it", async () => {
    const store = await pgStoreUrl();
    const b = await relayOn(store);
    const sql = postgres(store, { max: 1, onnotice: () => undefined });
    const probe = postgres(store, { max: 1, onnotice: () => undefined });
    const reader = newReader();
    try {
      let onB: TestClient | undefined;
      // Another relay process's enqueue, stopped before its commit: it locked the route and
      // read its readers (none yet), so its commit will tell no one.
      await sql.begin(async (tx) => {
        const [row] = await tx`SELECT outcome, readers FROM relay_enqueue_readers('AAAAAAAAAAAA', ${Date.now()}, ${[reader.route]}::text[],
          ${[JSON.stringify({ n: 1 })]}::text[], NULL, NULL, 100, 1000000, 1000000000, NULL, NULL, NULL, NULL)`;
        expect(row).toEqual({ outcome: 'enqueued', readers: '' });
        // B gets its first reader of the route now: noting it waits for the route's lock.
        onB = await connect(b);
        await onB.auth(reader);
        await eventually(async () => {
          const [waiting] = await probe`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%relay_watch%'`;
          return waiting?.n === 1 ? true : undefined;
        }, 10_000, "B's relay_watch waiting for the route's lock");
        expect(onB.deliveries(reader.route)).toEqual([]);
      });
      // Committed: B's row is written after it, and the reader's first read comes after that.
      const [delivered] = await onB!.waitForDeliveries(1, reader.route, NOTICE_DEADLINE_MS);
      expect(delivered!.payload).toEqual({ n: 1 });
    } finally {
      await Promise.all([sql.end({ timeout: 5 }), probe.end({ timeout: 5 })]);
    }
  });

  it("keep relay_readers honest: a process's beat keeps its rows and drops those of readers it no longer has, rows of a process that stopped beating go, and names that are not relay instances are never a channel", async () => {
    const store = await pgStoreUrl();
    await relayOn(store);
    const sql = postgres(store, { max: 1, onnotice: () => undefined });
    try {
      await sql`INSERT INTO relay_readers (route, instance, heard_at) VALUES
        ('r1', 'AAAAAAAAAAAA', now()), ('r2', 'AAAAAAAAAAAA', now()),
        ('r1', 'BBBBBBBBBBBB', now() - interval '1 hour'), ('r3', 'CCCCCCCCCCCC', now())`;
      await sql`SELECT relay_readers_beat('AAAAAAAAAAAA', ${['r1']}::text[], 60000)`;
      const rows = await sql<{ route: string; instance: string }[]>`SELECT route, instance FROM relay_readers ORDER BY instance, route`;
      expect(rows.map((r) => `${r.instance} ${r.route}`)).toEqual(['AAAAAAAAAAAA r1', 'CCCCCCCCCCCC r3']);
    } finally {
      await sql.end({ timeout: 5 });
    }
    expect(readersOf('')).toEqual([]);
    expect(readersOf('AAAAAAAAAAAA,x,"q,BBBBBBBBB-_B,AAAAAAAAAAAAA')).toEqual(['AAAAAAAAAAAA', 'BBBBBBBBB-_B']);
  });

  it('carry a session that lists both with their one key pinned on each as one relay: each message stored once and delivered once, and on through the other relay when the one in use stops', async () => {
    const store = await pgStoreUrl();
    const both = [await relayOn(store), await relayOn(store)] as const;
    const urls = both.map((r) => `${r.url}#key=${r.key}`).join(',');
    const root = await pairedRoot('interlink-one-relay-');
    const peers: Peer[] = [];
    try {
      const alice = await startPeer({ root, name: 'alice', session: 'a1', relays: urls });
      peers.push(alice);
      const bob = await startPeer({ root, name: 'bob', session: 'b1', relays: urls });
      peers.push(bob);
      const counts = async (relay: RelayServer) => {
        const text = await relay.scrapeMetrics();
        const value = (name: string) => Number(new RegExp(`^interlink_relay_${name}_total (\\d+)$`, 'm').exec(text)?.[1] ?? NaN);
        return { accepted: value('accepted'), delivered: value('delivered') };
      };
      const read: string[] = [];
      const readAll = (n: number) =>
        eventually(async () => {
          const page = await bob.call<{ messages: { text: string; receipt: unknown }[] }>('receive_messages', { limit: 100 });
          read.push(...page.messages.map((m) => m.text));
          if (page.messages.length > 0) await bob.call('acknowledge_messages', { messages: page.messages.map((m) => m.receipt) });
          return read.length >= n ? true : undefined;
        }, 30_000, `bob to read ${n} messages`);
      const send = (text: string) => eventually(() => alice.call('send_message', { to: 'bob', session: 'b1', text }).catch(() => undefined), 30_000, `alice's send of ${text}`);

      for (const n of [1, 2, 3]) await send(`before ${n}`);
      await readAll(3);
      // Stored once and delivered once in all (receipts to alice included): no second copy, no second reader.
      const before = await Promise.all(both.map(counts));
      const sum = (list: { accepted: number; delivered: number }[], key: 'accepted' | 'delivered') => list.reduce((total, c) => total + c[key], 0);
      expect(sum(before, 'accepted')).toBeGreaterThanOrEqual(3);
      expect(sum(before, 'delivered')).toBe(sum(before, 'accepted'));
      for (const peer of peers) expect(peer.stderr()).not.toContain('relay_key_refused');
      const status = await runCli(['status'], userEnv({ root: join(root, 'bob'), configDir: bob.config, stateDir: bob.state }, { INTERLINK_URL: urls }));
      expect(status.code).toBe(0);
      expect(status.stdout).toContain(`${both[0].url}  answers, key pinned ${both[0].key} (one relay with ${both[1].url})`);
      expect(status.stdout).not.toContain('WARNING');

      // The relay bob reads through stops; bob and alice carry on through the other.
      const reading = before.findIndex((c) => c.delivered > 0 && c.delivered === Math.max(...before.map((x) => x.delivered)));
      await both[reading]!.close();
      for (const n of [4, 5]) await send(`after ${n}`);
      await readAll(5);
      expect(read).toEqual(['before 1', 'before 2', 'before 3', 'after 4', 'after 5']);
    } finally {
      await Promise.allSettled(peers.map((p) => p.close()));
      await rm(root, { recursive: true, force: true });
    }
  });

  it('never ask the catalog for types at connect, so a connection cut while it starts cannot end the relay process; and send and read their arrays right', async () => {
    const store = await pgStoreUrl();
    const target = new URL(store.replace(/^postgres/, 'http'));
    // A proxy that cuts both sides of a connection whenever the client asks for pg_type, as a
    // failover cuts a connection that is starting: postgres.js's own type query does that.
    let catalogAsks = 0;
    const sockets = new Set<Socket>();
    const proxy = createServer((client) => {
      const upstream = createConnection({ host: target.hostname, port: Number(target.port) });
      for (const socket of [client, upstream]) {
        sockets.add(socket);
        socket.on('error', () => undefined);
        socket.on('close', () => sockets.delete(socket));
      }
      client.on('data', (chunk: Buffer) => {
        if (chunk.includes('pg_catalog.pg_type')) {
          catalogAsks++;
          client.destroy();
          upstream.destroy();
          return;
        }
        upstream.write(chunk);
      });
      upstream.on('data', (chunk: Buffer) => client.write(chunk));
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    const port = (proxy.address() as { port: number }).port;
    const proxied = store.replace(`:${target.port}/`, `:${port}/`);
    try {
      const relay = await relayOn(proxied);
      const reader = newReader();
      const onRelay = await connect(relay, { autoAck: false });
      await onRelay.auth(reader);
      const ids = [];
      for (const n of [1, 2, 3]) ids.push(idOf(await (await connect(relay)).send(reader.route, { n, text: 'a "quoted" \\ {brace}, comma' })));
      const got = await onRelay.waitForDeliveries(3, reader.route);
      expect(got.map((d) => d.payload)).toEqual([1, 2, 3].map((n) => ({ n, text: 'a "quoted" \\ {brace}, comma' })));
      onRelay.ack(reader.route, ids);
      await untilQueued(store, 0);

      // Any text survives the trip as an array element, NULL included.
      const sql = connectDatabase(proxied);
      try {
        const text = fc.oneof(fc.string({ unit: 'grapheme' }), fc.string({ unit: fc.constantFrom('"', '\\', ',', '{', '}', ' ', "'", 'NULL', 'a') }));
        await fc.assert(
          fc.asyncProperty(fc.array(fc.option(text, { nil: null }), { maxLength: 8 }), async (values) => {
            const [back] = await sql`SELECT coalesce(array_length(${values}::text[], 1), 0) AS n, (SELECT json_agg(v)::text FROM unnest(${values}::text[]) AS u(v)) AS j`;
            expect(Number(back?.n)).toBe(values.length);
            expect(values.length === 0 ? null : JSON.parse(String(back?.j))).toEqual(values.length === 0 ? null : values);
          }),
          { numRuns: 200, seed: 17 },
        );
        const [expiring] = await sql`SELECT array_agg(x::bigint ORDER BY x) AS ids FROM generate_series(1, 3) AS g(x)`;
        expect(expiring?.ids).toEqual(['1', '2', '3']);
      } finally {
        await sql.end({ timeout: 5 });
      }
      expect(catalogAsks).toBe(0);
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => proxy.close(resolve));
    }
  });

  it('keep each route in id order with no gap when many senders on both relays send at once', async () => {
    const store = await pgStoreUrl();
    const [a, b] = [await relayOn(store), await relayOn(store)];
    const reader = newReader();
    const onA = await connect(a, { autoAck: true });
    await onA.auth(reader);
    const senders = await Promise.all(Array.from({ length: 8 }, (_, i) => connect(i % 2 === 0 ? a : b)));
    const accepted = (await Promise.all(senders.flatMap((s, i) => Array.from({ length: 25 }, (_, n) => s.send(reader.route, { s: i, n }))))).map(idOf);
    const got = await onA.waitForDeliveries(accepted.length, reader.route, 20_000);
    const delivered = got.map((d) => d.id);
    expect(delivered).toEqual([...delivered].sort((x, y) => x - y));
    expect([...delivered].sort((x, y) => x - y)).toEqual([...accepted].sort((x, y) => x - y));
    // Each sender's messages in the order it sent them.
    for (let i = 0; i < senders.length; i++) {
      const mine = got.map((d) => d.payload as { s: number; n: number }).filter((p) => p.s === i);
      expect(mine.map((p) => p.n)).toEqual(Array.from({ length: 25 }, (_, n) => n));
    }
  });

  it('deliver each message once and each route in id order when readers on both relays, with a window of 3, take from senders on both (messages sent from notices and read alike)', async () => {
    const store = await pgStoreUrl();
    const [a, b] = [await relayOn(store, { deliveryWindow: 3 }), await relayOn(store, { deliveryWindow: 3 })];
    const readers = Array.from({ length: 4 }, () => newReader());
    const onRelay = await Promise.all(readers.map((_, i) => connect(i % 2 === 0 ? a : b, { autoAck: true })));
    await Promise.all(readers.map((reader, i) => onRelay[i]!.auth(reader)));
    const senders = await Promise.all(Array.from({ length: 6 }, (_, i) => connect(i % 2 === 0 ? b : a)));
    const sent = await Promise.all(
      senders.map(async (sender, s) => {
        const mine: { route: string; id: number; n: number }[] = [];
        // Each sender's sends are in flight together: the relay batches them.
        const replies = await Promise.all(Array.from({ length: 30 }, (_, n) => sender.send(readers[(s + n) % readers.length]!.route, { s, n })));
        replies.forEach((reply, n) => mine.push({ route: readers[(s + n) % readers.length]!.route, id: idOf(reply), n }));
        return mine;
      }),
    );
    for (const [i, reader] of readers.entries()) {
      const accepted = sent.flat().filter((m) => m.route === reader.route);
      const got = await onRelay[i]!.waitForDeliveries(accepted.length, reader.route, 20_000);
      const ids = got.map((d) => d.id);
      expect(ids).toEqual([...new Set(ids)].sort((x, y) => x - y));
      expect([...ids].sort((x, y) => x - y)).toEqual(accepted.map((m) => m.id).sort((x, y) => x - y));
      for (let s = 0; s < senders.length; s++) {
        const order = got.map((d) => d.payload as { s: number; n: number }).filter((p) => p.s === s).map((p) => p.n);
        expect(order).toEqual([...order].sort((x, y) => x - y));
      }
    }
  });

  it('store the acknowledgements of many routes together, and count exactly what each removed', async () => {
    const store = await pgStoreUrl();
    const [a, b] = [await relayOn(store), await relayOn(store)];
    const readers = Array.from({ length: 12 }, () => newReader());
    const onA = await connect(a);
    for (const reader of readers) expect(await onA.auth(reader)).toMatchObject({ type: 'auth_ok' });
    const sender = await connect(b);
    for (const reader of readers) for (let n = 0; n < 3; n++) idOf(await sender.send(reader.route, { n }));
    const delivered = await onA.waitForDeliveries(36, undefined, 20_000);
    const metric = (name: string) => Number(new RegExp(`^interlink_relay_${name} (\\d+)$`, 'm').exec(a.renderMetrics())?.[1]);
    const commitsBefore = metric('commit_seconds_count');
    // Every delivery acknowledged in a frame of its own, and a few that remove nothing: an
    // id acknowledged twice, an id never queued, and an id of another route.
    for (const d of delivered) onA.ack(d.route, [d.id]);
    onA.ack(delivered[0]!.route, [delivered[0]!.id]);
    onA.ack(readers[1]!.route, [1]);
    onA.ack(readers[2]!.route, [delivered.find((d) => d.route === readers[3]!.route)!.id]);
    await untilQueued(store, 0);
    await until('every acknowledgement counted', () => (metric('acknowledged_total') === 36 ? true : undefined));
    // 39 acknowledgements in far fewer commits: those that came while one committed went together.
    expect(metric('commit_seconds_count') - commitsBefore).toBeLessThan(20);
    const sql = postgres(store, { max: 1, onnotice: () => undefined });
    try {
      const [left] = await sql`SELECT (SELECT count(*)::int FROM relay_routes) AS routes, (SELECT coalesce(sum(messages), 0)::int FROM relay_totals) AS messages, (SELECT coalesce(sum(bytes), 0)::int FROM relay_totals) AS bytes`;
      expect(left).toEqual({ routes: 0, messages: 0, bytes: 0 });
    } finally {
      await sql.end({ timeout: 5 });
    }
    expect(metric('acknowledged_total')).toBe(36);
  });

  it('commit acknowledgements without waiting for a flush or a standby, and only those: the next transaction on the connection is synchronous again', async () => {
    const store = await pgStoreUrl();
    await relayOn(store);
    const sql = postgres(store, { max: 1, onnotice: () => undefined });
    try {
      const inside = await sql.begin(async (tx) => {
        await tx`SELECT * FROM relay_ack_many(${['nobody#s1']}::text[], ${['1']}::bigint[])`;
        const [row] = await tx`SELECT current_setting('synchronous_commit') AS setting`;
        return row?.setting;
      });
      expect(inside).toBe('off');
      // One connection (max 1): an enqueue after an acknowledgement on it must wait for its flush again.
      await sql`SELECT * FROM relay_ack_many(${['nobody#s1']}::text[], ${['2']}::bigint[])`;
      const [after] = await sql`SELECT current_setting('synchronous_commit') AS setting`;
      expect(after?.setting).toBe('on');
    } finally {
      await sql.end({ timeout: 5 });
    }
  });

  it('show one roster: an announcement heard by one relay is served by the other', async () => {
    const store = await pgStoreUrl();
    const [a, b] = [await relayOn(store), await relayOn(store)];
    const reader = newReader('s1');
    const announcement = signAnnouncement(reader.key, { name: 'alice', session: 's1', cwd: '/w', git_root: '/w', summary: 'shared', ts: Date.now() });
    (await connect(a)).frame({ type: 'announce', announcement });
    const asker = await connect(b);
    const deadline = Date.now() + NOTICE_DEADLINE_MS;
    for (let n = 0; ; n++) {
      const from = asker.frames.length;
      asker.frame({ type: 'roster', ref: `r${n}`, keys: [announcement.key] });
      const reply = await asker.waitFor('a roster reply', (f) => f.type === 'roster' && f.ref === `r${n}`, from);
      const entries = reply.type === 'roster' ? reply.entries : [];
      if (entries.length > 0) {
        expect(entries.map((e) => e.announcement)).toEqual([announcement]);
        break;
      }
      if (Date.now() > deadline) throw new Error('the other relay did not serve the announcement within 5 s');
      await new Promise((r) => setTimeout(r, 50));
    }
  });

  it(`refuses rate_limited past ${MAX_UNCOMMITTED_BYTES / 2 ** 20} MiB waiting for a commit while another transaction holds the route, and answers every send once it lets go`, async () => {
    const store = await pgStoreUrl();
    const relay = await relayOn(store, { maxPerConnection: 100_000 });
    const client = await connect(relay);
    const reader = newReader();
    const payload = { text: 'x'.repeat(MAX_PAYLOAD_BYTES - 100) };
    const fitting = Math.floor(MAX_UNCOMMITTED_BYTES / Buffer.byteLength(JSON.stringify(payload)));
    const sql = postgres(store, { max: 1, onnotice: () => undefined });
    try {
      let pending: Promise<{ type: string }>[] = [];
      await sql.begin(async (tx) => {
        await tx`INSERT INTO relay_routes (route, messages, bytes) VALUES (${reader.route}, 0, 0) ON CONFLICT (route) DO UPDATE SET messages = relay_routes.messages`;
        pending = Array.from({ length: fitting }, (_, i) => client.send(reader.route, payload, `p${i}`, 30_000));
        const over = await client.send(reader.route, payload, 'over');
        expect(over).toMatchObject({ type: 'refused', code: 'rate_limited' });
        expect(over.type === 'refused' && over.message).toContain('still storing');
      });
      expect((await Promise.all(pending)).every((r) => r.type === 'accepted')).toBe(true);
    } finally {
      await sql.end({ timeout: 5 });
    }
  });

  it('refuses to start on tables of a newer layout, saying so', async () => {
    const store = await pgStoreUrl();
    await (await relayOn(store)).close();
    const sql = postgres(store, { max: 1, onnotice: () => undefined });
    await sql`UPDATE relay_meta SET value = ${String(SCHEMA_VERSION + 1)} WHERE name = 'schema_version'`;
    await sql.end({ timeout: 5 });
    await expect(startTestRelay({ store })).rejects.toThrow(new RegExp(`layout ${SCHEMA_VERSION + 1}, newer than this relay's ${SCHEMA_VERSION}: upgrade interlink-mcp`));
  });

  it('refuses sends with a clear reason while its database is down, closes its connections and lets none in until it commits again, through an outage longer than its 10 s deadline, and serves again on its own soon after the database is back', async () => {
    const cluster = await startPgCluster();
    await cluster.createDatabase('relay');
    const relay = await relayOn(cluster.url('relay'));
    const reader = newReader();
    const sender = await connect(relay);
    const before = idOf(await sender.send(reader.route, { n: 0 }));

    await cluster.primary.kill9();
    // A send under way is refused with the reason; once the relay found its database down it closes the connection ("try again later").
    const refused = await Promise.race([sender.send(reader.route, { n: 1 }, 'down', 30_000), sender.closed.then((closed) => ({ type: 'closed' as const, ...closed }))]);
    if (refused.type === 'refused') expect(refused.message).toMatch(/the relay's database is unreachable/);
    else expect(refused.type).toBe('closed');
    expect(await sender.closed).toMatchObject({ code: 1013 });
    // Senders keep knocking through the outage, as outboxes do: each is turned away at the
    // upgrade with the reason. Calls that outlived the deadline once stranded the driver's
    // connections for minutes.
    const outageEnds = Date.now() + 14_000;
    const refusals = new Set<string>();
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (Date.now() < outageEnds) {
          const refusal = await upgradeRefusal(relay.url);
          expect(refusal).toBeDefined();
          refusals.add(refusal!);
          await new Promise((r) => setTimeout(r, 200));
        }
      }),
    );
    expect([...refusals].filter((r) => !r.startsWith("503: interlink relay: the relay's database"))).toEqual([]);

    await cluster.primary.start();
    // As a sender's outbox does: connect and send again until accepted, within a deadline.
    let accepted: number | undefined;
    const deadline = Date.now() + 30_000;
    for (let attempt = 0; accepted === undefined; attempt++) {
      const reply = await connect(relay)
        .then((client) => client.send(reader.route, { n: 2 }, `again${attempt}`, 30_000))
        .catch((err: unknown) => ({ type: 'unreachable', message: String(err) }));
      if (reply.type === 'accepted') accepted = (reply as Accepted).id;
      else if (Date.now() > deadline) throw new Error(`the relay did not accept a send within 30 s of the database's return: ${JSON.stringify(reply)}`);
      else await new Promise((r) => setTimeout(r, 100));
    }
    const client = await connect(relay);
    await client.auth(reader);
    const ids = (await client.waitForDeliveries(2, reader.route, 20_000)).map((d) => d.id);
    expect(ids).toEqual([before, accepted]);
  });
});
