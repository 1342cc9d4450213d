/**
 * Churn through the public surface (issue: sessions come and go, relays refuse and
 * restart, databases fail over): several identities, each a person with their own state
 * root, whose agent sessions are separate `serve` processes driven by the official MCP SDK
 * client; sessions end cleanly or are killed and new ones start with new ids; relays
 * restart on their store and refuse past a small per-connection share (`queue_full`). A
 * seeded schedule sends, reads and churns; afterwards every identity keeps one live
 * session until all is read. It runs on two backends: one relay on its journal store
 * (restarted at a third and two thirds of the run), and two relays on PostgreSQL with a
 * synchronous standby, set up as docs/SCALING.md's runbook says, whose primary stalls
 * (its processes stopped for seconds) at a third of the run and is killed at two thirds,
 * the standby promoted and nothing else done.
 *
 * Checked per identity: every message whose send_message answered reaches a session of
 * its identity exactly once (one mailbox row across all its sessions, acknowledged), each
 * sending session's messages to one route are read in the order sent, and nothing is
 * left waiting that `status` does not count. `npm run churn` runs it for ten minutes
 * (CHURN_MS, CHURN_SEED); `npm test` runs a short seeded version.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli, userEnv } from '../helpers/cli.js';
import { eventually, kill9, startPeer, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { seededRandom } from '../helpers/seeded.js';
import { freePort, startRelay } from '../helpers/spawn-relay.js';
import { closeAllPgClusters, postgresBinDir, startPgCluster, type PgCluster } from '../helpers/postgres.js';
import postgres from 'postgres';
import { execFileSync } from 'node:child_process';

const CHURN_MS = Number(process.env.CHURN_MS ?? 20_000);
const SEED = Number(process.env.CHURN_SEED ?? 35);
const NAMES = ['alice', 'bob', 'carol'] as const;
type Name = (typeof NAMES)[number];
/** Small, so a busy route meets `queue_full` (the relay's per-connection share). */
const SHARE = 12;
const SETTLE_MS = 120_000;

interface Sent {
  msg_id: string;
  from: Name;
  /** The sending session: its messages to one route must be read in this order. */
  fromSession: string;
  to: Name;
  toSession: string;
  n: number;
}

interface Read {
  msg_id: string;
  text: string;
  to_session?: string;
  receipt: { sender: string; msg_id: string };
}

/** Where the relays run and what goes wrong with them. */
interface Backend {
  name: string;
  /** INTERLINK_URL for every session. */
  urls: string;
  /** A relay process restarted on its store. */
  restartRelay: () => Promise<void>;
  /** Faults at fixed points of the run (fractions of CHURN_MS). */
  faults: { at: number; what: string; run: () => Promise<void> }[];
  close: () => Promise<void>;
}

/** One relay process on its journal store, restarted on the same port and store. */
async function journalBackend(): Promise<Backend> {
  const port = await freePort();
  const db = join(root, 'relay-db');
  const start = () => startRelay({ port, db, args: ['--max-per-connection', String(SHARE)] });
  let relay = await start();
  const restartRelay = async () => {
    await relay.child.kill('SIGTERM');
    relay = await start();
  };
  return {
    name: 'one relay on its journal store',
    urls: `ws://127.0.0.1:${port}`,
    restartRelay,
    faults: [
      { at: 1 / 3, what: 'relay restart', run: restartRelay },
      { at: 2 / 3, what: 'relay restart', run: restartRelay },
    ],
    close: async () => relay.child.kill(),
  };
}

async function onNode(url: string, ...statements: string[]): Promise<void> {
  const sql = postgres(url, { max: 1, connect_timeout: 5, onnotice: () => undefined });
  try {
    for (const statement of statements) await sql.unsafe(statement);
  } finally {
    await sql.end({ timeout: 1 });
  }
}

/** The processes of a PostgreSQL node: its postmaster and every child (backends, WAL sender). */
async function nodeProcesses(pid: number): Promise<number[]> {
  const children = execFileSync('ps', ['-o', 'pid=', '--ppid', String(pid)], { encoding: 'utf8' }).split('\n').map((l) => Number(l.trim())).filter((n) => n > 0);
  return [pid, ...children];
}

