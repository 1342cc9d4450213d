/**
 * The user's path: every session its own `interlink-mcp serve` process, driven over MCP
 * stdio by the official SDK client, as Claude Code and Codex drive it; one durable relay
 * (`relay --db`) in its own process. For 2, 8 and 32 sessions (half send, half receive,
 * one message in flight per sender): messages/s to `receiver_stored`, the `send_message`
 * call's latency, and send → `receiver_stored` from the receiver's own record
 * (`message_status` history), beside the same pairs run inside one process; then the CPU
 * an idle session uses and the memory of each process.
 */
import { mkdtemp } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { createIdentity } from '../../src/identity/identity.js';
import { addPeer } from '../../src/peers/peers.js';
import { startPeer, type Peer } from '../../test/helpers/mcp.js';
import { runPairs, type RunResult } from './end-to-end.js';
import { cpuSeconds, rssBytes } from './proc.js';
import { profileArgs, startRelayProcess } from './relay-process.js';
import type { BenchContext, Benchmark, Section } from './report.js';
import { randomText } from './records.js';
import { formatCount, formatMs, formatRatio, summarize, type Summary } from './stats.js';

const SESSIONS = [2, 8, 32] as const;
const MESSAGES = { 2: 400, 8: 1_600, 32: 3_200 } as const;
const WARMUP_PER_PAIR = 5;
const IDLE_SESSIONS = 16;
const IDLE_SECONDS = 30;
const IDLE_SETTLE_SECONDS = 30;
const TEXT = randomText(512);
const STORED_WAIT_MS = 120_000;

interface Sent {
  msgId: string;
  /** wall clock when the call started: the receiver's history uses the same clock */
  at: number;
}

interface PathResult {
  sessions: number;
  messages: number;
  perSecond: number;
  call: Summary;
  stored: Summary;
  serveRss: number[];
  /** CPU microseconds per message in the measured phase, by who pays them. */
  cpu: { sender: number; receiver: number; relay: number; client: number };
}

interface Machine {
  root: string;
  relayUrl: string;
  relayPid: number;
  main: string;
  profileDir: string | undefined;
}

function serve(machine: Machine, name: 'alice' | 'bob', session: string): Promise<Peer> {
  return startPeer({ root: machine.root, name, session, relays: machine.relayUrl, command: process.execPath, args: [...profileArgs(machine.profileDir), machine.main, 'serve'], env: { INTERLINK_LOG: 'error' } });
}

/** Two identities that know each other, as after pairing: alice's sessions send, bob's receive. */
async function twoIdentities(root: string): Promise<void> {
  const alice = await createIdentity(join(root, 'alice', 'config', 'id.key'));
  const bob = await createIdentity(join(root, 'bob', 'config', 'id.key'));
  await addPeer(join(root, 'alice', 'config', 'peers.json'), 'bob', bob.key);
  await addPeer(join(root, 'bob', 'config', 'peers.json'), 'alice', alice.key);
}

