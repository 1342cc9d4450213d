/**
 * End to end: from `send_message` (the agent operation the MCP tool calls) on one
 * session to `receiver_stored` (the verified body committed in the receiver's mailbox)
 * on another, through one relay process, for 1 and for 32 concurrent session pairs; the
 * same through a relay without --db, so the cost of a durable relay is a ratio.
 */
import { mkdtemp } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Agent } from '../../src/agent/agent.js';
import { generateSigningKey } from '../../src/identity/ed25519.js';
import { identityFromSigningKey } from '../../src/identity/identity.js';
import { addPeer } from '../../src/peers/peers.js';
import { startRelayProcess } from './relay-process.js';
import type { BenchContext, Benchmark, Section } from './report.js';
import { randomText } from './records.js';
import { formatCount, formatMs, formatRatio, summarize, type Summary } from './stats.js';

const WINDOW = 1;
const WARMUP_PER_SESSION = 10;
const MESSAGES_TOTAL = { 1: 600, 32: 3_200 } as const;
const TEXT = randomText(512);

export interface RunResult {
  sessions: number;
  messages: number;
  perSecond: number;
  latency: Summary;
}

/** `sessions` sender/receiver pairs in this process; `total` messages across them after the warm-up. */
export async function runPairs(context: BenchContext, relayUrl: string, sessions: number, label: string, total: number = MESSAGES_TOTAL[sessions === 1 ? 1 : 32]): Promise<RunResult> {
  const dir = await mkdtemp(join(context.scratch, `e2e-${label}-${sessions}-`));
  const alice = identityFromSigningKey(generateSigningKey());
  const bob = identityFromSigningKey(generateSigningKey());
  const alicePeers = join(dir, 'alice-peers.json');
  const bobPeers = join(dir, 'bob-peers.json');
  await addPeer(alicePeers, 'bob', bob.key);
  await addPeer(bobPeers, 'alice', alice.key);
  const storedAt = new Map<string, number>();
  const waiters = new Map<string, () => void>();
  const presence = { name: 'bench', cwd: dir, gitRoot: '', summary: '' };
  const senders: Agent[] = [];
  const receivers: Agent[] = [];
  for (let i = 0; i < sessions; i++) {
    receivers.push(
      await Agent.start({
        identity: bob,
        session: `b${i}`,
        stateDir: join(dir, 'bob'),
        peersPath: bobPeers,
        relayUrls: [relayUrl],
        presence,
        onStored: (record) => {
          storedAt.set(record.envelope.msg_id, performance.now());
          waiters.get(record.envelope.msg_id)?.();
        },
      }),
    );
    senders.push(await Agent.start({ identity: alice, session: `a${i}`, stateDir: join(dir, 'alice'), peersPath: alicePeers, relayUrls: [relayUrl], presence }));
  }
  await Promise.all([...senders, ...receivers].map((a) => a.ready(10_000)));

  const stored = (msgId: string) =>
    new Promise<void>((resolve) => {
      if (storedAt.has(msgId)) return resolve();
      waiters.set(msgId, resolve);
    });
  const latencies: number[] = [];
  const pump = async (i: number, count: number, record: boolean) => {
    let next = 0;
    const lane = async () => {
      while (next < count) {
        next++;
        const start = performance.now();
        const receipt = await senders[i]!.send({ to: 'bob', session: `b${i}`, text: TEXT });
        await stored(receipt.msg_id);
        if (record) latencies.push(storedAt.get(receipt.msg_id)! - start);
      }
    };
    await Promise.all(Array.from({ length: WINDOW }, lane));
  };
  await Promise.all(senders.map((_, i) => pump(i, WARMUP_PER_SESSION, false)));
  const perSession = Math.ceil(total / sessions);
  const start = performance.now();
  await Promise.all(senders.map((_, i) => pump(i, perSession, true)));
  const elapsed = performance.now() - start;
  await Promise.all([...senders, ...receivers].map((a) => a.close()));
  return { sessions, messages: latencies.length, perSecond: (latencies.length * 1000) / elapsed, latency: summarize(latencies) };
}

export function endToEnd(projectRoot: string): Benchmark {
  return {
    id: 'end-to-end',
    async run(context: BenchContext): Promise<Section> {
      const results: { mode: string; run: RunResult }[] = [];
      for (const mode of ['durable', 'in memory'] as const) {
        const db = mode === 'durable' ? await mkdtemp(join(context.scratch, 'relay-db-')) : undefined;
        const relay = await startRelayProcess(projectRoot, db);
        try {
          for (const sessions of [1, 32] as const) {
            context.progress(`end to end: ${mode} relay, ${sessions} session pair(s)`);
            results.push({ mode, run: await runPairs(context, relay.url, sessions, mode === 'durable' ? 'db' : 'mem') });
          }
        } finally {
          await relay.stop();
        }
      }
      const find = (mode: string, sessions: number) => results.find((r) => r.mode === mode && r.run.sessions === sessions)!.run;
      const durable32 = find('durable', 32);
      return {
        title: 'End to end: send_message to receiver_stored',
        measures: [
          `The time from calling the agent's send operation (what the \`send_message\` tool runs: route, sign, commit to the durable outbox) to the receiver's mailbox commit of the verified message (\`receiver_stored\`), through one relay in its own process on 127.0.0.1.`,
          `Each pair of sessions (alice → bob) keeps ${WINDOW} messages in flight; ${MESSAGES_TOTAL[1]} messages for one pair, ${MESSAGES_TOTAL[32]} across 32 pairs, after ${WARMUP_PER_SESSION} warm-up messages per pair. Texts are 512 characters.`,
          'All sessions run in the benchmark process (so the MCP stdio hop, about 1 ms per call measured elsewhere, is not included); every store is durable (outbox, mailbox and, with --db, the relay each fsync). The baseline is the same relay without --db.',
        ].join(' '),
        tables: [
          {
            headers: ['Relay:', 'Session pairs', 'Messages', 'Messages/s', 'Latency median ms', 'p90', 'p99', 'max'],
            rows: results.map(({ mode, run }) => [
              mode,
              String(run.sessions),
              formatCount(run.messages),
              formatCount(Math.round(run.perSecond)),
              formatMs(run.latency.median),
              formatMs(run.latency.p90),
              formatMs(run.latency.p99),
              formatMs(run.latency.max),
            ]),
          },
          {
            caption: 'Cost of a durable relay',
            headers: ['Session pairs', 'Throughput durable / in memory', 'Median latency durable / in memory'],
            rows: [1, 32].map((n) => [String(n), formatRatio(find('durable', n).perSecond / find('in memory', n).perSecond), formatRatio(find('durable', n).latency.median / find('in memory', n).latency.median)]),
          },
        ],
        checks: [
          { target: '≥ 1,000 messages/s end to end with 32 concurrent sessions through one durable relay', actual: `${formatCount(Math.round(durable32.perSecond))}/s`, pass: durable32.perSecond >= 1000 },
          { target: 'p99 send → receiver_stored under 50 ms with 32 sessions, durable relay', actual: `${formatMs(durable32.latency.p99)} ms`, pass: durable32.latency.p99 < 50 },
        ],
        notes: ['MCP Agent Mail publishes 8.4 sends/s (mean 118.6 ms) for its send_message.'],
      };
    },
  };
}
