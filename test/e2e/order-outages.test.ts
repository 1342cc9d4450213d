/**
 * A sender's messages are read in the order it sent them through refusals and outages
 * (issue 35, "Order kept through refusals and outages"; DESIGN.md "Order"): real relay
 * processes, alice's and bob's `serve` processes driven by the MCP SDK client, and bob's
 * agent reading and acknowledging pages while the messages still arrive, so a message
 * that arrives after a later one was read shows. In each test alice builds a backlog the
 * relays refuse or cannot take, then sends more at once when they can again — the moment
 * a new send used to overtake the backlog waiting for its retry:
 * - a relay whose per-connection share is full (`queue_full`), while bob is away;
 * - a relay whose disk fails (`storage`, INTERLINK_FAULT_AT on its journal's fdatasync);
 * - a relay killed with SIGKILL and started again on its store;
 * - a relay on PostgreSQL whose database is stopped and started again;
 * - two relays refusing in turn, one holding messages the other lacks.
 * Bob reads every message exactly once, each in the order sent; alice logs an episode of
 * refusals in two lines, not one per offer.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { eventually, pair, peerPool, type Peer } from '../helpers/mcp.js';
import { closeAllPgClusters, postgresBinDir, startPgCluster } from '../helpers/postgres.js';
import { reapAll } from '../helpers/process.js';
import { freePort, startRelay, type RelayProcess } from '../helpers/spawn-relay.js';

let root: string;
const pool = peerPool(() => root);

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-order-outages-'));
});
afterEach(async () => {
  await pool.closeAll();
  await reapAll();
  await rm(root, { recursive: true, force: true });
});
afterAll(async () => {
  await closeAllPgClusters();
});

const label = (i: number) => `m${String(i).padStart(3, '0')}`;
const labels = (from: number, to: number) => Array.from({ length: to - from }, (_, j) => label(from + j));

interface Page {
  messages: { text: string; receipt: { sender: string; msg_id: string } }[];
  more: boolean;
}

/** Alice's agent sends messages `from`..`to - 1` to bob's session b1, one call after another. */
async function send(alice: Peer, from: number, to: number): Promise<void> {
  for (const text of labels(from, to)) await alice.call('send_message', { to: 'bob', session: 'b1', text });
}

/** Waits until alice's outbox holds at least `count` messages no relay has accepted. */
async function pendingAtAlice(alice: Peer, count: number): Promise<void> {
  await eventually(async () => ((await alice.call<{ pending: unknown[] }>('list_pending')).pending.length >= count ? true : undefined), 30_000, `${count} pending`);
}

interface Reader {
  /** What bob read, in the order read: `count` messages, then whatever one more page held (it must hold nothing). */
  done: Promise<string[]>;
  /** How many bob has read so far. */
  read: () => number;
}

/** Bob's agent reading as messages arrive: pages of 5, each acknowledged before the next. */
function readAsTheyArrive(bob: Peer, count: number): Reader {
  const texts: string[] = [];
  const done = readPages(bob, count, texts);
  // Awaited by the test; a test that fails before that must not leave it unhandled.
  done.catch(() => undefined);
  return { done, read: () => texts.length };
}

async function readPages(bob: Peer, count: number, texts: string[]): Promise<string[]> {
  const deadline = Date.now() + 90_000;
  let idle = 10;
  while (texts.length < count) {
    if (Date.now() > deadline) throw new Error(`bob read ${texts.length} of ${count} messages: ${texts.join(' ')}`);
    const page = await bob.call<Page>('receive_messages', { limit: 5 });
    if (page.messages.length === 0) {
      await new Promise((r) => setTimeout(r, idle));
      idle = Math.min(idle * 2, 100);
      continue;
    }
    idle = 10;
    texts.push(...page.messages.map((m) => m.text));
    await bob.call('acknowledge_messages', { messages: page.messages.map((m) => m.receipt) });
  }
  const after = await bob.call<Page>('receive_messages', { limit: 5 });
  texts.push(...after.messages.map((m) => m.text));
  return texts;
}

/** The log lines of one event a serve wrote. */
function events(p: Peer, event: string): Record<string, unknown>[] {
  return p
    .stderr()
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .filter((line) => line.event === event);
}

/** Alice and bob paired through the tools, each a `serve` of its own on `relays`. */
async function pairedOn(relays: string, bobEnv: Record<string, string> = {}): Promise<{ alice: Peer; bob: Peer }> {
  const alice = await pool.start('alice', 'a1', relays);
  const bob = await pool.start('bob', 'b1', relays, bobEnv);
  await pair(alice, bob);
  return { alice, bob };
}

