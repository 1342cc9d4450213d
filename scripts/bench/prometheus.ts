/**
 * The relay's hand-written Prometheus exposition (src/relay/metrics.ts) against
 * prom-client 15 with the same metric set (prom-client-relay.ts): what a scrape costs
 * (time and heap allocated per render, median of many) and what having prom-client loaded
 * and registered costs a relay process in resident memory, under the same load. DESIGN.md
 * ("Operating it") has its figures, and why the relay keeps the hand-written exposition.
 *
 *   npm run bench:prometheus    (installs prom-client without saving it, then runs this)
 *
 * Not part of `npm run bench`: prom-client is not a dependency, and the allocation figure
 * needs `node --expose-gc` with a fixed young generation (the npm script passes both).
 */
import { mkdtemp } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { performance, PerformanceObserver } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { wireOf } from '../../src/envelope/envelope.js';
import { REFUSAL_CODES } from '../../src/errors.js';
import { COMMIT_BUCKETS, RelayMetrics, type RelayGauges } from '../../src/relay/relay-metrics.js';
import { makeScratch } from './disk.js';
import { makeEnvelopes, newCorrespondents } from './records.js';
import { startRelayProcess } from './relay-process.js';
import { fillRelay, mib } from './relay-fill.js';
import { renderConsole, type Section } from './report.js';
import { formatCount, summarize } from './stats.js';
import { loadPromClient, PROM_CLIENT_MISSING, promRelayRegistry, type PromClient } from './prom-client-relay.js';

/** dist/scripts/bench/prometheus.js → the project root. */
const PROJECT_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const PRELOAD = join(PROJECT_ROOT, 'dist', 'scripts', 'bench', 'prom-client-preload.js');

const WARMUP = 3_000;
const BATCHES = 200;
const PER_BATCH = 100;
const ROUNDS = 5;
const MESSAGES = 2_000;
const SCRAPES = 300;
const IN_FLIGHT = 32;

const STATE: RelayGauges = { connections: 12, routes: 7, messages: 1_234, bytes: 1_300_000 };

type Render = () => string | Promise<string>;

/** A relay's counters after some traffic, and the commit latencies it observed. */
function busyRelayMetrics(): { metrics: RelayMetrics; observations: number[] } {
  const metrics = new RelayMetrics();
  const observations = Array.from({ length: 5_000 }, (_, i) => (COMMIT_BUCKETS[i % COMMIT_BUCKETS.length]! * (0.5 + (i % 7) / 7)));
  for (let i = 0; i < 5_000; i++) metrics.accepted();
  for (let i = 0; i < 4_800; i++) metrics.delivered();
  metrics.acknowledged(4_700);
  metrics.expired(12);
  REFUSAL_CODES.forEach((code, i) => {
    for (let n = 0; n < i; n++) metrics.refused(code);
  });
  for (const value of observations) metrics.committed(value);
  return { metrics, observations };
}

/** Sample lines without the two process gauges, which move between renders. */
function comparableSamples(exposition: string): string[] {
  return exposition
    .split('\n')
    .filter((line) => line !== '' && !/^interlink_relay_(resident_memory_bytes|uptime_seconds) /.test(line))
    .sort();
}

let collections = 0;

async function settle(): Promise<void> {
  // PerformanceObserver delivers GC entries asynchronously.
  await new Promise((r) => setImmediate(r));
  await new Promise((r) => setImmediate(r));
}

/** Microseconds and heap bytes per render: one batch; bytes undefined when a collection ran during it. */
async function batch(render: Render, gc: () => void): Promise<{ micros: number; bytes: number | undefined }> {
  gc();
  await settle();
  const before = collections;
  const heap = process.memoryUsage().heapUsed;
  const start = performance.now();
  for (let i = 0; i < PER_BATCH; i++) await render();
  const micros = ((performance.now() - start) * 1000) / PER_BATCH;
  const allocated = process.memoryUsage().heapUsed - heap;
  await settle();
  return { micros, bytes: collections === before ? allocated / PER_BATCH : undefined };
}

