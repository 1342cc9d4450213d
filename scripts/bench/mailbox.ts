/**
 * Commit latency of the mailbox against its size, beside SQLite on the same disk (when
 * better-sqlite3 is installed: see sqlite.ts; without it the baseline is reported skipped).
 *
 * Each size gets a fresh mailbox and a fresh database holding the same records. Then
 * COMMITS single commits are timed on each, in alternating rounds so a slow patch of the
 * disk hits both. The mailbox is opened with limits (and one sender's share of them) above size + COMMITS, so no commit is
 * refused or evicts anything: every timed commit adds one record.
 */
import { mkdtemp, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Envelope } from '../../src/envelope/envelope.js';
import { compact, loadJournaled } from '../../src/store/journal.js';
import { Mailbox, mailboxFormat } from '../../src/mailbox/mailbox.js';
import type { Limits } from '../../src/mailbox/rules.js';
import { installSyncProbe, syncCounts, syncsSince } from './disk.js';
import type { BenchContext, Benchmark, Check, Section } from './report.js';
import { makeEnvelopes, newCorrespondents, RECORD_BYTES } from './records.js';
import { loadSqlite, SQLITE_MISSING, type SqliteBaseline } from './sqlite.js';
import { formatMs, formatRatio, summarize, timeAsync, timeSync, type Summary } from './stats.js';

const SIZES = [1, 10, 100, 1000, 4096] as const;
const COMMITS = 200;
/** Short alternating rounds: a slow patch of a shared disk then hits both stores alike. */
const ROUNDS = 20;
const WARMUP_COMMITS = 50;
const MAX_GROWTH_RATIO = 3;
const MAX_SQLITE_RATIO = 3;

interface SizeResult {
  size: number;
  mailbox: Summary;
  /** Time inside fsync/fdatasync per mailbox commit. */
  sync: Summary;
  /** The SQLite baseline; undefined when better-sqlite3 is not installed. */
  sqlite: SqliteResult | undefined;
  /** Commits during which the mailbox also compacted. */
  compactions: number;
  compactionMs: number;
  /** Commits between compactions at this size, given the compaction rule. */
  compactionInterval: number;
}

interface SqliteResult {
  commits: Summary;
  /** WAL frames the timed SQLite inserts wrote after the pre-fill's checkpoint. */
  walFrames: number;
}

/** Stores everything at once: the mailbox groups concurrent calls into shared commits. */
export async function prefill(mailbox: Mailbox, envelopes: readonly Envelope[]): Promise<void> {
  const outcomes = await Promise.all(envelopes.map((e) => mailbox.store(e)));
  if (outcomes.some((o) => o.outcome !== 'stored')) throw new Error('mailbox benchmark: pre-fill was refused');
}

export async function timedStore(mailbox: Mailbox, envelope: Envelope): Promise<number> {
  let outcome = '';
  const ms = await timeAsync(async () => {
    outcome = (await mailbox.store(envelope)).outcome;
  });
  if (outcome !== 'stored') throw new Error(`mailbox benchmark: a timed commit came back ${outcome}`);
  return ms;
}

async function warmUp(dir: string, envelopes: readonly Envelope[], sqlite: SqliteBaseline | undefined): Promise<void> {
  const mailbox = await Mailbox.open(join(dir, 'warmup.json'), { limits: { maxRecords: envelopes.length + 1, maxBytes: 1 << 30, senderRecords: envelopes.length + 1, senderBytes: 1 << 30 } });
  const db = sqlite?.open(join(dir, 'warmup.db'));
  for (const envelope of envelopes) {
    await timedStore(mailbox, envelope);
    db?.insert(envelope);
  }
  db?.close();
}

/** A compaction rewrites the snapshot; it happens once the journal outgrows max(1 MiB, snapshot). */
async function timeCompaction(path: string, limits: Limits, lineBytes: number): Promise<{ ms: number; interval: number }> {
  const format = mailboxFormat(limits);
  const loaded = await loadJournaled(path, format, true);
  const ms = await timeAsync(() => compact(path, format, loaded.state, loaded.cursor.generation + 1));
  const snapshotBytes = (await stat(path)).size;
  return { ms, interval: Math.ceil(Math.max(1024 * 1024, snapshotBytes) / lineBytes) };
}

