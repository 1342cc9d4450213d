/**
 * A relay on PostgreSQL through a failover and a stall (issue 35; docs/SCALING.md "Failover
 * runbook"): it is back only once its database commits, an acknowledgement the old primary
 * took along is made again without its reader's help, and a relay whose database stalls
 * closes its connections and refuses new ones until the database commits again, so
 * sessions listing another address of the relay move there. Each test starts a cluster
 * of its own and relays in this process.
 */
import postgres from 'postgres';
import { afterEach, describe, expect, it } from 'vitest';
import { RelayServer } from '../../src/relay/server.js';
import { closeAllPgClusters, postgresBinDir, startPgCluster, type PgNode } from '../helpers/postgres.js';
import { closedAfterEach } from '../helpers/relay-harness.js';
import { StallingProxy } from '../helpers/stalling-proxy.js';
import { newReader, TestClient, upgradeRefusal } from '../helpers/relay-test-client.js';

// CI installs PostgreSQL (.ci/run), so there a missing install fails these tests instead of skipping them.
const missing = postgresBinDir() === undefined && process.env.CI !== 'true';

const { relays, clients } = closedAfterEach();
const proxies: StallingProxy[] = [];
afterEach(async () => {
  for (const proxy of proxies.splice(0)) await proxy.close();
  await closeAllPgClusters();
});

const DEADLINE_MS = 60_000;
/** A cluster's start, a failover and the waits above, on a loaded machine. */
const TEST_TIMEOUT_MS = 240_000;

async function relayOn(store: string): Promise<RelayServer> {
  const relay = await RelayServer.start({ host: '127.0.0.1', port: 0, store });
  relays.push(relay);
  return relay;
}

async function connect(relay: RelayServer): Promise<TestClient> {
  const client = await TestClient.connect(relay.url);
  clients.push(client);
  return client;
}

/** Runs `query` on `node` over a connection of its own. */
async function onNode<T>(node: PgNode, db: string, query: (sql: postgres.Sql) => Promise<T>): Promise<T> {
  const sql = postgres(node.url(db), { max: 1, connect_timeout: 5, onnotice: () => undefined });
  try {
    return await query(sql);
  } finally {
    await sql.end({ timeout: 1 });
  }
}

