/**
 * Wake latency: from `send_message` on one session to the Stop-hook listener
 * (`interlink-mcp wait`, a real child process) exiting with the notice on the other,
 * through one relay process; beside the same path read by a listener that polls the
 * inbox every 400 ms (the original's interval), measured in the same run.
 */
import { spawn } from 'node:child_process';
import { mkdtemp } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Agent } from '../../src/agent/agent.js';
import { generateSigningKey } from '../../src/identity/ed25519.js';
import { identityFromSigningKey } from '../../src/identity/identity.js';
import { commitCursor, readInboxBatch } from '../../src/hosts/claude/inbox.js';
import { inboxSink } from '../../src/hosts/claude/sinks.js';
import { addPeer } from '../../src/peers/peers.js';
import { startRelayProcess } from './relay-process.js';
import type { BenchContext, Benchmark, Section } from './report.js';
import { formatMs, formatRatio, formatRatioAgainst, summarize } from './stats.js';

/**
 * 200 runs for the document; CI (which only checks that the benchmark runs, and writes no
 * document) runs 60, to keep `.ci/run` within its 30 minutes.
 */
const RUNS = process.env.CI === 'true' ? 60 : 200;
const POLL_MS = 400;

/** Starts the real listener and resolves once it is waiting; `exited` resolves at its exit. */
function startListener(main: string, state: string, session: string): Promise<{ exited: Promise<{ code: number | null; stderr: string }> }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [main, 'wait', '--session', session], {
      env: { ...process.env, INTERLINK_STATE_DIR: state, INTERLINK_LOG: 'debug' },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    const exited = new Promise<{ code: number | null; stderr: string }>((done) => child.once('exit', (code) => done({ code, stderr })));
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
      const before = stderr;
      stderr += chunk;
      if (!before.includes('listener_waiting') && stderr.includes('listener_waiting')) resolve({ exited });
    });
    child.once('exit', (code) => reject(new Error(`listener exited (${code}) before waiting: ${stderr}`)));
  });
}

/** The baseline: read the same inbox every POLL_MS from the same cursor. */
async function pollUntilNotice(state: string, session: string): Promise<void> {
  for (;;) {
    const batch = await readInboxBatch(state, session);
    if (batch.records.length > 0) {
      await commitCursor(state, session, batch.endOffset);
      return;
    }
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

export function wakeLatency(projectRoot: string): Benchmark {
  return {
    id: 'wake',
    async run(context: BenchContext): Promise<Section> {
      const main = join(projectRoot, 'dist', 'src', 'cli', 'main.js');
      const dir = await mkdtemp(join(context.scratch, 'wake-'));
      const relay = await startRelayProcess(projectRoot, await mkdtemp(join(context.scratch, 'wake-relay-')));
      const alice = identityFromSigningKey(generateSigningKey());
      const bob = identityFromSigningKey(generateSigningKey());
      await addPeer(join(dir, 'alice-peers.json'), 'bob', bob.key);
      await addPeer(join(dir, 'bob-peers.json'), 'alice', alice.key);
      const presence = { name: 'bench', cwd: dir, gitRoot: '', summary: '' };
      const bobState = join(dir, 'bob');
      const sender = await Agent.start({ identity: alice, session: 'a', stateDir: join(dir, 'alice'), peersPath: join(dir, 'alice-peers.json'), relayUrls: [relay.url], presence });
      const receiver = await Agent.start({ identity: bob, session: 'b', stateDir: bobState, peersPath: join(dir, 'bob-peers.json'), relayUrls: [relay.url], presence });
      receiver.startNotices(inboxSink(bobState, () => 'b'));
      await Promise.all([sender.ready(10_000), receiver.ready(10_000)]);
      const drain = async () => {
        const { messages } = await receiver.receive(100);
        if (messages.length > 0) await receiver.acknowledge(messages.map((m) => m.receipt));
      };
      const watched: number[] = [];
      const polled: number[] = [];
      try {
        for (let i = 0; i < RUNS; i++) {
          if (i % 20 === 0) context.progress(`wake: run ${i + 1} of ${RUNS}`);
          const listener = await startListener(main, bobState, 'b');
          const start = performance.now();
          await sender.send({ to: 'bob', session: 'b', text: `wake ${i}`, status: 'needs_input' });
          const { code, stderr } = await listener.exited;
          if (code !== 2 || !stderr.includes('notification_id')) throw new Error(`listener ended with ${code}: ${stderr}`);
          watched.push(performance.now() - start);
          await drain();

          const pollStart = performance.now();
          await sender.send({ to: 'bob', session: 'b', text: `poll ${i}`, status: 'needs_input' });
          await pollUntilNotice(bobState, 'b');
          polled.push(performance.now() - pollStart);
          await drain();
        }
      } finally {
        await Promise.all([sender.close(), receiver.close()]);
        await relay.stop();
      }
      const w = summarize(watched);
      const p = summarize(polled);
      return {
        title: 'Wake latency: send_message to the listener handing over the notice',
        measures: `From the sender's send operation to the Stop-hook listener (\`interlink-mcp wait\`, a child process already waiting) exiting 2 with the notice, through a durable relay in its own process: ${RUNS} runs. Each run's message is acknowledged before the next, so every message gets a fresh notice. Baseline, alternating with it: the same path read by a listener that polls the inbox every ${POLL_MS} ms, as the original does.`,
        tables: [
          {
            headers: ['Listener:', 'Runs', 'Median ms', 'p90', 'p99', 'max'],
            rows: [
              ['watches the inbox (this project)', String(w.count), formatMs(w.median), formatMs(w.p90), formatMs(w.p99), formatMs(w.max)],
              [`polls every ${POLL_MS} ms (baseline)`, String(p.count), formatMs(p.median), formatMs(p.p90), formatMs(p.p99), formatMs(p.max)],
            ],
          },
        ],
        checks: [
          { target: 'Wake latency p99 under 100 ms', actual: `${formatMs(w.p99)} ms`, pass: w.p99 < 100 },
          { target: 'at least 4× better than the 400 ms poll baseline (p99)', actual: formatRatioAgainst(p.p99 / w.p99, 4), pass: p.p99 / w.p99 >= 4 },
        ],
        notes: [],
      };
    },
  };
}
