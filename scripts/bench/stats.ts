/**
 * Statistics and timing shared by the benchmarks. Percentiles are nearest-rank on the
 * sorted samples, so every reported figure is a value that was actually observed.
 */
import { performance } from 'node:perf_hooks';

export interface Summary {
  count: number;
  median: number;
  p90: number;
  p99: number;
  min: number;
  max: number;
  mean: number;
}

/** Nearest-rank percentile of ascending `sorted` (p in 0..100). */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) throw new RangeError('percentile of no samples');
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!;
}

export function summarize(samples: readonly number[]): Summary {
  const sorted = [...samples].sort((a, b) => a - b);
  const total = sorted.reduce((sum, x) => sum + x, 0);
  return {
    count: sorted.length,
    median: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p99: percentile(sorted, 99),
    min: sorted[0]!,
    max: sorted[sorted.length - 1]!,
    mean: total / sorted.length,
  };
}

export interface RateResult {
  /** Median over equal time slices, in operations per second. */
  median: number;
  min: number;
  max: number;
  operations: number;
  seconds: number;
}

export interface RateOptions {
  warmupMs: number;
  durationMs: number;
  /** The measured time is cut into this many slices; the median slice is reported. */
  slices: number;
}

/** Runs `op` until `ms` have passed; returns operations done and the exact time taken. */
function runFor(op: () => void, ms: number): { operations: number; ms: number } {
  const start = performance.now();
  const end = start + ms;
  let operations = 0;
  let now = start;
  while (now < end) {
    op();
    operations++;
    now = performance.now();
  }
  return { operations, ms: now - start };
}

/**
 * Throughput of a synchronous operation. Slicing the run keeps one GC pause or a noisy
 * neighbour from moving the headline figure, and the min–max range shows the noise.
 */
export function measureRate(op: () => void, options: RateOptions): RateResult {
  runFor(op, options.warmupMs);
  const rates: number[] = [];
  let operations = 0;
  let ms = 0;
  for (let i = 0; i < options.slices; i++) {
    const slice = runFor(op, options.durationMs / options.slices);
    rates.push((slice.operations * 1000) / slice.ms);
    operations += slice.operations;
    ms += slice.ms;
  }
  const summary = summarize(rates);
  return { median: summary.median, min: summary.min, max: summary.max, operations, seconds: ms / 1000 };
}

/** Milliseconds taken by `fn`. */
export async function timeAsync(fn: () => Promise<unknown>): Promise<number> {
  const start = performance.now();
  await fn();
  return performance.now() - start;
}

export function timeSync(fn: () => unknown): number {
  const start = performance.now();
  fn();
  return performance.now() - start;
}

export function formatCount(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

/** Milliseconds with three significant digits (0.412, 4.12, 41.2, 412). */
export function formatMs(ms: number): string {
  if (ms >= 100) return ms.toFixed(0);
  if (ms >= 10) return ms.toFixed(1);
  if (ms >= 1) return ms.toFixed(2);
  return ms.toFixed(3);
}

export function formatRatio(ratio: number): string {
  return `${ratio >= 10 ? ratio.toFixed(1) : ratio.toFixed(2)}×`;
}

/**
 * A ratio a check compares with `goal`: with a third digit when two would print the goal
 * itself for a ratio on the other side of it (0.897 is not "0.90×, FAIL").
 */
export function formatRatioAgainst(ratio: number, goal: number): string {
  const short = formatRatio(ratio);
  return short === formatRatio(goal) && ratio !== goal ? `${ratio.toFixed(3)}×` : short;
}

/**
 * The spread of per-round ratios, lowest to highest ("0.81–0.97×"; one round: its ratio):
 * printed beside a median so a reader sees how far one run of this machine can move it.
 */
export function formatRatioRange(ratios: readonly number[]): string {
  if (ratios.length === 0) return '–';
  const low = Math.min(...ratios);
  const high = Math.max(...ratios);
  return low === high ? formatRatio(low) : `${formatRatio(low).slice(0, -1)}–${formatRatio(high)}`;
}

export function formatMicros(ms: number): string {
  return (ms * 1000).toFixed(ms * 1000 >= 100 ? 0 : 1);
}