async function measureSize(context: BenchContext, size: number, pool: readonly Envelope[], sqlite: SqliteBaseline | undefined): Promise<SizeResult> {
  const dir = await mkdtemp(join(context.scratch, `mailbox-${size}-`));
  const path = join(dir, 'inbox.json');
  const limits: Limits = { maxRecords: size + COMMITS + 1, maxBytes: 1 << 30, senderRecords: size + COMMITS + 1, senderBytes: 1 << 30 };
  const mailbox = await Mailbox.open(path, { limits });
  const db = sqlite?.open(join(dir, 'records.db'));
  await prefill(mailbox, pool.slice(0, size));
  db?.prefill(pool.slice(0, size));

  const timed = pool.slice(size, size + COMMITS);
  const perRound = COMMITS / ROUNDS;
  const mailboxMs: number[] = [];
  const syncMs: number[] = [];
  const sqliteMs: number[] = [];
  let compactions = 0;
  for (let round = 0; round < ROUNDS; round++) {
    const batch = timed.slice(round * perRound, (round + 1) * perRound);
    for (const envelope of batch) {
      const before = syncCounts();
      mailboxMs.push(await timedStore(mailbox, envelope));
      const syncs = syncsSince(before);
      syncMs.push(syncs.ms);
      if (syncs.syncs > 0) compactions++;
    }
    if (db !== undefined) for (const envelope of batch) sqliteMs.push(timeSync(() => db.insert(envelope)));
  }

  const records = (await mailbox.stats()).records;
  const rows = db?.count() ?? size + COMMITS;
  if (records !== size + COMMITS || rows !== size + COMMITS) throw new Error(`mailbox benchmark: expected ${size + COMMITS} records, found ${records} (SQLite ${rows})`);
  const walFrames = db?.walFrames();
  db?.close();
  const lineBytes = Buffer.byteLength(JSON.stringify({ op: 'store', at: Date.now(), envelope: timed[0] })) + 1;
  const compaction = await timeCompaction(path, limits, lineBytes);
  return {
    size,
    mailbox: summarize(mailboxMs),
    sync: summarize(syncMs),
    sqlite: walFrames === undefined ? undefined : { commits: summarize(sqliteMs), walFrames },
    compactions,
    compactionMs: compaction.ms,
    compactionInterval: compaction.interval,
  };
}

function resultAt(results: readonly SizeResult[], size: number): SizeResult {
  const found = results.find((r) => r.size === size);
  if (found === undefined) throw new Error(`mailbox benchmark: no result for size ${size}`);
  return found;
}

function checks(results: readonly SizeResult[]): Check[] {
  const small = resultAt(results, 10);
  const large = resultAt(results, 4096);
  const growth = large.mailbox.median / small.mailbox.median;
  return [
    {
      target: `Mailbox commit median at 4,096 records ≤ ${MAX_GROWTH_RATIO}× its median at 10`,
      actual: `${formatMs(large.mailbox.median)} ms vs ${formatMs(small.mailbox.median)} ms = ${formatRatio(growth)}`,
      pass: growth <= MAX_GROWTH_RATIO,
    },
    sqliteCheck(large),
  ];
}

function sqliteCheck(large: SizeResult): Check {
  const target = `Mailbox commit median at 4,096 records ≤ ${MAX_SQLITE_RATIO}× SQLite (WAL, synchronous=FULL) median at 4,096`;
  if (large.sqlite === undefined) return { target, actual: `skipped: ${SQLITE_MISSING}`, pass: 'skipped' };
  const sqliteMedian = large.sqlite.commits.median;
  const ratio = large.mailbox.median / sqliteMedian;
  return { target, actual: `${formatMs(large.mailbox.median)} ms vs ${formatMs(sqliteMedian)} ms = ${formatRatio(ratio)}`, pass: ratio <= MAX_SQLITE_RATIO };
}

/** The SQLite cells of a row: measured, or `skipped` in each when better-sqlite3 is missing. */
function sqliteCells(r: SizeResult, mailboxMedian: number): string[] {
  if (r.sqlite === undefined) return ['skipped', 'skipped', 'skipped', 'skipped'];
  const { commits } = r.sqlite;
  return [formatMs(commits.median), formatMs(commits.p90), formatMs(commits.p99), formatRatio(mailboxMedian / commits.median)];
}

