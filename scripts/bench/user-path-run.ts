/**
 * One run of the user's path: `serve` processes driven over MCP stdio by the official SDK
 * client, half sending to the other half through a relay process, one message in flight
 * per sender (user-path.ts reports it; user-path-budget.ts profiles it).
 */
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { z } from 'zod';
import { createIdentity } from '../../src/identity/identity.js';
import { addPeer } from '../../src/peers/peers.js';
import { processIsRunning } from '../../src/store/liveness.js';
import { startPeer, type Peer } from '../../test/helpers/mcp.js';
import { cpuSeconds, rssBytes } from './proc.js';
import { randomText } from './records.js';
import { summarize, type Summary } from './stats.js';
import { countSyscalls, perfUnavailable, type SyscallCounts } from './syscalls.js';

/** Per run; CI (no document written) sends half, to keep `.ci/run` within its 30 minutes. */
const FULL_MESSAGES = { 2: 400, 8: 1_600, 32: 3_200 } as const;
export const MESSAGES: Record<keyof typeof FULL_MESSAGES, number> =
  process.env.CI === 'true' ? { 2: 200, 8: 800, 32: 1_600 } : FULL_MESSAGES;
export type SessionCount = keyof typeof FULL_MESSAGES;
export const WARMUP_PER_PAIR = 5;
const TEXT = randomText(512);
const STORED_WAIT_MS = 120_000;

interface Sent {
  msgId: string;
  /** wall clock when the call started: the receiver's history uses the same clock */
  at: number;
}

export type ServeRole = 'sender' | 'receiver';

export interface Machine {
  /** NODE_OPTIONS for every serve, as the shipped host configs give it (shippedNodeOptions). */
  nodeOptions: string;
  root: string;
  /** Every serve's INTERLINK_URL: one relay, or several comma-separated as users list them. */
  relayUrl: string;
  /** The relay processes behind relayUrl, whose CPU and system calls are counted as the relay's. */
  relayPids: readonly number[];
  main: string;
  /** Node flags for every serve, e.g. to profile it. */
  nodeArgs?: (role: ServeRole, index: number) => string[];
  /** More environment for every serve (the sealing benchmark's unsealed baseline). */
  env?: Record<string, string>;
  /** False when the serves send no receipts (the unsealed baseline): the warm-up then does not wait for one. */
  receipts?: boolean;
  /** CPU seconds some other process kind has used so far (the relays' database); counted as `cpu.database`. */
  databaseCpu?: () => number;
}

export interface PathResult {
  sessions: number;
  messages: number;
  perSecond: number;
  call: Summary;
  stored: Summary;
  /** Every measured message's send → receiver_stored, ms (to pool several runs' percentiles). */
  storedMs: number[];
  serveRss: number[];
  /** CPU microseconds per message in the measured phase, by who pays them. */
  cpu: { sender: number; receiver: number; relay: number; client: number; database?: number };
  /** The measured phase on the monotonic clock (µs), and the CPU each process used in it. */
  window: { fromUs: number; toUs: number };
  cpuByProcess: { role: ServeRole | 'relay'; index: number; cpuUs: number }[];
  /** Per message, by process kind (perf stat); or why they could not be counted. */
  syscalls: Record<ServeRole | 'relay', SyscallCounts> | string;
}

export function monotonicUs(): number {
  return Number(process.hrtime.bigint() / 1000n);
}

function serve(machine: Machine, name: 'alice' | 'bob', session: string, role: ServeRole, index: number): Promise<Peer> {
  return startPeer({
    root: machine.root,
    name,
    session,
    relays: machine.relayUrl,
    command: process.execPath,
    args: [...(machine.nodeArgs?.(role, index) ?? []), machine.main, 'serve'],
    env: { INTERLINK_LOG: 'error', NODE_OPTIONS: machine.nodeOptions, ...machine.env },
  });
}

const pluginConfig = z.object({ mcpServers: z.object({ interlink: z.object({ env: z.record(z.string(), z.string()) }) }) });