describe('order kept through refusals and outages', () => {
  it('queue_full: a backlog refused while bob was away arrives before what alice sends once he reads again', async () => {
    const relay = await startRelay({ db: join(root, 'relay'), flags: ['--max-per-connection', '5'] });
    const { alice, bob: first } = await pairedOn(relay.url);
    await pool.stop(first);
    // 000–004 fill alice's share of the relay; 005–019 are refused `queue_full` and wait.
    await send(alice, 0, 20);
    await pendingAtAlice(alice, 15);
    const bob = await pool.start('bob', 'b1', relay.url);
    const read = readAsTheyArrive(bob, 40);
    // Bob's first page read: his serve has stored 000–004 and freed alice's share.
    await eventually(async () => (read.read() >= 5 ? true : undefined), 30_000, 'bob reading');
    await send(alice, 20, 40);
    expect(await read.done).toEqual(labels(0, 40));
    expect(alice.stderr()).toContain('queue_full');
  });

  it('storage: messages the relay could not store arrive before what alice sends once its disk works again', async () => {
    const flag = join(root, 'disk-fails');
    const relay = await startRelay({ db: join(root, 'relay'), env: { INTERLINK_LOG: 'warn', INTERLINK_FAULT_AT: `relay.append.sync while ${flag}` } });
    const { alice, bob } = await pairedOn(relay.url);
    const read = readAsTheyArrive(bob, 40);
    await send(alice, 0, 10);
    await writeFile(flag, '');
    await send(alice, 10, 20);
    await pendingAtAlice(alice, 10);
    await rm(flag);
    await send(alice, 20, 40);
    expect(await read.done).toEqual(labels(0, 40));
    // One episode of refusals, each message offered again and again: two lines, not one per offer.
    expect(events(alice, 'relay_refused_send')).toEqual([expect.objectContaining({ code: 'storage' })]);
    expect(events(alice, 'relay_accepting_again')).toEqual([expect.objectContaining({ relay: relay.url })]);
  });

  it('a relay killed with SIGKILL and started again on its store: what waited meanwhile arrives before what follows', async () => {
    const port = await freePort();
    const db = join(root, 'relay');
    const relay = await startRelay({ port, db });
    const { alice, bob } = await pairedOn(relay.url);
    const read = readAsTheyArrive(bob, 40);
    await send(alice, 0, 10);
    await relay.child.kill('SIGKILL');
    await send(alice, 10, 20);
    await startRelay({ port, db });
    await send(alice, 20, 40);
    expect(await read.done).toEqual(labels(0, 40));
  });

  it.skipIf(postgresBinDir() === undefined && process.env.CI !== 'true')(
    'PostgreSQL stopped under the relay: the messages it refused arrive before what alice sends once the database is back',
    async () => {
      const cluster = await startPgCluster();
      await cluster.createDatabase('order_outage');
      const relay = await startRelay({ args: ['--store', cluster.url('order_outage')], startTimeoutMs: 60_000 });
      const { alice, bob } = await pairedOn(relay.url);
      const read = readAsTheyArrive(bob, 40);
      await send(alice, 0, 10);
      await cluster.primary.stop();
      await send(alice, 10, 20);
      await pendingAtAlice(alice, 10);
      await cluster.primary.start();
      await send(alice, 20, 40);
      expect(await read.done).toEqual(labels(0, 40));
      await cluster.close();
    },
    180_000,
  );

  it('two relays refusing in turn: each message reaches bob once and in order, also when only one relay holds the earlier ones', async () => {
    const [flagA, flagB] = [join(root, 'a-fails'), join(root, 'b-fails')];
    const relays: RelayProcess[] = [];
    for (const [name, flag] of [['a', flagA], ['b', flagB]] as const) {
      relays.push(await startRelay({ db: join(root, `relay-${name}`), env: { INTERLINK_LOG: 'warn', INTERLINK_FAULT_AT: `relay.append.sync while ${flag}` } }));
    }
    const { alice, bob } = await pairedOn(relays.map((r) => r.url).join(','));
    const read = readAsTheyArrive(bob, 60);
    await send(alice, 0, 10);
    // 010–019 only A can store.
    await writeFile(flagB, '');
    await send(alice, 10, 20);
    // 020–029 neither can.
    await writeFile(flagA, '');
    await send(alice, 20, 30);
    await pendingAtAlice(alice, 10);
    // A stores again, B still cannot; then both.
    await rm(flagA);
    await send(alice, 30, 45);
    await rm(flagB);
    await send(alice, 45, 60);
    expect(await read.done).toEqual(labels(0, 60));
  });
});
