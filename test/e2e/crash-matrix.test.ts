/**
 * The crash matrix (issue 16, docs/RELIABILITY.md): every step where a message changes
 * hands, from the sender's outbox commit to the receipt back, with the process that owns
 * the step killed by SIGKILL exactly there (INTERLINK_CRASH_AT, store/crash-point.ts),
 * then started again. A real relay process with --db, two real `serve` processes driven by
 * the official MCP SDK client, nothing in-process.
 *
 * Each run sends MESSAGES messages; the victim dies at the n-th time it reaches the point
 * (n drawn from a seeded generator, so a run is repeatable from the printed seed). The
 * guarantee checked after the restart:
 *   - every message send_message answered with a msg_id reaches the receiver's mailbox;
 *   - no message is stored twice (nothing answered or unanswered is admitted twice);
 *   - receive_messages lists the sender's messages in the order it sent them;
 *   - when the receiver was killed, its host is still told: a notice is in the inbox
 *     file, or a reservation stands that the notifier retries when its hold ends.
 * A send the dead sender never answered may arrive or not: the caller was not told it was
 * taken.
 *
 * `npm test` runs each point CRASH_RUNS times (1 by default); `npm run crash` runs each 20
 * times (CRASH_RUNS=20) and prints the table RELIABILITY.md carries.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { Mailbox } from '../../src/mailbox/mailbox.js';
import { processIsRunning } from '../../src/store/liveness.js';
import { eventually, pair, startPeer, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { seededRandom } from '../helpers/seeded.js';
import { freePort, startRelay, type RelayProcess } from '../helpers/spawn-relay.js';

type Victim = 'sender' | 'relay' | 'receiver';

interface CrashCase {
  point: string;
  victim: Victim;
  /** The step, as RELIABILITY.md names it. */
  step: string;
  /** How many times a run of MESSAGES messages surely reaches the point (n is drawn from 1 to this). */
  reached: number;
}

const MESSAGES = 8;
/** A run stops sending here even if the point was not reached; points reached later (receipts) are waited for. */
const MAX_MESSAGES = 40;

/** In the order a message travels. */
export const CRASH_CASES: readonly CrashCase[] = [
  { point: 'outbox.append.before_sync', victim: 'sender', step: 'outbox commit, written but not yet synced', reached: MESSAGES },
  { point: 'outbox.append.after_sync', victim: 'sender', step: 'outbox commit synced, not yet offered to a relay', reached: MESSAGES },
  { point: 'relay.append.before_sync', victim: 'relay', step: 'relay store, written but not yet synced (not accepted)', reached: MESSAGES },
  { point: 'relay.append.after_sync', victim: 'relay', step: 'relay store synced, `accepted` not yet sent', reached: MESSAGES },
  { point: 'outbound.after_relay_accept', victim: 'sender', step: 'relay accepted, the acceptance not yet in the outbox', reached: MESSAGES },
  { point: 'relay.after_deliver', victim: 'relay', step: 'relay delivered, no acknowledgement yet', reached: MESSAGES },
  { point: 'inbound.after_gate', victim: 'receiver', step: 'gate admitted, mailbox not yet written', reached: MESSAGES },
  { point: 'mailbox.append.before_sync', victim: 'receiver', step: 'mailbox commit, written but not yet synced', reached: MESSAGES },
  { point: 'mailbox.append.after_sync', victim: 'receiver', step: 'mailbox commit synced, relay not yet acknowledged', reached: MESSAGES },
  { point: 'inbound.after_ack', victim: 'receiver', step: 'relay acknowledged (the frame may not have left)', reached: MESSAGES },
  { point: 'notices.after_reserve', victim: 'receiver', step: 'notice reserved in the mailbox, not yet in the inbox file', reached: 1 },
  { point: 'notices.after_deliver', victim: 'receiver', step: 'notice appended to the inbox file, its outcome not yet recorded', reached: 1 },
  { point: 'receipts.after_send', victim: 'receiver', step: 'receipt accepted by the relay', reached: 1 },
  { point: 'inbound.receipt.after_commit', victim: 'sender', step: 'receipt applied to the outbox, relay not yet acknowledged', reached: 1 },
];