function baselineText(sqlite: SqliteBaseline | undefined): string {
  if (sqlite === undefined) return `The SQLite baseline was skipped in this run: ${SQLITE_MISSING}.`;
  return `Beside it, on the same disk and with the same records: better-sqlite3 with \`journal_mode=WAL\`, \`synchronous=FULL\`, a table \`(id TEXT PRIMARY KEY, body TEXT)\`, one \`INSERT\` per transaction. The two are timed in ${ROUNDS} alternating rounds of ${COMMITS / ROUNDS}.`;
}

export const mailboxCommit: Benchmark = {
  id: 'mailbox',
  async run(context): Promise<Section> {
    const dir = context.scratch;
    await installSyncProbe(dir);
    const sqlite = await loadSqlite();
    if (sqlite === undefined) context.progress(`mailbox: SQLite baseline skipped: ${SQLITE_MISSING}`);
    context.progress('mailbox: signing records');
    const who = newCorrespondents();
    const pool = makeEnvelopes(who, Math.max(...SIZES) + COMMITS + WARMUP_COMMITS);
    await warmUp(dir, pool.slice(-WARMUP_COMMITS), sqlite);
    const results: SizeResult[] = [];
    for (const size of SIZES) {
      context.progress(`mailbox: ${size} records`);
      results.push(await measureSize(context, size, pool, sqlite));
    }
    const base = resultAt(results, 10).mailbox.median;
    return {
      title: 'Mailbox commit latency',
      measures: [
        `The time from \`store()\` to its promise resolving, for ${COMMITS} sequential commits (each awaited) of one ${RECORD_BYTES}-byte signed envelope, starting from a fresh mailbox pre-filled with the given number of records (it grows by ${COMMITS} during the measurement).`,
        'A mailbox commit takes the sidecar lock, reads any journal tail other processes appended, applies the op in memory, appends one JSON line to the journal, fdatasyncs it and releases the lock.',
        baselineText(sqlite),
        '"fsync" is the time spent inside FileHandle.sync/datasync during the commit (counted by wrapping them in the benchmark process).',
      ].join(' '),
      tables: [
        {
          headers: [
            'Records at start',
            'Mailbox median ms',
            'p90',
            'p99',
            'of which fsync (median)',
            'vs 10 records',
            'SQLite median ms',
            'p90',
            'p99',
            'Mailbox / SQLite',
          ],
          rows: results.map((r) => [
            r.size.toLocaleString('en-US'),
            formatMs(r.mailbox.median),
            formatMs(r.mailbox.p90),
            formatMs(r.mailbox.p99),
            formatMs(r.sync.median),
            formatRatio(r.mailbox.median / base),
            ...sqliteCells(r, r.mailbox.median),
          ]),
        },
        {
          caption:
            'Periodic maintenance. The mailbox compacts (folds the journal into a new snapshot) once the journal outgrows max(1 MiB, snapshot); one compaction was timed after the commits above. SQLite checkpoints once its WAL reaches 1,000 pages.',
          headers: ['Records', 'Mailbox compactions in the timed commits', 'One compaction ms', 'Commits between compactions', 'Amortized ms per commit', 'SQLite WAL frames from the timed inserts'],
          rows: results.map((r) => [
            (r.size + COMMITS).toLocaleString('en-US'),
            String(r.compactions),
            formatMs(r.compactionMs),
            r.compactionInterval.toLocaleString('en-US'),
            formatMs(r.compactionMs / r.compactionInterval),
            r.sqlite?.walFrames.toLocaleString('en-US') ?? 'skipped',
          ]),
        },
      ],
      checks: checks(results),
      notes: [
        'Disk latency on a shared VM changes from minute to minute (a row where both medians jump together is such a patch); compare the ratio columns rather than absolute times across runs.',
        'When the maintenance columns show no compaction and fewer than 1,000 WAL frames, the medians above compare steady-state commits on both sides; maintenance is an amortized cost on top of either.',
      ],
    };
  },
};