/** A send to a receiver whose announcement has not reached the sender yet is refused; try again until it is routed. */
async function firstSend(sender: Peer, session: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      await sender.call('send_message', { to: 'bob', session, text: 'warm-up' });
      return;
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

async function storedAt(receiver: Peer, msgId: string): Promise<number | undefined> {
  try {
    const status = await receiver.call<{ history: { state: string; at: number }[] }>('message_status', { msg_id: msgId });
    return status.history.find((h) => h.state === 'receiver_stored')?.at;
  } catch {
    return undefined;
  }
}

/** Waits, with a deadline, until the receiver has stored the pair's last message (they arrive in order). */
async function waitStored(receiver: Peer, last: Sent): Promise<void> {
  const deadline = Date.now() + STORED_WAIT_MS;
  while ((await storedAt(receiver, last.msgId)) === undefined) {
    if (Date.now() > deadline) throw new Error(`message ${last.msgId} not stored within ${STORED_WAIT_MS / 1000} s`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function runSessions(machine: Machine, sessions: 2 | 8 | 32): Promise<PathResult> {
  const pairs = sessions / 2;
  const receivers: Peer[] = [];
  const senders: Peer[] = [];
  try {
    for (let i = 0; i < pairs; i++) {
      receivers.push(await serve(machine, 'bob', `s${sessions}b${i}`));
      senders.push(await serve(machine, 'alice', `s${sessions}a${i}`));
    }
    await Promise.all(senders.map((s, i) => firstSend(s, `s${sessions}b${i}`)));
    const sent: Sent[][] = senders.map(() => []);
    const calls: number[] = [];
    const pump = async (i: number, count: number, record: boolean) => {
      for (let n = 0; n < count; n++) {
        const at = Date.now();
        const start = performance.now();
        const receipt = await senders[i]!.call<{ msg_id: string }>('send_message', { to: 'bob', session: `s${sessions}b${i}`, text: TEXT });
        if (record) {
          calls.push(performance.now() - start);
          sent[i]!.push({ msgId: receipt.msg_id, at });
        }
      }
    };
    await Promise.all(senders.map((_, i) => pump(i, WARMUP_PER_PAIR, false)));
    const perPair = Math.ceil(MESSAGES[sessions] / pairs);
    const cpuOf = (peers: Peer[]) => peers.reduce((sum, p) => sum + cpuSeconds(p.pid()!), 0);
    const cpuBefore = { sender: cpuOf(senders), receiver: cpuOf(receivers), relay: cpuSeconds(machine.relayPid), client: process.cpuUsage() };
    await Promise.all(senders.map((_, i) => pump(i, perPair, true)));
    await Promise.all(receivers.map((r, i) => waitStored(r, sent[i]!.at(-1)!)));
    const client = process.cpuUsage(cpuBefore.client);
    const spent = { sender: cpuOf(senders) - cpuBefore.sender, receiver: cpuOf(receivers) - cpuBefore.receiver, relay: cpuSeconds(machine.relayPid) - cpuBefore.relay, client: (client.user + client.system) / 1e6 };
    const latencies: number[] = [];
    let first = Number.POSITIVE_INFINITY;
    let last = 0;
    for (const [i, list] of sent.entries()) {
      for (const message of list) {
        const stored = await storedAt(receivers[i]!, message.msgId);
        if (stored === undefined) throw new Error(`message ${message.msgId} has no receiver_stored`);
        latencies.push(stored - message.at);
        first = Math.min(first, message.at);
        last = Math.max(last, stored);
      }
    }
    const serveRss = [...senders, ...receivers].map((p) => rssBytes(p.pid()!));
    const perMessage = (seconds: number) => (seconds * 1e6) / latencies.length;
    const cpu = { sender: perMessage(spent.sender), receiver: perMessage(spent.receiver), relay: perMessage(spent.relay), client: perMessage(spent.client) };
    return { sessions, messages: latencies.length, perSecond: (latencies.length * 1000) / Math.max(1, last - first), call: summarize(calls), stored: summarize(latencies), serveRss, cpu };
  } finally {
    await Promise.all([...senders, ...receivers].map((p) => p.close().catch(() => undefined)));
  }
}

/** CPU used by idle sessions over IDLE_SECONDS, as a share of one core, per session. */
async function idleCpu(machine: Machine): Promise<{ shares: number[]; rss: number[] }> {
  const peers: Peer[] = [];
  try {
    for (let i = 0; i < IDLE_SESSIONS; i++) peers.push(await serve(machine, i % 2 === 0 ? 'alice' : 'bob', `idle${i}`));
    // Let start-up work finish before measuring: first announcements and roster fetches,
    // and the garbage collections V8 runs for half a minute after start-up, as allocation
    // slows down, to give memory back.
    await new Promise((r) => setTimeout(r, IDLE_SETTLE_SECONDS * 1000));
    const before = peers.map((p) => cpuSeconds(p.pid()!));
    const start = performance.now();
    await new Promise((r) => setTimeout(r, IDLE_SECONDS * 1000));
    const seconds = (performance.now() - start) / 1000;
    const shares = peers.map((p, i) => (cpuSeconds(p.pid()!) - before[i]!) / seconds);
    return { shares, rss: peers.map((p) => rssBytes(p.pid()!)) };
  } finally {
    await Promise.all(peers.map((p) => p.close().catch(() => undefined)));
  }
}

function mib(bytes: number): string {
  return (bytes / 2 ** 20).toFixed(1);
}

function percent(share: number): string {
  return `${(share * 100).toFixed(2)}%`;
}

export function userPath(projectRoot: string): Benchmark {
  return {
    id: 'user-path',
    async run(context: BenchContext): Promise<Section> {
      const root = await mkdtemp(join(context.scratch, 'user-path-'));
      await twoIdentities(root);
      const relay = await startRelayProcess(projectRoot, await mkdtemp(join(context.scratch, 'user-path-relay-')), { ...(context.profileDir !== undefined && { profileDir: context.profileDir }) });
      const machine: Machine = { root, relayUrl: relay.url, relayPid: relay.pid, main: join(projectRoot, 'dist', 'src', 'cli', 'main.js'), profileDir: context.profileDir };
      const separate: PathResult[] = [];
      const inProcess: RunResult[] = [];
      let idle: { shares: number[]; rss: number[] };
      let relayRss: number;
      try {
        for (const sessions of SESSIONS) {
          context.progress(`user's path: ${sessions} serve processes over MCP stdio`);
          separate.push(await runSessions(machine, sessions));
          context.progress(`user's path: the same ${sessions / 2} pair(s) in one process`);
          inProcess.push(await runPairs(context, relay.url, sessions / 2, 'in-process', MESSAGES[sessions]));
        }
        relayRss = relay.rss();
        context.progress(`user's path: ${IDLE_SESSIONS} idle sessions for ${IDLE_SECONDS} s`);
        idle = await idleCpu(machine);
      } finally {
        await relay.stop();
      }
      const at32 = separate.find((r) => r.sessions === 32)!;
      const idleShare = summarize(idle.shares);
      const serveRss = summarize([...separate.flatMap((r) => r.serveRss), ...idle.rss]);
      return {
        title: "The user's path: separate serve processes over MCP stdio",
        measures: [
          'Every session is its own `interlink-mcp serve` process driven over stdio by the official MCP SDK client (one client per process, all in the benchmark process); one durable relay (`relay --db`) in its own process; two identities that know each other, as after pairing.',
          `Half the sessions send (alice), half receive (bob); each sender calls \`send_message\` with 512 characters of text to its own receiver session, one call at a time, ${WARMUP_PER_PAIR} warm-up messages per pair first.`,
          "`send_message` call: the SDK client's round trip. Send → receiver_stored: from the wall clock when the call started to the `receiver_stored` time in the receiver's own `message_status` history (the same clock; millisecond resolution). Messages/s: messages over the time from the first call to the last `receiver_stored`.",
          'In one process: the same pairs as agents inside the benchmark process (the end-to-end benchmark\'s method), with no MCP hop and no process boundary.',
          `Idle: ${IDLE_SESSIONS} sessions (half of each identity) started and left alone; CPU from /proc/<pid>/stat over ${IDLE_SECONDS} s, after ${IDLE_SETTLE_SECONDS} s to settle (start-up and the garbage collections that follow it). Memory: VmRSS of each serve after its run, and of the relay after the 32-session run.`,
        ].join(' '),
        tables: [
          {
            headers: ['Sessions', 'Messages', 'Messages/s', 'Call p50 ms', 'Call p99 ms', 'Stored p50 ms', 'Stored p90', 'Stored p99', 'In one process msg/s', 'In one process p99 ms', 'In one process / separate (msg/s)'],
            rows: separate.map((r, i) => {
              const local = inProcess[i]!;
              return [
                String(r.sessions),
                formatCount(r.messages),
                formatCount(r.perSecond),
                formatMs(r.call.median),
                formatMs(r.call.p99),
                formatMs(r.stored.median),
                formatMs(r.stored.p90),
                formatMs(r.stored.p99),
                formatCount(local.perSecond),
                formatMs(local.latency.p99),
                formatRatio(local.perSecond / r.perSecond),
              ];
            }),
          },
          {
            caption: 'CPU per message, by the process that pays it (µs; the sender and receiver columns sum over their serve processes; measured phase only, including the message_status polls that find the last message stored)',
            headers: ['Sessions', 'Sender serve', 'Receiver serve', 'Relay', 'SDK clients (benchmark process)', 'Total', 'Messages/s the 2 cores allow at this cost'],
            rows: separate.map((r) => {
              const total = r.cpu.sender + r.cpu.receiver + r.cpu.relay + r.cpu.client;
              return [String(r.sessions), formatCount(r.cpu.sender), formatCount(r.cpu.receiver), formatCount(r.cpu.relay), formatCount(r.cpu.client), formatCount(total), formatCount(2e6 / total)];
            }),
          },
          {
            caption: 'Idle sessions and memory',
            headers: ['Measure:', 'Median', 'Max'],
            rows: [
              [`CPU of an idle session (share of one core, ${IDLE_SESSIONS} sessions)`, percent(idleShare.median), percent(idleShare.max)],
              ['RSS of one serve, MiB', mib(serveRss.median), mib(serveRss.max)],
              ['RSS of the relay after the 32-session run, MiB', mib(relayRss), mib(relayRss)],
            ],
          },
        ],
        checks: [
          { target: "≥ 1,000 messages/s to receiver_stored with 32 sessions as separate processes (user's path)", actual: `${formatCount(at32.perSecond)}/s`, pass: at32.perSecond >= 1000 },
          { target: "p99 send → receiver_stored under 100 ms with 32 sessions (user's path)", actual: `${formatMs(at32.stored.p99)} ms`, pass: at32.stored.p99 < 100 },
          { target: "send_message call p99 under 20 ms with 32 sessions (user's path)", actual: `${formatMs(at32.call.p99)} ms`, pass: at32.call.p99 < 20 },
          { target: 'an idle session under 0.2% of a core', actual: `${percent(idleShare.median)} median, ${percent(idleShare.max)} max`, pass: idleShare.max < 0.002 },
          { target: 'one serve under 60 MiB RSS', actual: `${mib(serveRss.max)} MiB max`, pass: serveRss.max < 60 * 2 ** 20 },
        ],
        notes: [`The benchmark process runs all ${SESSIONS.at(-1)} SDK clients and, for the in-process rows, all the agents; on this machine it shares the cores with every serve and the relay.`],
      };
    },
  };
}
