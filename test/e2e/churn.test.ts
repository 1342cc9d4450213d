/**
 * Churn through the public surface (issue: sessions come and go, relays refuse and
 * restart): several identities, each a person with their own state root, whose agent
 * sessions are separate `serve` processes driven by the official MCP SDK client; sessions
 * end cleanly or are killed and new ones start with new ids; the relay restarts on its
 * store and refuses past a small per-connection share (`queue_full`). A seeded schedule
 * sends, reads and churns; afterwards every identity keeps one live session until all is
 * read.
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
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli, userEnv } from '../helpers/cli.js';
import { eventually, kill9, startPeer, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { seededRandom } from '../helpers/seeded.js';
import { freePort, startRelay, type RelayProcess } from '../helpers/spawn-relay.js';

const CHURN_MS = Number(process.env.CHURN_MS ?? 40_000);
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

let root: string;
let relay: RelayProcess;
let port: number;
const random = seededRandom(SEED);
const live = new Map<Name, Peer[]>(NAMES.map((n) => [n, []]));
const counters = new Map<Name, number>(NAMES.map((n) => [n, 0]));
const keys = new Map<Name, string>();
const sent: Sent[] = [];
const readOrder = new Map<Name, string[]>(NAMES.map((n) => [n, []]));
const tally = { sends: 0, refusedAtSend: new Map<string, number>(), ended: 0, killed: 0, relayRestarts: 0, reads: 0 };

const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
const relayUrl = () => `ws://127.0.0.1:${port}`;

async function startSession(name: Name): Promise<Peer> {
  const n = (counters.get(name) ?? 0) + 1;
  counters.set(name, n);
  const p = await startPeer({ root, name, session: `${name}-${n}`, relays: relayUrl() });
  live.get(name)!.push(p);
  return p;
}

async function restartRelay(): Promise<void> {
  await relay.child.kill('SIGTERM');
  relay = await startRelay({ port, db: join(root, 'relay-db'), args: ['--max-per-connection', String(SHARE)] });
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

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-churn-'));
  port = await freePort();
  relay = await startRelay({ port, db: join(root, 'relay-db'), args: ['--max-per-connection', String(SHARE)] });
  for (const name of NAMES) {
    const p = await startSession(name);
    keys.set(name, (await p.call<{ identity: string }>('get_my_session_id')).identity);
  }
  for (const name of NAMES) {
    const p = live.get(name)![0]!;
    for (const other of NAMES) if (other !== name) await p.call('add_peer', { petname: other, key: keys.get(other)! });
  }
}, 60_000);

afterAll(async () => {
  await Promise.all([...live.values()].flat().map((p) => p.close().catch(() => undefined)));
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

describe(`churn (seed ${SEED}, ${CHURN_MS} ms)`, () => {
  it('delivers every message a sender was told was taken to a session of its identity exactly once, in order per route, and leaves nothing waiting unseen', async () => {
    const started = Date.now();
    const deadline = started + CHURN_MS;
    // The relay restarts at least at a third and two thirds of the run, and at random besides.
    const restarts = [started + CHURN_MS / 3, started + (2 * CHURN_MS) / 3];
    while (Date.now() < deadline) {
      if (restarts.length > 0 && Date.now() >= restarts[0]!) {
        restarts.shift();
        await restartRelay();
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
    // Settle: one live session per identity at least, reading until everything sent was read.
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
    console.log(`churn: ${JSON.stringify(summary())}`);
    expect(tally.sends).toBeGreaterThan(0);
  }, CHURN_MS + SETTLE_MS + 120_000);
});

function summary() {
  return { seed: SEED, ms: CHURN_MS, sends: tally.sends, refused_at_send: Object.fromEntries(tally.refusedAtSend), ended: tally.ended, killed: tally.killed, relay_restarts: tally.relayRestarts, reads: tally.reads };
}