async function renderCost(client: PromClient, gc: () => void): Promise<Section> {
  const { metrics, observations } = busyRelayMetrics();
  const handWritten = metrics.render(STATE);
  const prom = promRelayRegistry(client, handWritten, observations);
  const promText = await prom.render(STATE);
  const same = JSON.stringify(comparableSamples(handWritten)) === JSON.stringify(comparableSamples(promText));
  if (!same) throw new Error(`prom-client's exposition carries other samples:\n${promText}`);
  const renders: [string, Render][] = [
    ['hand-written (src/relay/metrics.ts)', () => metrics.render(STATE)],
    [`prom-client ${client.version}`, () => prom.render(STATE)],
  ];
  for (const [, render] of renders) for (let i = 0; i < WARMUP; i++) await render();
  const times = renders.map((): number[] => []);
  const bytes = renders.map((): number[] => []);
  // Alternating batches, each way first in turn, share whatever else the machine is doing.
  for (let b = 0; b < BATCHES; b++) {
    for (const i of b % 2 === 0 ? [0, 1] : [1, 0]) {
      const result = await batch(renders[i]![1], gc);
      times[i]!.push(result.micros);
      if (result.bytes !== undefined) bytes[i]!.push(result.bytes);
    }
  }
  const rows = renders.map(([name], i) => {
    const t = summarize(times[i]!);
    const a = bytes[i]!.length > 0 ? formatCount(summarize(bytes[i]!).median) : 'n/a';
    return [name, t.median.toFixed(1), t.p90.toFixed(1), a, formatCount(Buffer.byteLength(i === 0 ? handWritten : promText))];
  });
  const ratio = summarize(times[1]!).median / summarize(times[0]!).median;
  const sampleCount = comparableSamples(handWritten).length + 2;
  return {
    title: 'One scrape: rendering the exposition',
    measures: `The relay's metric set (${sampleCount} samples: ${REFUSAL_CODES.length} refusal codes, a ${COMMIT_BUCKETS.length + 1}-bucket histogram), after some traffic, rendered ${formatCount(BATCHES)} batches of ${PER_BATCH} times each way, alternating, each way first in turn; each render sets the state and process gauges first, as a scrape does, and is awaited. Heap bytes: heapUsed growth over a batch after a full GC, with the young generation fixed at 64 MiB so that no collection runs inside a batch (batches where one did are left out). Both carry the same samples with the same values (checked).`,
    tables: [{ headers: ['Exposition:', 'µs per render, median', 'µs p90', 'Heap bytes per render, median', 'Exposition bytes'], rows }],
    checks: [],
    notes: [`prom-client / hand-written, median time per render: ${ratio.toFixed(2)}×.`],
  };
}

function load(url: string, route: string, payloads: readonly Record<string, unknown>[], scrape: () => Promise<unknown>): Promise<void> {
  return fillRelay(url, route, payloads, IN_FLIGHT, async () => {
    for (let i = 0; i < SCRAPES; i++) await scrape();
  });
}

async function relayMemory(scratch: string): Promise<Section> {
  const who = newCorrespondents();
  const payloads = makeEnvelopes(who, MESSAGES).map((e) => wireOf(e) as unknown as Record<string, unknown>);
  const variants = [
    ['hand-written only', []],
    ['prom-client loaded, registered and served', ['--import', PRELOAD]],
  ] as const;
  const idle: number[][] = variants.map(() => []);
  const loaded: number[][] = variants.map(() => []);
  for (let round = 0; round < ROUNDS; round++) {
    for (const i of round % 2 === 0 ? [0, 1] : [1, 0]) {
      const [name, nodeArgs] = variants[i]!;
      process.stderr.write(`  … relay memory, round ${round + 1} of ${ROUNDS}: ${name}\n`);
      const db = await mkdtemp(join(scratch, 'relay-'));
      const relay = await startRelayProcess(PROJECT_ROOT, db, { metrics: true, nodeArgs, flags: ['--max-per-connection', String(MESSAGES)] });
      try {
        idle[i]!.push(relay.rss());
        await load(relay.url, `${who.recipient}#away-${round}`, payloads, () => relay.metric('accepted_total'));
        loaded[i]!.push(relay.rss());
        // Both served the relay's counts: the prom-client one was fed every event.
        const accepted = await relay.metric('accepted_total');
        if (accepted !== MESSAGES) throw new Error(`${name}: /metrics says ${accepted} accepted, not ${MESSAGES}`);
      } finally {
        await relay.stop();
      }
    }
  }
  const median = (xs: number[]) => summarize(xs).median;
  const rows = variants.map(([name], i) => [name, mib(median(idle[i]!)), mib(median(loaded[i]!)), `${mib(Math.min(...loaded[i]!))}–${mib(Math.max(...loaded[i]!))}`]);
  return {
    title: 'Relay resident memory',
    measures: `Resident set size (VmRSS) of a durable relay process (--db, --metrics) right after it listens, and after the same load: ${formatCount(MESSAGES)} signed envelopes of about 1 KiB accepted for a reader that is away, while /metrics is scraped ${SCRAPES} times. "prom-client": the same relay started with \`node --import\` of a module that loads prom-client, registers the relay's metric set in a registry of its own, counts every event into it as well and serves it on /metrics instead of the hand-written exposition (prom-client-preload.ts). Median of ${ROUNDS} rounds, alternating, each variant first in turn.`,
    tables: [{ headers: ['Relay:', 'Idle MiB', 'Loaded MiB', 'Loaded range MiB'], rows }],
    checks: [],
    notes: [`prom-client's share, loaded: ${mib(median(loaded[1]!) - median(loaded[0]!))} MiB; idle: ${mib(median(idle[1]!) - median(idle[0]!))} MiB.`],
  };
}

async function main(): Promise<void> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) throw new Error('run with node --expose-gc --min-semi-space-size=64 --max-semi-space-size=64 (npm run bench:prometheus)');
  const client = await loadPromClient();
  if (client === undefined) throw new Error(PROM_CLIENT_MISSING);
  new PerformanceObserver((list) => (collections += list.getEntries().length)).observe({ entryTypes: ['gc'] });
  console.log(`Prometheus exposition: hand-written against prom-client ${client.version}, Node ${process.version}`);
  console.log(renderConsole(await renderCost(client, gc)));
  const scratch = await makeScratch(PROJECT_ROOT);
  try {
    console.log(renderConsole(await relayMemory(scratch.path)));
  } finally {
    await scratch.remove();
  }
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? (err.stack ?? err.message) : String(err));
  process.exitCode = 1;
});