/** Offers a message as an outbox does until the relay accepts it; resolves with its id. */
async function sendUntilAccepted(relay: RelayServer, route: string, payload: Record<string, unknown>): Promise<number> {
  const deadline = Date.now() + DEADLINE_MS;
  for (let attempt = 0; ; attempt++) {
    const reply = await TestClient.connect(relay.url)
      .then(async (client) => {
        clients.push(client);
        return client.send(route, payload, `again${attempt}`, 30_000);
      })
      .catch((err: unknown) => ({ type: 'unreachable', message: String(err) }));
    if (reply.type === 'accepted' && 'id' in reply) return reply.id;
    if (Date.now() > deadline) throw new Error(`the relay accepted nothing within ${DEADLINE_MS} ms: ${JSON.stringify(reply)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe.skipIf(missing)('a relay on PostgreSQL through a failover and a stall', () => {
  it('is not back on a promoted standby that still names a synchronous standby: its probe commits, so it stays down, says why, and serves once the setting is cleared', async () => {
    const cluster = await startPgCluster({ standby: true, synchronous: true });
    await cluster.createDatabase('relay');
    // As a standby made from a primary that already named its synchronous standby: it inherits the setting.
    await onNode(cluster.standby!, 'postgres', async (sql) => {
      await sql.unsafe("alter system set synchronous_standby_names = 'standby'");
      await sql`select pg_reload_conf()`;
    });
    const relay = await relayOn(cluster.url('relay'));
    const reader = newReader();
    const sender = await connect(relay);
    const before = await sender.send(reader.route, { n: 0 });
    expect(before.type).toBe('accepted');

    await cluster.primary.kill9();
    await cluster.standby!.promote();
    // The relay reached the promoted node and tries to commit there: a backend of it waits for the missing standby.
    const waiting = async () =>
      onNode(cluster.standby!, 'postgres', (sql) => sql`select count(*)::int as n from pg_stat_activity where application_name = 'interlink-relay' and wait_event = 'SyncRep'`).then((rows) => rows[0]?.n as number);
    const deadline = Date.now() + DEADLINE_MS;
    while ((await waiting()) === 0) {
      if (Date.now() > deadline) throw new Error('no relay backend waited for the synchronous standby on the promoted node');
      await new Promise((r) => setTimeout(r, 100));
    }
    // Found down: its health row does not commit within the stall bound.
    while (!/^interlink_relay_store_up 0$/m.test(relay.renderMetrics())) {
      if (Date.now() > deadline) throw new Error('the relay did not count its database down while it could not commit');
      await new Promise((r) => setTimeout(r, 100));
    }
    // Turned away at the door, and told why: the promoted primary does not commit.
    for (;;) {
      const refusal = await upgradeRefusal(relay.url);
      expect(refusal).toMatch(/^503: interlink relay: the relay's database/);
      if (/did not commit within 2 s \(its connections stall, or its primary waits for a synchronous standby that is not attached\)/.test(refusal!)) break;
      if (Date.now() > deadline) throw new Error(`the relay never said that its database does not commit: ${refusal}`);
      await new Promise((r) => setTimeout(r, 100));
    }

    // The runbook's step: the promoted primary has no standby to wait for.
    await onNode(cluster.standby!, 'postgres', async (sql) => {
      await sql.unsafe("alter system set synchronous_standby_names = ''");
      await sql`select pg_reload_conf()`;
    });
    const after = await sendUntilAccepted(relay, reader.route, { n: 1 });
    expect(relay.renderMetrics()).toMatch(/^interlink_relay_store_up 1$/m);
    const client = await connect(relay);
    await client.auth(reader);
    const ids = (await client.waitForDeliveries(2, reader.route, 20_000)).map((d) => d.id);
    expect(ids).toEqual([before.type === 'accepted' ? before.id : -1, after]);
  }, TEST_TIMEOUT_MS);

  it('makes again an acknowledgement the old primary took along, once the promoted standby commits: no rows are left, and the reader did nothing more', async () => {
    const cluster = await startPgCluster({ standby: true, synchronous: true });
    await cluster.createDatabase('relay');
    const relay = await relayOn(cluster.url('relay'));
    const reader = newReader();
    const sender = await connect(relay);
    expect((await sender.send(reader.route, { n: 0 })).type).toBe('accepted');
    const client = await connect(relay);
    await client.auth(reader);
    const [delivered] = await client.waitForDeliveries(1, reader.route);

    // The standby stops receiving: the acknowledgement commits on the primary alone (it does not wait for the standby).
    await cluster.standby!.stop();
    client.ack(reader.route, [delivered!.id]);
    const queued = (node: PgNode) => onNode(node, 'relay', (sql) => sql`select count(*)::int as n from relay_messages`).then((rows) => rows[0]?.n as number);
    const deadline = Date.now() + DEADLINE_MS;
    while ((await queued(cluster.primary)) !== 0) {
      if (Date.now() > deadline) throw new Error('the acknowledgement did not commit on the primary');
      await new Promise((r) => setTimeout(r, 50));
    }
    await cluster.primary.kill9();
    await cluster.standby!.start();
    await cluster.standby!.promote();
    // The promoted standby never had the acknowledgement (the standby was stopped before it was
    // made); the relay may have made it again already, so only its end is checked.
    const redone = Date.now() + DEADLINE_MS;
    while ((await queued(cluster.standby!)) !== 0) {
      if (Date.now() > redone) throw new Error('the relay did not make the lost acknowledgement again: its message is still queued on the promoted standby');
      await new Promise((r) => setTimeout(r, 100));
    }
  }, TEST_TIMEOUT_MS);

  it('closes its connections and refuses new ones while its database connections stall, and serves again once they flow', async () => {
    const cluster = await startPgCluster();
    await cluster.createDatabase('relay');
    const proxy = await StallingProxy.start(cluster.primary.port);
    proxies.push(proxy);
    const relay = await relayOn(`postgres://postgres@127.0.0.1:${proxy.port}/relay`);
    const reader = newReader();
    const client = await connect(relay);
    await client.auth(reader);
    expect((await client.send(reader.route, { n: 0 })).type).toBe('accepted');
    await client.waitForDeliveries(1, reader.route);

    proxy.stall();
    const stalledAt = Date.now();
    const closed = await Promise.race([client.closed, new Promise<undefined>((r) => setTimeout(() => r(undefined), DEADLINE_MS))]);
    expect(closed).toMatchObject({ code: 1013 });
    console.log(`a stalled database: the relay closed its connections ${Date.now() - stalledAt} ms after the stall`);
    expect(await upgradeRefusal(relay.url)).toMatch(/^503: interlink relay: the relay's database did not commit within 2 s/);

    proxy.flow();
    const id = await sendUntilAccepted(relay, reader.route, { n: 1 });
    const again = await connect(relay);
    await again.auth(reader);
    expect((await again.waitForDeliveries(2, reader.route, 20_000)).map((d) => d.id).at(-1)).toBe(id);
  }, TEST_TIMEOUT_MS);
});