/**
 * Two relay processes on PostgreSQL, a primary with a synchronous standby (runbook step 1:
 * the standby's own synchronous_standby_names cleared), the relays' key pinned on both
 * addresses. At a third of the run the primary's processes are stopped for 4 s (every
 * database connection stalls); at two thirds the primary is killed and the standby
 * promoted, nothing else (runbook step 3).
 */
async function postgresBackend(): Promise<Backend> {
  const cluster: PgCluster = await startPgCluster({ standby: true, synchronous: true });
  await onNode(cluster.standby!.url(), "ALTER SYSTEM SET synchronous_standby_names = ''", 'SELECT pg_reload_conf()');
  await cluster.createDatabase('relay');
  const ports = [await freePort(), await freePort()];
  const start = (p: number) => startRelay({ port: p, args: ['--store', cluster.url('relay'), '--max-per-connection', String(SHARE)], startTimeoutMs: 120_000 });
  const relays = [await start(ports[0]!), await start(ports[1]!)];
  const key = relays[0]!.key;
  const restartRelay = async () => {
    const i = Math.floor(random() * relays.length);
    await relays[i]!.child.kill('SIGTERM');
    relays[i] = await start(ports[i]!);
  };
  const stall = async () => {
    const pids = await nodeProcesses(await cluster.primary.pid());
    for (const pid of pids) process.kill(pid, 'SIGSTOP');
    await new Promise((r) => setTimeout(r, 4_000));
    for (const pid of pids) process.kill(pid, 'SIGCONT');
  };
  const failover = async () => {
    await cluster.primary.kill9();
    await cluster.standby!.promote();
  };
  return {
    name: 'two relays on PostgreSQL with a synchronous standby',
    urls: ports.map((p) => `ws://127.0.0.1:${p}#key=${key}`).join(','),
    restartRelay,
    faults: [
      { at: 1 / 3, what: 'primary stalled 4 s', run: stall },
      { at: 2 / 3, what: 'primary killed, standby promoted', run: failover },
    ],
    close: async () => {
      await Promise.all(relays.map((r) => r.child.kill()));
      await closeAllPgClusters();
    },
  };
}

let root: string;
let backend: Backend;
let random = seededRandom(SEED);
let live = new Map<Name, Peer[]>();
let counters = new Map<Name, number>();
let keys = new Map<Name, string>();
let sent: Sent[] = [];
let readOrder = new Map<Name, string[]>();
let tally = newTally();

function newTally() {
  return { sends: 0, refusedAtSend: new Map<string, number>(), ended: 0, killed: 0, relayRestarts: 0, reads: 0, faults: [] as string[], examples: [] as string[] };
}

/** A fresh run: the same seed, nothing sent, no session. */
function reset(): void {
  random = seededRandom(SEED);
  live = new Map(NAMES.map((n) => [n, []]));
  counters = new Map(NAMES.map((n) => [n, 0]));
  keys = new Map();
  sent = [];
  readOrder = new Map(NAMES.map((n) => [n, []]));
  tally = newTally();
}

const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
const relayUrl = () => backend.urls;

async function startSession(name: Name): Promise<Peer> {
  const n = (counters.get(name) ?? 0) + 1;
  counters.set(name, n);
  const p = await startPeer({ root, name, session: `${name}-${n}`, relays: relayUrl() });
  live.get(name)!.push(p);
  return p;
}

async function restartRelay(): Promise<void> {
  await backend.restartRelay();
  tally.relayRestarts++;
}

