/**
 * `npm run capacity -- --sessions N --rate R …` (options.ts): how many sessions one relay
 * carries, measured. Simulated sessions (session.ts), spread over worker processes
 * (worker.ts) so that no one generator process is the bottleneck, go through four
 * phases while the relay's /proc figures are read between them:
 *
 *   ramp     every session connects, proves its route and announces, at a bounded rate
 *   idle     nothing but heartbeats and renewed announcements: the relay's idle cost
 *   roster   every (sampled) session looks for its pair on the roster (findable.ts)
 *   traffic  R of the sessions send a message a second to their pair, answered with
 *            receipts; then the run waits for the last deliveries (the drain)
 *
 * Bounded: a total deadline, and every worker and the relay it started are reaped on
 * exit, on error, on the deadline and on SIGINT or SIGTERM.
 */
import { dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { messageOf } from '../../src/errors.js';
import { closeAllPgClusters } from '../../test/helpers/postgres.js';
import { commitsBetween, readCommits } from './commits.js';
import { parseOptions, USAGE, type Options } from './options.js';
import { chosen, splitSessions } from './plan.js';
import { loadRelays, sampleRelay, type DatabaseSample, type LoadedRelay, type RelaySample, type Relays } from './relays.js';
import { addCounts, latency, mergeRoster, mergeTraffic, renderText, type CapacityReport, type DatabaseFigures, type RelayFigures } from './report.js';
import { WorkerPool } from './workers.js';

const HERE = dirname(fileURLToPath(import.meta.url));
/** dist/scripts/capacity → the project root. */
const PROJECT_ROOT = resolve(HERE, '..', '..', '..');
const WORKER = join(HERE, 'worker.js');
const PROGRESS_EVERY_MS = 5_000;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const seconds = (from: number, to: number) => (to - from) / 1000;

function say(text: string): void {
  process.stderr.write(`capacity: ${text}\n`);
}

/** What every relay used between two samples, summed; null when some relay's /proc cannot be read. */
function spent(before: readonly RelaySample[], after: readonly RelaySample[], field: 'cpuSeconds' | 'writtenBytes' = 'cpuSeconds'): number | null {
  let total = 0;
  for (const [i, a] of after.entries()) {
    const b = before[i]?.[field];
    const value = a[field];
    if (value === undefined || b === undefined) return null;
    total += value - b;
  }
  return total;
}

function sum(samples: readonly RelaySample[], field: 'rssBytes' | 'peakRssBytes'): number | null {
  let total = 0;
  for (const s of samples) {
    const value = s[field];
    if (value === undefined) return null;
    total += value;
  }
  return total;
}

const rate = (amount: number | null, over: number) => (amount === null || over <= 0 ? null : Math.round(amount / over));
const perMs = (cpuSeconds: number | null, n: number) => (cpuSeconds === null || n === 0 ? null : Math.round((cpuSeconds * 1e6) / n) / 1000);

/** The database's CPU and WAL over the idle window and the traffic window (`--postgres-cluster`), or null. */
function databaseFigures(afterRamp: DatabaseSample | undefined, afterIdle: DatabaseSample | undefined, afterRoster: DatabaseSample | undefined, atEnd: DatabaseSample | undefined, idleSeconds: number, trafficSeconds: number, delivered: number): DatabaseFigures | null {
  if (afterRamp === undefined || afterIdle === undefined || afterRoster === undefined || atEnd === undefined) return null;
  const cpu = (a: DatabaseSample, b: DatabaseSample) => (a.cpuSeconds === undefined || b.cpuSeconds === undefined ? null : b.cpuSeconds - a.cpuSeconds);
  const idleCpu = cpu(afterRamp, afterIdle);
  return {
    idle_cpu_percent: idleCpu === null || idleSeconds <= 0 ? null : Math.round((idleCpu / idleSeconds) * 1000) / 10,
    idle_wal_bytes_per_second: rate(afterIdle.walBytes - afterRamp.walBytes, idleSeconds),
    traffic_cpu_ms_per_message: perMs(cpu(afterRoster, atEnd), delivered),
    traffic_wal_bytes_per_second: rate(atEnd.walBytes - afterRoster.walBytes, trafficSeconds),
  };
}

/** Prints each worker's connected count now and then while the ramp lasts. */
function rampProgress(sessions: number, workers: number): (worker: number, connected: number) => void {
  const counts = new Array<number>(workers).fill(0);
  let last = 0;
  return (worker, connected) => {
    counts[worker] = connected;
    const now = performance.now();
    if (now - last < PROGRESS_EVERY_MS) return;
    last = now;
    say(`${counts.reduce((a, b) => a + b, 0)} of ${sessions} sessions connected`);
  };
}

async function measure(options: Options, relays: Relays, pool: WorkerPool): Promise<CapacityReport> {
  const loaded: LoadedRelay[] = relays.relays;
  const sample = () => loaded.map(sampleRelay);
  const started = performance.now();
  const blocks = splitSessions(options.sessions, options.workers);
  const atStart = sample();
  const database = relays.database;
  const databaseAt = () => (database === undefined ? Promise.resolve(undefined) : database());
  blocks.forEach((block, i) => {
    pool.send(i, { type: 'plan', relays: loaded.map((r) => r.pinned), first: block.first, count: block.count, rate: options.rate, rampPerSecond: options.rampPerSecond / options.workers, rosterSample: options.rosterSample });
  });
  const ramped = await pool.collect('ramped');
  const rampEnd = performance.now();
  const afterRamp = sample();
  const databaseAfterRamp = await databaseAt();
  const connected = ramped.reduce((n, r) => n + r.connected, 0);
  say(`${connected} of ${options.sessions} sessions connected in ${seconds(started, rampEnd).toFixed(1)} s; idle for ${options.idleMs / 1000} s`);
  await sleep(options.idleMs);
  const idleEnd = performance.now();
  const afterIdle = sample();
  const databaseAfterIdle = await databaseAt();
  say('each session looks for its pair on the roster');
  pool.sendAll({ type: 'roster' });
  const roster = mergeRoster((await pool.collect('rostered')).map((r) => r.result));
  const rosterEnd = performance.now();
  const afterRoster = sample();
  const databaseAfterRoster = await databaseAt();
  say(`${roster.found} of ${roster.checked} found their pair (${roster.foundFirst} at the first request); sending for ${options.durationMs / 1000} s`);
  const commitsBefore = await Promise.all(loaded.map((r) => readCommits(r.metricsUrl)));
  pool.sendAll({ type: 'traffic', durationMs: options.durationMs, drainMs: options.drainMs });
  const reports = await pool.collect('report');
  const trafficEnd = performance.now();
  const atEnd = sample();
  const databaseAtEnd = await databaseAt();
  const commits = (await Promise.all(loaded.map((r) => readCommits(r.metricsUrl)))).map((after, i) => commitsBetween(commitsBefore[i], after));
  const traffic = mergeTraffic(reports.map((r) => r.result));

  const idleCpu = spent(afterRamp, afterIdle);
  const idleSeconds = seconds(rampEnd, idleEnd);
  const trafficCpu = spent(afterRoster, atEnd);
  const trafficSeconds = seconds(rosterEnd, trafficEnd);
  const rosterCpu = spent(afterIdle, afterRoster);
  const marginal = trafficCpu === null || idleCpu === null || idleSeconds <= 0 ? null : trafficCpu - (idleCpu / idleSeconds) * trafficSeconds;
  const figures: RelayFigures[] = loaded.map((relay, i) => {
    const one = (before: RelaySample[], after: RelaySample[]) => spent([before[i]!], [after[i]!]);
    return {
      url: relay.url,
      own: relay.own,
      pid: relay.pid ?? null,
      rss_after_ramp_bytes: afterRamp[i]!.rssBytes ?? null,
      rss_peak_bytes: atEnd[i]!.peakRssBytes ?? null,
      rss_end_bytes: atEnd[i]!.rssBytes ?? null,
      cpu_seconds: { ramp: one(atStart, afterRamp), idle: one(afterRamp, afterIdle), roster: one(afterIdle, afterRoster), traffic: one(afterRoster, atEnd) },
      commits: commits[i] ?? null,
    };
  });
  const { acceptToDeliver, sendToAccept, deliveredFirst, receiptsSent, receiptsAccepted, receiptsDelivered, receipted, ...messages } = traffic;
  const troubles: CapacityReport['troubles'] = { ramp: {}, all: {} };
  for (const r of ramped) addCounts(troubles.ramp, r.troubles);
  for (const r of reports) addCounts(troubles.all, r.troubles);
  let senders = 0;
  for (let i = 0; i < options.sessions; i++) if (chosen(i, options.rate)) senders++;
  return {
    sessions: options.sessions,
    workers: options.workers,
    rate: options.rate,
    senders,
    store: options.relays.length > 0 ? 'given relays' : options.postgresCluster > 0 ? `${options.postgresCluster} relays on postgres, primary + synchronous standby` : options.store !== undefined ? 'postgres' : 'db',
    connected,
    connect_failed: ramped.reduce((n, r) => n + r.failed, 0),
    connected_at_end: reports.reduce((n, r) => n + r.connected, 0),
    disconnects: reports.reduce((n, r) => n + r.disconnects, 0),
    troubles,
    ramp: { seconds: seconds(started, rampEnd), target_per_second: options.rampPerSecond },
    roster: { ...roster, seconds: seconds(idleEnd, rosterEnd), relay_cpu_ms_per_request: perMs(rosterCpu, roster.requests) },
    messages,
    receipts: { sent: receiptsSent, accepted: receiptsAccepted, delivered: receiptsDelivered, messages_receipted: receipted },
    latency_ms: { accept_to_deliver: latency(acceptToDeliver), send_to_accept: latency(sendToAccept), delivered_before_accepted: deliveredFirst },
    relay: {
      rss_start_bytes: sum(atStart, 'rssBytes'),
      rss_after_ramp_bytes: sum(afterRamp, 'rssBytes'),
      rss_peak_bytes: sum(atEnd, 'peakRssBytes'),
      rss_end_bytes: sum(atEnd, 'rssBytes'),
      idle_seconds: idleSeconds,
      idle_cpu_percent: idleCpu === null || idleSeconds <= 0 ? null : Math.round((idleCpu / idleSeconds) * 1000) / 10,
      idle_written_bytes_per_second: rate(spent(afterRamp, afterIdle, 'writtenBytes'), idleSeconds),
      traffic_written_bytes_per_second: rate(spent(afterRoster, atEnd, 'writtenBytes'), trafficSeconds),
      traffic_seconds: trafficSeconds,
      traffic_cpu_seconds: trafficCpu,
      cpu_ms_per_message: perMs(trafficCpu, traffic.delivered),
      marginal_cpu_ms_per_message: perMs(marginal, traffic.delivered),
      commits: commits.length === 1 ? commits[0]! : null,
    },
    relays: figures,
    database: databaseFigures(databaseAfterRamp, databaseAfterIdle, databaseAfterRoster, databaseAtEnd, idleSeconds, trafficSeconds, traffic.delivered),
    seconds: seconds(started, performance.now()),
  };
}

async function main(): Promise<number> {
  let options: Options | 'help';
  try {
    options = parseOptions(process.argv.slice(2));
  } catch (err) {
    // A UsageError, or node's own for an unknown option or a missing value.
    process.stderr.write(`${messageOf(err)}\n${USAGE}\n`);
    return 64;
  }
  if (options === 'help') {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const opts = options;
  let relays: Relays | undefined;
  let pool: WorkerPool | undefined;
  let cleaning: Promise<void> | undefined;
  const cleanup = () => (cleaning ??= (async () => {
    await pool?.reap();
    await relays?.stop();
    // A cluster of --postgres-cluster interrupted while it started, before its relays were handed over.
    await closeAllPgClusters();
  })());
  let aborted = false;
  const abort = (why: string, code: number) => {
    aborted = true;
    say(`${why}: stopping the workers and the relay`);
    void cleanup().finally(() => process.exit(code));
  };
  process.once('SIGINT', () => abort('interrupted', 130));
  process.once('SIGTERM', () => abort('terminated', 143));
  const deadline = setTimeout(() => abort(`not done within the deadline of ${opts.deadlineMs / 1000} s (--deadline)`, 1), opts.deadlineMs);
  try {
    relays = await loadRelays(PROJECT_ROOT, opts);
    say(`${opts.sessions} sessions over ${opts.workers} workers against ${relays.relays.map((r) => r.url).join(', ')}`);
    pool = new WorkerPool(WORKER, opts.workers, rampProgress(opts.sessions, opts.workers));
    const report = await measure(opts, relays, pool);
    process.stdout.write(opts.json ? `${JSON.stringify(report, null, 2)}\n` : `${renderText(report)}\n`);
    return 0;
  } catch (err) {
    // After an abort the workers' exits fail the phase under way: not news.
    if (!aborted) say(`failed: ${messageOf(err)}`);
    return 1;
  } finally {
    clearTimeout(deadline);
    await cleanup();
  }
}

process.exitCode = await main();
