/**
 * Relays on replicated PostgreSQL under faults (issues 17 and 35; DESIGN.md "The relay":
 * "Where the queues live"), following docs/SCALING.md "Failover runbook" step by step: a
 * primary with a synchronous standby whose own synchronous_standby_names is cleared (step
 * 1), two relay processes on it, and
 * sessions in separate `serve` processes with both relays in INTERLINK_URL, their one key
 * pinned on each (one relay at two addresses, link/relay-groups.ts), half of them sending
 * to the other half. Then, while messages flow: kill -9 one relay process and check that
 * every message answered so far is read through the other; later kill -9 the primary,
 * check that the relay left refuses sends with a sentence that names the database, promote
 * the standby (step 3) and start the killed relay again; while no standby is attached the
 * relays accept on the promoted primary alone (step 4); then a new standby is made from it
 * and named synchronous (step 5), and a message accepted after that is on it.
 *
 * Checked at the end: every message `send_message` answered is read by its receiver, none
 * under two msg_ids, every page lists each sender's messages in the order sent, and the
 * relays accepted sends again on their own once the standby was promoted. Messages read
 * after a later one of their sender had been read are counted and reported (an offer that
 * timed out at one relay may still commit there after the next went through the other;
 * the mailbox orders what is unread).
 *
 * `npm test` runs FAILOVER_SESSIONS=32 (16 senders, 16 receivers) with FAILOVER_MESSAGES=8
 * per sender; `npm run failover` runs 40 each.
 */
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mapLimit } from '../helpers/cli.js';
import { startPeer } from '../helpers/mcp.js';
import { closeAllPgClusters, postgresBinDir, startPgCluster } from '../helpers/postgres.js';
import { reapAll } from '../helpers/process.js';
import postgres from 'postgres';
import { newReader, TestClient, upgradeRefusal } from '../helpers/relay-test-client.js';
import { freePort, startRelay, type RelayProcess } from '../helpers/spawn-relay.js';
import { pairedRoot, sleep, Traffic } from '../helpers/traffic.js';

const SESSIONS = Number(process.env.FAILOVER_SESSIONS ?? 32);
const MESSAGES = Number(process.env.FAILOVER_MESSAGES ?? 8);
const PAIRS = SESSIONS / 2;
const DRAIN_MS = 120_000 + PAIRS * MESSAGES * 20;
const START_TIMEOUT_MS = 120_000;

if (!Number.isInteger(PAIRS) || PAIRS < 1 || !Number.isInteger(MESSAGES) || MESSAGES < 4) throw new Error('FAILOVER_SESSIONS must be even and positive, FAILOVER_MESSAGES at least 4');

// CI installs PostgreSQL (.ci/run): there a missing install fails instead of skipping.
const missing = postgresBinDir() === undefined && process.env.CI !== 'true';

let root: string;

beforeAll(async () => {
  root = await pairedRoot('interlink-failover-');
});
afterAll(async () => {
  await reapAll();
  await closeAllPgClusters();
  await rm(root, { recursive: true, force: true });
});

interface Relay {
  port: number;
  process: RelayProcess | undefined;
}

/** Runs `statements` on `url` over a connection of its own. */
async function onNode(url: string, ...statements: string[]): Promise<postgres.Row[]> {
  const sql = postgres(url, { max: 1, connect_timeout: 5, onnotice: () => undefined });
  try {
    let rows: postgres.Row[] = [];
    for (const statement of statements) rows = [...(await sql.unsafe(statement))];
    return rows;
  } finally {
    await sql.end({ timeout: 1 });
  }
}

/**
 * Sends one probe message straight to a relay: its reply says whether the relay can store
 * now; a relay whose database does not commit lets no connection in (`unavailable`, with
 * its 503's body).
 */
async function probe(url: string): Promise<{ type: string; code?: string; message?: string }> {
  const refusal = await upgradeRefusal(url);
  if (refusal !== undefined) return { type: 'unavailable', message: refusal };
  const client = await TestClient.connect(url);
  try {
    return await client.send(newReader('probe').route, { probe: true }, 'probe', 30_000);
  } finally {
    await client.terminate();
  }
}