const RUNS = Math.max(1, Number(process.env.CRASH_RUNS ?? 1));
const SEED = Number(process.env.CRASH_SEED ?? Date.now() % 2 ** 31);


interface RunResult {
  point: string;
  nth: number;
  answered: number;
  unansweredArrived: number;
  unansweredLost: number;
}

const results: RunResult[] = [];
let root: string | undefined;
const peers: Peer[] = [];

afterEach(async () => {
  await Promise.all(peers.splice(0).map((p) => p.close().catch(() => undefined)));
  await reapAll();
  if (root !== undefined) await rm(root, { recursive: true, force: true });
  root = undefined;
});

afterAll(() => {
  // The figures RELIABILITY.md carries, one line per point.
  const lines = CRASH_CASES.map((c) => {
    const runs = results.filter((r) => r.point === c.point);
    const answered = runs.reduce((sum, r) => sum + r.answered, 0);
    const arrived = runs.reduce((sum, r) => sum + r.unansweredArrived, 0);
    const lost = runs.reduce((sum, r) => sum + r.unansweredLost, 0);
    return `| \`${c.point}\` | ${c.victim} | ${runs.length} | ${answered} | 0 | 0 | ${arrived} / ${lost} |`;
  });
  process.stderr.write(`crash matrix, seed ${SEED}, ${RUNS} run(s) per point:\n| point | killed | runs | answered sends | lost | stored twice | unanswered arrived / not |\n|---|---|---|---|---|---|---|\n${lines.join('\n')}\n`);
});

async function startSide(name: 'alice' | 'bob', session: string, relayUrl: string, crashAt?: string): Promise<Peer> {
  const p = await startPeer({ root: root!, name, session, relays: relayUrl, env: crashAt === undefined ? {} : { INTERLINK_CRASH_AT: crashAt } });
  peers.push(p);
  return p;
}

function alive(p: Peer): boolean {
  const pid = p.pid();
  return pid !== null && processIsRunning(pid);
}

async function drop(p: Peer): Promise<void> {
  peers.splice(peers.indexOf(p), 1);
  await p.close().catch(() => undefined);
}

/** The first send waits until the receiver's announcement reached the sender. */
async function routed(alice: Peer): Promise<void> {
  await eventually(async () => {
    const found = await alice.call<{ identities: { sessions: { session: string }[] }[] }>('discover', { peer: 'bob' }).catch(() => undefined);
    return found?.identities[0]?.sessions.some((s) => s.session === 'b1') === true ? true : undefined;
  }, 20_000, 'bob#b1 on the roster');
}

async function stored(state: string, bobKey: string): Promise<{ msg_id: string; text: string }[]> {
  const mailbox = await Mailbox.open(join(state, 'mailbox', bobKey, 'b1.json'), { readOnly: true });
  return (await mailbox.all()).map((r) => ({ msg_id: r.envelope.msg_id, text: r.envelope.text }));
}

/** A notice line in bob's inbox file, or a reservation the notifier retries when its hold ends (notices/schedule.ts). */
async function noticed(state: string, bobKey: string): Promise<boolean> {
  const inbox = await readFile(join(state, 'inbox', 'b1.jsonl'), 'utf8').catch(() => '');
  if (inbox.split('\n').some((line) => line.includes('"notification_id"'))) return true;
  const mailbox = await Mailbox.open(join(state, 'mailbox', bobKey, 'b1.json'), { readOnly: true });
  return (await mailbox.noticeState()).reservation !== undefined;
}