/** NODE_OPTIONS as plugin/.mcp.json starts `serve` for a caller that sets none (codex/config.toml sets the same). */
export async function shippedNodeOptions(projectRoot: string): Promise<string> {
  const config = pluginConfig.parse(JSON.parse(await readFile(join(projectRoot, 'plugin', '.mcp.json'), 'utf8')));
  return (config.mcpServers.interlink.env.NODE_OPTIONS ?? '').replace('${NODE_OPTIONS:-}', '').trim();
}

/** Two identities that know each other, as after pairing: alice's sessions send, bob's receive. */
export async function twoIdentities(root: string): Promise<void> {
  await mkdir(root, { recursive: true });
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

/** Waits, with a deadline, until the sender's message_status shows the receiver's report (a receipt) on `msgId`. */
async function waitReported(sender: Peer, msgId: string): Promise<void> {
  const deadline = Date.now() + STORED_WAIT_MS;
  for (;;) {
    const status = await sender.call<{ state: string }>('message_status', { msg_id: msgId });
    if (status.state === 'receiver_stored' || status.state === 'receiver_acknowledged') return;
    if (Date.now() > deadline) throw new Error(`no receipt for message ${msgId} within ${STORED_WAIT_MS / 1000} s`);
    await new Promise((r) => setTimeout(r, 50));
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

/** Counts system calls per process kind over the measured phase, where perf can. */
function startCounting(senders: Peer[], receivers: Peer[], relayPids: readonly number[]) {
  const why = perfUnavailable();
  if (why !== undefined) return { stop: async () => why };
  const counting = {
    sender: countSyscalls(senders.map((p) => p.pid()!)),
    receiver: countSyscalls(receivers.map((p) => p.pid()!)),
    relay: countSyscalls([...relayPids]),
  };
  return { stop: async () => ({ sender: await counting.sender.stop(), receiver: await counting.receiver.stop(), relay: await counting.relay.stop() }) };
}

/** `messages`: how many the senders send in the measured phase, together (default MESSAGES). */
export async function runSessions(machine: Machine, sessions: SessionCount, prefix = `s${sessions}`, messages = MESSAGES[sessions]): Promise<PathResult> {
  const pairs = sessions / 2;
  const receivers: Peer[] = [];
  const senders: Peer[] = [];
  try {
    for (let i = 0; i < pairs; i++) {
      receivers.push(await serve(machine, 'bob', `${prefix}b${i}`, 'receiver', i));
      senders.push(await serve(machine, 'alice', `${prefix}a${i}`, 'sender', i));
    }
    await Promise.all(senders.map((s, i) => firstSend(s, `${prefix}b${i}`)));
    const sent: Sent[][] = senders.map(() => []);
    const calls: number[] = [];
    const pump = async (i: number, count: number, record: boolean): Promise<Sent[]> => {
      const warm: Sent[] = [];
      for (let n = 0; n < count; n++) {
        const at = Date.now();
        const start = performance.now();
        const receipt = await senders[i]!.call<{ msg_id: string }>('send_message', { to: 'bob', session: `${prefix}b${i}`, text: TEXT });
        if (record) {
          calls.push(performance.now() - start);
          sent[i]!.push({ msgId: receipt.msg_id, at });
        } else warm.push({ msgId: receipt.msg_id, at });
      }
      return warm;
    };
    // The measured phase starts in a steady state: every warm-up message stored and, where
    // receipts are on, a receipt read by every sender (built by every receiver). Otherwise a
    // session's first receipt — code run for the first time in 32 processes at once, a
    // second into the run — lands in the measured phase, in the sealed runs only.
    const warmUp = await Promise.all(senders.map((_, i) => pump(i, WARMUP_PER_PAIR, false)));
    await Promise.all(receivers.map((r, i) => waitStored(r, warmUp[i]!.at(-1)!)));
    if (machine.receipts !== false) await Promise.all(senders.map((s, i) => waitReported(s, warmUp[i]![0]!.msgId)));
    const perPair = Math.ceil(messages / pairs);
    const pids = [...senders.map((p, index) => ({ role: 'sender' as const, index, pid: p.pid()! })), ...receivers.map((p, index) => ({ role: 'receiver' as const, index, pid: p.pid()! })), ...machine.relayPids.map((pid, index) => ({ role: 'relay' as const, index, pid }))];
    const counting = startCounting(senders, receivers, machine.relayPids);
    const cpuBefore = pids.map((p) => cpuSeconds(p.pid));
    const databaseBefore = machine.databaseCpu?.() ?? 0;
    const clientBefore = process.cpuUsage();
    const fromUs = monotonicUs();
    await Promise.all(senders.map((_, i) => pump(i, perPair, true)));
    await Promise.all(receivers.map((r, i) => waitStored(r, sent[i]!.at(-1)!)));
    const toUs = monotonicUs();
    const client = process.cpuUsage(clientBefore);
    const databaseUs = machine.databaseCpu === undefined ? undefined : (machine.databaseCpu() - databaseBefore) * 1e6;
    const cpuByProcess = pids.map((p, i) => ({ role: p.role, index: p.index, cpuUs: (cpuSeconds(p.pid) - cpuBefore[i]!) * 1e6 }));
    const syscallTotals = await counting.stop();
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
    const n = latencies.length;
    const spentBy = (role: ServeRole | 'relay') => cpuByProcess.filter((p) => p.role === role).reduce((sum, p) => sum + p.cpuUs, 0) / n;
    const cpu = { sender: spentBy('sender'), receiver: spentBy('receiver'), relay: spentBy('relay'), client: (client.user + client.system) / n, ...(databaseUs !== undefined && { database: databaseUs / n }) };
    const perMessage = (c: SyscallCounts): SyscallCounts => ({ syncs: c.syncs / n, lockTakes: c.lockTakes / n, syscalls: c.syscalls / n, switches: c.switches / n });
    const syscalls = typeof syscallTotals === 'string' ? syscallTotals : { sender: perMessage(syscallTotals.sender), receiver: perMessage(syscallTotals.receiver), relay: perMessage(syscallTotals.relay) };
    return { sessions, messages: n, perSecond: (n * 1000) / Math.max(1, last - first), call: summarize(calls), stored: summarize(latencies), storedMs: latencies, serveRss, cpu, window: { fromUs, toUs }, cpuByProcess, syscalls };
  } finally {
    // A profiled serve writes its profile as it exits, which can take longer than the SDK
    // client's close waits before SIGKILL: ask each to stop, and wait for it to be gone.
    if (machine.nodeArgs !== undefined) await Promise.all([...senders, ...receivers].map((p) => stopAndWait(p.pid())));
    await Promise.all([...senders, ...receivers].map((p) => p.close().catch(() => undefined)));
  }
}

const EXIT_WAIT_MS = 60_000;

async function stopAndWait(pid: number | null): Promise<void> {
  if (pid === null || !processIsRunning(pid)) return;
  process.kill(pid, 'SIGTERM');
  const deadline = Date.now() + EXIT_WAIT_MS;
  while (processIsRunning(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
}

/** CPU used by idle sessions over `seconds`, after `settleSeconds`, as a share of one core, per session. */
export async function idleCpu(machine: Machine, count: number, seconds: number, settleSeconds: number): Promise<{ shares: number[]; rss: number[] }> {
  const peers: Peer[] = [];
  try {
    for (let i = 0; i < count; i++) peers.push(await serve(machine, i % 2 === 0 ? 'alice' : 'bob', `idle${i}`, i % 2 === 0 ? 'sender' : 'receiver', i));
    // Let start-up work finish before measuring: first announcements and roster fetches,
    // and the garbage collections V8 runs for half a minute after start-up, as allocation
    // slows down, to give memory back.
    await new Promise((r) => setTimeout(r, settleSeconds * 1000));
    const before = peers.map((p) => cpuSeconds(p.pid()!));
    const start = performance.now();
    await new Promise((r) => setTimeout(r, seconds * 1000));
    const elapsed = (performance.now() - start) / 1000;
    const shares = peers.map((p, i) => (cpuSeconds(p.pid()!) - before[i]!) / elapsed);
    return { shares, rss: peers.map((p) => rssBytes(p.pid()!)) };
  } finally {
    await Promise.all(peers.map((p) => p.close().catch(() => undefined)));
  }
}