describe.skipIf(missing)('relays on replicated PostgreSQL', () => {
  it(`${SESSIONS} sessions, ${MESSAGES} messages per sender, two relays on a primary with a synchronous standby; a relay and then the primary killed, the standby promoted: nothing lost, nothing stored twice, pages in order`, async () => {
    // Step 1: the standby, cleared of the primary's synchronous_standby_names, is the primary's synchronous standby.
    const cluster = await startPgCluster({ standby: true, synchronous: true });
    await onNode(cluster.standby!.url(), "ALTER SYSTEM SET synchronous_standby_names = ''", 'SELECT pg_reload_conf()');
    expect(await cluster.syncState(cluster.primary, 'standby')).toBe('sync');
    await cluster.createDatabase('relay');
    const store = cluster.url('relay');
    const startOn = (port: number) => startRelay({ port, args: ['--store', store], startTimeoutMs: START_TIMEOUT_MS });
    const relays: Relay[] = [];
    for (let i = 0; i < 2; i++) {
      const port = await freePort();
      relays.push({ port, process: await startOn(port) });
    }
    const key = relays[0]!.process!.key;
    expect(relays[1]!.process!.key).toBe(key);
    const urls = relays.map((r) => `ws://127.0.0.1:${r.port}#key=${key}`).join(',');
    const serve = (name: 'alice' | 'bob', session: string) => startPeer({ root, name, session, relays: urls, env: { INTERLINK_LOG: 'warn' } });
    const traffic = new Traffic(PAIRS, MESSAGES, 'bob');
    const indices = Array.from({ length: PAIRS }, (_, i) => i);
    const senders = await mapLimit(indices, 8, (i) => serve('alice', `a${i}`));
    await mapLimit(indices, 8, async (i) => {
      traffic.readers[i]!.peer = await serve('bob', traffic.readers[i]!.session);
    });

    const seen = { refusalWhileDown: '', acceptedAgainAfterMs: NaN, primaryDownMs: NaN, readThroughOtherRelayMs: NaN, acceptedAlone: false, onNewStandby: false };
    const faults = async (): Promise<void> => {
      await traffic.progress(0.25);
      const [first, second] = relays as [Relay, Relay];
      first.process!.child.process.kill('SIGKILL');
      await first.process!.child.exited;
      first.process = undefined;
      // Every session reads and sends through the relay left, without the killed one coming back.
      seen.readThroughOtherRelayMs = await traffic.untilRead(60_000);

      // Step 2: the primary goes; the relay left refuses, naming its database.
      await traffic.progress(0.5);
      await cluster.primary.kill9();
      const killedAt = Date.now();
      const refused = await probe(`ws://127.0.0.1:${second.port}`);
      seen.refusalWhileDown = `${refused.type} ${refused.code ?? ''}: ${refused.message ?? ''}`;
      await sleep(1_000);
      // Step 3: promote, and nothing else.
      await cluster.standby!.promote();
      seen.primaryDownMs = Date.now() - killedAt;
      first.process = await startOn(first.port);
      // On their own: nobody restarts the surviving relay.
      const deadline = Date.now() + 60_000;
      for (;;) {
        const reply = await probe(`ws://127.0.0.1:${second.port}`);
        if (reply.type === 'accepted') break;
        if (Date.now() > deadline) throw new Error(`the relay did not accept sends within 60 s of the promotion: ${reply.message ?? reply.type}; its log ends: ${second.process!.child.stderr().slice(-2000)}`);
        await sleep(200);
      }
      seen.acceptedAgainAfterMs = Date.now() - killedAt;
      // Step 4: no standby is attached, and the promoted primary accepts alone.
      seen.acceptedAlone = (await onNode(cluster.standby!.url(), 'SELECT count(*)::int AS n FROM pg_stat_replication'))[0]?.n === 0;
    };

    await traffic.run(senders, faults, DRAIN_MS);

    // The relays say that accepted means one machine now: they look every 10 s
    // (relay/postgres/replication.ts), so wait for it before a standby is attached again.
    const saidNow = (event: string) => relays[1]!.process!.child.stderr().includes(`"event":"${event}"`);
    const unreplicatedDeadline = Date.now() + 30_000;
    while (!saidNow('relay_db_unreplicated')) {
      if (Date.now() > unreplicatedDeadline) throw new Error('the relay did not say that its promoted database names no synchronous standby');
      await sleep(200);
    }
    // Step 5: a new standby made from the promoted primary, its own setting cleared, then named there.
    const promoted = cluster.standby!;
    const standby2 = await cluster.addStandby(promoted, 'standby2');
    await onNode(standby2.url(), "ALTER SYSTEM SET synchronous_standby_names = ''", 'SELECT pg_reload_conf()');
    await onNode(promoted.url(), "ALTER SYSTEM SET synchronous_standby_names = 'standby2'", 'SELECT pg_reload_conf()');
    const syncDeadline = Date.now() + 60_000;
    while ((await cluster.syncState(promoted, 'standby2')) !== 'sync') {
      if (Date.now() > syncDeadline) throw new Error('standby2 did not become the synchronous standby of the promoted primary');
      await sleep(100);
    }
    const accepted = await probe(`ws://127.0.0.1:${relays[1]!.port}`);
    expect(accepted.type).toBe('accepted');
    // The relays said that accepted meant one machine, and say when it means two again.
    const said = (event: string) => relays[1]!.process!.child.stderr().includes(`"event":"${event}"`);
    expect(said('relay_db_unreplicated')).toBe(true);
    while (!said('relay_db_replicated')) {
      if (Date.now() > syncDeadline + 30_000) throw new Error('the relay did not say that its database names a synchronous standby again');
      await sleep(200);
    }
    const acceptedId = 'id' in accepted ? Number(accepted.id) : NaN;
    // Accepted on two machines again: the new standby has the message (it replays what it flushed).
    const replayDeadline = Date.now() + 30_000;
    while (!seen.onNewStandby) {
      seen.onNewStandby = (await onNode(standby2.url('relay'), `SELECT count(*)::int AS n FROM relay_messages WHERE id = ${acceptedId}`))[0]?.n === 1;
      if (!seen.onNewStandby && Date.now() > replayDeadline) throw new Error(`standby2 does not have message ${acceptedId}, which the relay accepted`);
      if (!seen.onNewStandby) await sleep(100);
    }

    const report = { sessions: SESSIONS, ...traffic.report(), ...seen };
    console.log(`relays on replicated PostgreSQL: ${JSON.stringify(report)}`);

    expect(seen.refusalWhileDown).toMatch(/^(refused storage: .*|unavailable : 503: interlink relay: )the relay's database/);
    expect(seen.acceptedAlone).toBe(true);
    expect(seen.onNewStandby).toBe(true);
    // Outage logs come with counts: each repeated failure is written in full at most once per outage.
    for (const relay of relays) {
      const lines = relay.process!.child.stderr().split('\n');
      const count = (event: string) => lines.filter((line) => line.includes(`"event":"${event}"`)).length;
      const outages = count('relay_db_down');
      for (const event of ['relay_commit_failed', 'relay_read_failed', 'relay_roster_failed']) expect([event, count(event)]).toEqual([event, Math.min(count(event), outages + 1)]);
      const downs = lines.filter((line) => line.includes('"event":"relay_db_down"')).map((line) => /"error":"([^"]*)"/.exec(line)?.[1]);
      console.log(`relay on ${relay.port}: ${lines.length} log lines, ${outages} outages (${downs.join(' | ')}), ${count('relay_repeated')} relay_repeated lines`);
    }
    expect(traffic.answeredCount).toBe(PAIRS * MESSAGES);
    expect(traffic.lost().slice(0, 10)).toEqual([]);
    expect(traffic.storedTwice().slice(0, 10)).toEqual([]);
    expect(traffic.pageOrderBroken().slice(0, 10)).toEqual([]);

    await Promise.all([...senders, ...traffic.readers.map((r) => r.peer)].map((p) => p?.close().catch(() => undefined)));
  }, 1_800_000);
});