/** A burst of 1 to 16 messages from one session of one identity to another identity, sent at once. */
async function send(): Promise<void> {
  const from = pick(NAMES);
  const to = pick(NAMES.filter((n) => n !== from));
  const sender = pick(live.get(from)!);
  const mine = await sender.call<{ session_id: string }>('get_my_session_id');
  const burst = 1 + Math.floor(random() * 16);
  const first = sent.filter((s) => s.from === from && s.to === to).length;
  const results = await Promise.allSettled(
    Array.from({ length: burst }, (_, i) => sender.call<{ msg_id: string; session: string }>('send_message', { to, text: `churn ${from}->${to} #${first + i}` })),
  );
  // Calls are signed in the order they reach the server: the order they were made here.
  results.forEach((result, i) => {
    if (result.status === 'fulfilled') {
      sent.push({ msg_id: result.value.msg_id, from, fromSession: mine.session_id, to, toSession: result.value.session, n: first + i });
      tally.sends++;
    } else {
      // Not told it was taken: counted, not checked.
      const code = /"code":"([a-z_]+)"/.exec(String(result.reason))?.[1] ?? 'error';
      tally.refusedAtSend.set(code, (tally.refusedAtSend.get(code) ?? 0) + 1);
      if (tally.examples.length < 3) tally.examples.push(String(result.reason).slice(0, 300));
    }
  });
}

/** A session of `name` reads everything unread and acknowledges it, recording the order read. */
async function read(p: Peer, name: Name): Promise<number> {
  let total = 0;
  for (let page = 0; page < 20; page++) {
    const inbox = await p.call<{ messages: Read[]; more: boolean }>('receive_messages', { limit: 100 });
    const fresh = inbox.messages.filter((m) => m.text.startsWith('churn '));
    readOrder.get(name)!.push(...fresh.map((m) => m.msg_id));
    if (inbox.messages.length > 0) await p.call('acknowledge_messages', { messages: inbox.messages.map((m) => m.receipt) });
    total += inbox.messages.length;
    if (!inbox.more) break;
  }
  tally.reads++;
  return total;
}

async function churnOne(name: Name, kill: boolean): Promise<void> {
  const sessions = live.get(name)!;
  const victim = pick(sessions);
  sessions.splice(sessions.indexOf(victim), 1);
  if (kill) {
    kill9(victim);
    tally.killed++;
  } else {
    await victim.close();
    tally.ended++;
  }
  if (sessions.length === 0 || random() < 0.3) await startSession(name);
}

/** Starts the identities' first sessions on `backend` and pairs everyone with everyone. */
async function setUp(): Promise<void> {
  for (const name of NAMES) {
    const p = await startSession(name);
    keys.set(name, (await p.call<{ identity: string }>('get_my_session_id')).identity);
  }
  for (const name of NAMES) {
    const p = live.get(name)![0]!;
    for (const other of NAMES) if (other !== name) await p.call('add_peer', { petname: other, key: keys.get(other)! });
  }
}

/** Sends, reads and churns until CHURN_MS has passed, running the backend's faults when due. */
async function churn(): Promise<void> {
  const started = Date.now();
  const deadline = started + CHURN_MS;
  const faults = backend.faults.map((f) => ({ ...f, due: started + f.at * CHURN_MS }));
  while (Date.now() < deadline) {
    if (faults.length > 0 && Date.now() >= faults[0]!.due) {
      const fault = faults.shift()!;
      await fault.run();
      tally.faults.push(`${fault.what} at ${Date.now() - started} ms`);
      continue;
    }
    const roll = random();
    if (roll < 0.6) await send();
    else if (roll < 0.82) {
      const name = pick(NAMES);
      await read(pick(live.get(name)!), name);
    } else if (roll < 0.92) await churnOne(pick(NAMES), false);
    else if (roll < 0.98) await churnOne(pick(NAMES), true);
    else await restartRelay();
  }
}

/** Every live session reads until every message a send answered was read, or SETTLE_MS passed. */
async function settle(): Promise<Map<string, Sent>> {
  const expected = new Map(sent.map((s) => [s.msg_id, s]));
  await eventually(
    async () => {
      for (const name of NAMES) for (const p of live.get(name)!) await read(p, name);
      const seen = new Set([...readOrder.values()].flat());
      return [...expected.keys()].every((id) => seen.has(id)) ? true : undefined;
    },
    SETTLE_MS,
    `every one of ${expected.size} messages read`,
  ).catch((err: unknown) => {
    const seen = new Set([...readOrder.values()].flat());
    const missing = [...expected.values()].filter((s) => !seen.has(s.msg_id));
    throw new Error(`${String(err)}; ${missing.length} missing, e.g. ${JSON.stringify(missing.slice(0, 5))}; ${JSON.stringify(summary())}`);
  });
  return expected;
}