async function runOnce(c: CrashCase, nth: number): Promise<RunResult> {
  root = await mkdtemp(join(tmpdir(), 'interlink-crash-'));
  const crashAt = `${c.point}@${nth}`;
  const port = await freePort();
  const db = join(root, 'relay-db');
  let relay: RelayProcess = await startRelay({ port, db, ...(c.victim === 'relay' && { env: { INTERLINK_CRASH_AT: crashAt } }) });
  let alice = await startSide('alice', 'a1', relay.url, c.victim === 'sender' ? crashAt : undefined);
  let bob = await startSide('bob', 'b1', relay.url, c.victim === 'receiver' ? crashAt : undefined);
  const { bKey } = await pair(alice, bob);
  await routed(alice);

  let died = false;
  const victimDead = (): boolean => (c.victim === 'relay' ? relay.child.process.exitCode !== null || relay.child.process.signalCode !== null : !alive(c.victim === 'sender' ? alice : bob));
  /** Starts the victim again, without the crash point, once it is gone. */
  const restartIfDead = async (): Promise<void> => {
    if (died || !victimDead()) return;
    died = true;
    if (c.victim === 'relay') {
      expect((await relay.child.exited).signal).toBe('SIGKILL');
      relay = await startRelay({ port, db });
    } else if (c.victim === 'sender') {
      await drop(alice);
      alice = await startSide('alice', 'a1', relay.url);
      await routed(alice);
    } else {
      await drop(bob);
      bob = await startSide('bob', 'b1', relay.url);
    }
  };

  const answered: { msg_id: string; text: string }[] = [];
  const unanswered: string[] = [];
  // At least MESSAGES sends, and on until the victim died: commits that group several
  // messages reach a point fewer times than there are messages.
  for (let i = 1; i <= MAX_MESSAGES && (i <= MESSAGES || !died); i++) {
    const text = `m${String(i).padStart(2, '0')}`;
    try {
      const sent = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text });
      answered.push({ msg_id: sent.msg_id, text });
    } catch {
      unanswered.push(text);
    }
    await restartIfDead();
  }
  // Points reached later (a receipt, a delivery after the last send) are waited for.
  await eventually(async () => (died || victimDead() ? true : undefined), 20_000, `the victim to die at ${crashAt}`);
  await restartIfDead();
  expect(died).toBe(true);

  const arrived = await eventually(async () => {
    const records = await stored(bob.state, bKey);
    return answered.every((a) => records.some((r) => r.msg_id === a.msg_id)) ? records : undefined;
  }, 30_000, `every answered message in the mailbox after ${crashAt}`);
  // Nothing twice: not by msg_id, and not a message signed again under another id.
  expect(new Set(arrived.map((r) => r.msg_id)).size).toBe(arrived.length);
  expect(new Set(arrived.map((r) => r.text)).size).toBe(arrived.length);
  // The host is told: a notice is in the inbox file, or one is reserved and retried after its hold.
  if (c.victim === 'receiver') await eventually(async () => ((await noticed(bob.state, bKey)) ? true : undefined), 20_000, `a notice after ${crashAt}`);
  // receive_messages lists every stored message once, in the sender's order. A message the
  // restarted sender offered again may still arrive meanwhile: both are read until they agree.
  const { texts, records } = await eventually(async () => {
    const listed = await bob.call<{ messages: { text: string }[] }>('receive_messages', { limit: 100 });
    const now = await stored(bob.state, bKey);
    return listed.messages.length === now.length ? { texts: listed.messages.map((m) => m.text), records: now } : undefined;
  }, 20_000, `receive_messages to list every stored message after ${crashAt}`);
  expect(texts).toEqual([...texts].sort());
  expect(new Set(records.map((r) => r.msg_id)).size).toBe(records.length);
  expect(new Set(records.map((r) => r.text)).size).toBe(records.length);
  const arrivedTexts = new Set(records.map((r) => r.text));
  return {
    point: c.point,
    nth,
    answered: answered.length,
    unansweredArrived: unanswered.filter((t) => arrivedTexts.has(t)).length,
    unansweredLost: unanswered.filter((t) => !arrivedTexts.has(t)).length,
  };
}

describe(`crash matrix (seed ${SEED}, ${RUNS} run(s) per point)`, () => {
  const random = seededRandom(SEED);
  for (const c of CRASH_CASES) {
    const positions = Array.from({ length: RUNS }, () => 1 + Math.floor(random() * c.reached));
    it(`kill -9 of the ${c.victim} at ${c.point} (${c.step}) loses nothing answered and stores nothing twice`, async () => {
      for (const nth of positions) {
        const result = await runOnce(c, nth);
        results.push(result);
        // Between runs: the next one starts with fresh processes and a fresh root.
        await Promise.all(peers.splice(0).map((p) => p.close().catch(() => undefined)));
        await reapAll();
        await rm(root!, { recursive: true, force: true });
        root = undefined;
      }
    }, 60_000 * RUNS);
  }
});
