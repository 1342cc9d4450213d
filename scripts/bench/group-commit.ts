/**
 * Group commit: with many store() calls in flight, one process's commits share appends
 * and fdatasyncs, so throughput rises far above 1 / (single commit latency).
 */
import { mkdtemp } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Envelope } from '../../src/envelope/envelope.js';
import { Mailbox } from '../../src/mailbox/mailbox.js';
import { installSyncProbe, syncCounts, syncsSince } from './disk.js';
import { prefill, timedStore } from './mailbox.js';
import type { BenchContext, Benchmark, Section } from './report.js';
import { makeEnvelopes, newCorrespondents, RECORD_BYTES } from './records.js';
import { formatCount, formatMs, formatRatio, summarize, type Summary } from './stats.js';

const IN_FLIGHT = 32;
const PER_WORKER = 100;
const START_RECORDS = 100;
const SEQUENTIAL_COMMITS = 200;
const ROUNDS = 3;

interface RoundResult {
  sequentialPerSecond: number;
  concurrentPerSecond: number;
  commitsPerDatasync: number;
  compactionSyncs: number;
  latency: Summary;
}

async function runRound(context: BenchContext, round: number, pool: readonly Envelope[]): Promise<RoundResult> {
  const dir = await mkdtemp(join(context.scratch, `group-${round}-`));
  const total = START_RECORDS + SEQUENTIAL_COMMITS + IN_FLIGHT * PER_WORKER;
  const mailbox = await Mailbox.open(join(dir, 'inbox.json'), { limits: { maxRecords: total + 1, maxBytes: 1 << 30, senderRecords: total + 1, senderBytes: 1 << 30 } });
  await prefill(mailbox, pool.slice(0, START_RECORDS));

  const sequential = pool.slice(START_RECORDS, START_RECORDS + SEQUENTIAL_COMMITS);
  const sequentialStart = performance.now();
  for (const envelope of sequential) await timedStore(mailbox, envelope);
  const sequentialPerSecond = (SEQUENTIAL_COMMITS * 1000) / (performance.now() - sequentialStart);

  const concurrent = pool.slice(START_RECORDS + SEQUENTIAL_COMMITS, total);
  const latencies: number[] = [];
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < concurrent.length) latencies.push(await timedStore(mailbox, concurrent[next++]!));
  };
  const before = syncCounts();
  const start = performance.now();
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  const seconds = (performance.now() - start) / 1000;
  const syncs = syncsSince(before);
  return {
    sequentialPerSecond,
    concurrentPerSecond: concurrent.length / seconds,
    commitsPerDatasync: concurrent.length / syncs.datasyncs,
    compactionSyncs: syncs.syncs,
    latency: summarize(latencies),
  };
}

export const groupCommit: Benchmark = {
  id: 'group-commit',
  async run(context): Promise<Section> {
    await installSyncProbe(context.scratch);
    context.progress('group commit: signing records');
    const pool = makeEnvelopes(newCorrespondents(), START_RECORDS + SEQUENTIAL_COMMITS + IN_FLIGHT * PER_WORKER);
    const rounds: RoundResult[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      context.progress(`group commit: round ${round + 1} of ${ROUNDS}`);
      rounds.push(await runRound(context, round, pool));
    }
    const rows = rounds.map((r, i) => [
      String(i + 1),
      formatCount(r.sequentialPerSecond),
      formatCount(r.concurrentPerSecond),
      formatRatio(r.concurrentPerSecond / r.sequentialPerSecond),
      r.commitsPerDatasync.toFixed(1),
      String(r.compactionSyncs),
      formatMs(r.latency.median),
      formatMs(r.latency.p90),
      formatMs(r.latency.p99),
    ]);
    const median = (pick: (r: RoundResult) => number) => summarize(rounds.map(pick)).median;
    rows.push([
      'median',
      formatCount(median((r) => r.sequentialPerSecond)),
      formatCount(median((r) => r.concurrentPerSecond)),
      formatRatio(median((r) => r.concurrentPerSecond / r.sequentialPerSecond)),
      median((r) => r.commitsPerDatasync).toFixed(1),
      '',
      formatMs(median((r) => r.latency.median)),
      formatMs(median((r) => r.latency.p90)),
      formatMs(median((r) => r.latency.p99)),
    ]);
    return {
      title: 'Mailbox group commit',
      measures: [
        `${IN_FLIGHT} \`store()\` calls kept in flight from one process (${IN_FLIGHT} workers, each awaiting its commit and then starting the next) until ${formatCount(IN_FLIGHT * PER_WORKER)} ${RECORD_BYTES}-byte envelopes are stored, in a fresh mailbox pre-filled with ${START_RECORDS} records.`,
        `"Sequential" is ${SEQUENTIAL_COMMITS} awaited one-at-a-time commits on the same mailbox just before. "Commits per fdatasync" counts the journal appends actually synced (FileHandle.datasync calls); compactions (each fsyncs a new snapshot, a new journal and their directory) happen as the mailbox grows; their fsyncs are counted separately and their time is included.`,
        `Latency is each caller's wait under that load. ${ROUNDS} rounds, each on a new mailbox.`,
      ].join(' '),
      tables: [
        {
          headers: ['Round:', 'Sequential commits/s', `${IN_FLIGHT} in flight commits/s`, 'Speed-up', 'Commits per fdatasync', 'Compaction fsyncs', 'Latency median ms', 'p90', 'p99'],
          rows,
        },
      ],
      checks: [],
      notes: [],
    };
  },
};