/** What each identity read and what its stores and `status` say, against what was sent. */
async function check(expected: Map<string, Sent>): Promise<void> {
  for (const name of NAMES) {
    // Read once each, by the identity it was sent to.
    const order = readOrder.get(name)!;
    const mine = order.filter((id) => expected.get(id)?.to === name);
    expect(new Set(mine).size, `${name} read a message twice`).toBe(mine.length);
    expect(order.every((id) => expected.get(id)?.to === name || !expected.has(id))).toBe(true);
    // Each sending session's messages to one route, in the order sent.
    const position = new Map(order.map((id, i) => [id, i]));
    const routes = new Map<string, Sent[]>();
    for (const s of sent.filter((s) => s.to === name)) routes.set(`${s.fromSession} ${s.toSession}`, [...(routes.get(`${s.fromSession} ${s.toSession}`) ?? []), s]);
    for (const [route, messages] of routes) {
      const positions = messages.map((s) => position.get(s.msg_id)!);
      expect(positions, `${route}: read out of send order`).toEqual([...positions].sort((a, b) => a - b));
    }
    // Exactly one mailbox row per message across the identity's sessions, acknowledged; nothing unread or unsent.
    const env = userEnv({ root: join(root, name), configDir: join(root, name, 'config'), stateDir: join(root, name, 'state') }, { INTERLINK_URL: relayUrl() });
    const rows = JSON.parse((await runCli(['inbox', '--json'], env)).stdout) as { messages: { msg_id: string; state: string }[] };
    for (const s of sent.filter((s) => s.to === name)) {
      const copies = rows.messages.filter((r) => r.msg_id === s.msg_id);
      expect(copies.length, `${s.msg_id} rows at ${name}`).toBe(1);
      expect(copies[0]!.state).toBe('receiver_acknowledged');
    }
    const status = JSON.parse((await runCli(['status', '--all', '--json'], env)).stdout) as { sessions: { session: string; unread: number; pending: number }[] };
    for (const s of status.sessions) expect({ session: s.session, unread: s.unread, pending: s.pending }).toEqual({ session: s.session, unread: 0, pending: 0 });
  }
}

/** One whole run on the backend `make` sets up. */
async function run(make: () => Promise<Backend>): Promise<void> {
  reset();
  root = await mkdtemp(join(tmpdir(), 'interlink-churn-'));
  try {
    backend = await make();
    await setUp();
    await churn();
    await check(await settle());
    console.log(`churn on ${backend.name}: ${JSON.stringify(summary())}`);
    expect(tally.sends).toBeGreaterThan(0);
  } finally {
    await Promise.all([...live.values()].flat().map((p) => p.close().catch(() => undefined)));
    await backend?.close().catch(() => undefined);
    await reapAll();
    await closeAllPgClusters();
    await rm(root, { recursive: true, force: true });
  }
}

// CI installs PostgreSQL (.ci/run): there a missing install fails instead of skipping.
const noPostgres = postgresBinDir() === undefined && process.env.CI !== 'true';
const TIMEOUT = CHURN_MS + SETTLE_MS + 240_000;

describe(`churn (seed ${SEED}, ${CHURN_MS} ms)`, () => {
  const promise = 'delivers every message a sender was told was taken to a session of its identity exactly once, in order per route, and leaves nothing waiting unseen';
  it(`one relay on its journal store, restarted: ${promise}`, () => run(journalBackend), TIMEOUT);
  it.skipIf(noPostgres)(`two relays on PostgreSQL, the primary stalled, then killed and the standby promoted: ${promise}`, () => run(postgresBackend), TIMEOUT);
});

function summary() {
  return { seed: SEED, ms: CHURN_MS, sends: tally.sends, refused_at_send: Object.fromEntries(tally.refusedAtSend), ended: tally.ended, killed: tally.killed, relay_restarts: tally.relayRestarts, reads: tally.reads, faults: tally.faults, refusals: tally.examples };
}
