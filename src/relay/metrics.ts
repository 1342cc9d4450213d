/**
 * Prometheus text exposition, format 0.0.4, written by hand: a small registry of
 * counters, gauges and histograms, and the one pure function that
 * renders them (DESIGN.md "The relay": "Operating it"). prom-client 15 was measured
 * against it (scripts/bench/prometheus.ts; figures in DESIGN.md): a scrape costs under a
 * tenth of a millisecond either way, and the library holds about 1 MiB more, renders only
 * asynchronously and brings four packages, for what is here a page of text.
 */

export const EXPOSITION_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

export type Labels = Readonly<Record<string, string>>;

export interface Sample {
  labels: Labels;
  value: number;
}

/** One metric as the text format lays it out; histogram buckets are cumulative, `+Inf` last. */
export type MetricFamily =
  | { name: string; help: string; type: 'counter' | 'gauge'; samples: readonly Sample[] }
  | { name: string; help: string; type: 'histogram'; buckets: readonly { le: number; count: number }[]; sum: number; count: number };

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
/** Names starting with `__` are reserved for Prometheus itself; `le` belongs to histograms. */
const LABEL_NAME = /^(?!__)[a-zA-Z_][a-zA-Z0-9_]*$/;

function checkName(name: string): void {
  if (!METRIC_NAME.test(name)) throw new Error(`not a metric name: ${JSON.stringify(name)}`);
}

function checkLabelNames(names: readonly string[]): void {
  for (const name of names) {
    if (!LABEL_NAME.test(name) || name === 'le') throw new Error(`not a label name: ${JSON.stringify(name)}`);
  }
}

/** A number as Go's ParseFloat reads it, which is what Prometheus uses. */
export function formatValue(value: number): string {
  if (Number.isNaN(value)) return 'NaN';
  if (value === Infinity) return '+Inf';
  if (value === -Infinity) return '-Inf';
  return String(value);
}

/** In a label value, backslash, double quote and line feed are escaped. */
export function escapeLabelValue(value: string): string {
  return value.replace(/[\\"\n]/g, (c) => (c === '\n' ? '\\n' : `\\${c}`));
}

/** In HELP text, only backslash and line feed are escaped. */
export function escapeHelp(text: string): string {
  return text.replace(/[\\\n]/g, (c) => (c === '\n' ? '\\n' : '\\\\'));
}

function labelText(labels: Labels): string {
  const pairs = Object.entries(labels).map(([name, value]) => `${name}="${escapeLabelValue(value)}"`);
  return pairs.length === 0 ? '' : `{${pairs.join(',')}}`;
}

function familyLines(family: MetricFamily): string[] {
  const head = [`# HELP ${family.name} ${escapeHelp(family.help)}`, `# TYPE ${family.name} ${family.type}`];
  if (family.type !== 'histogram') {
    return [...head, ...family.samples.map((s) => `${family.name}${labelText(s.labels)} ${formatValue(s.value)}`)];
  }
  return [
    ...head,
    ...family.buckets.map((b) => `${family.name}_bucket${labelText({ le: formatValue(b.le) })} ${formatValue(b.count)}`),
    `${family.name}_sum ${formatValue(family.sum)}`,
    `${family.name}_count ${formatValue(family.count)}`,
  ];
}

/** The whole exposition: every family in the order given, each line ended by a line feed. */
export function renderExposition(families: readonly MetricFamily[]): string {
  return families.flatMap(familyLines).map((line) => `${line}\n`).join('');
}

/** A count that only goes up, optionally split by labels (a label set seen once stays, at its count). */
export class Counter {
  private readonly values = new Map<string, Sample>();

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly labelNames: readonly string[] = [],
  ) {
    checkName(name);
    checkLabelNames(labelNames);
    // A counter without labels exists from the start, at 0.
    if (labelNames.length === 0) this.inc({}, 0);
  }

  inc(labels: Labels = {}, by = 1): void {
    if (!(by >= 0)) throw new Error(`${this.name} only goes up (by ${by})`);
    const key = this.keyOf(labels);
    const sample = this.values.get(key) ?? { labels: this.ordered(labels), value: 0 };
    sample.value += by;
    this.values.set(key, sample);
  }

  get(labels: Labels = {}): number {
    return this.values.get(this.keyOf(labels))?.value ?? 0;
  }

  /** Every label set counted so far, and the total over them. */
  total(): number {
    let sum = 0;
    for (const sample of this.values.values()) sum += sample.value;
    return sum;
  }

  family(): MetricFamily {
    const samples = [...this.values.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, s]) => ({ ...s }));
    return { name: this.name, help: this.help, type: 'counter', samples };
  }

  private keyOf(labels: Labels): string {
    const names = Object.keys(labels);
    if (names.length !== this.labelNames.length || !this.labelNames.every((n) => typeof labels[n] === 'string')) {
      throw new Error(`${this.name} takes the labels ${JSON.stringify(this.labelNames)}, not ${JSON.stringify(names)}`);
    }
    return JSON.stringify(this.labelNames.map((n) => labels[n]));
  }

  private ordered(labels: Labels): Labels {
    return Object.fromEntries(this.labelNames.map((n) => [n, labels[n]!]));
  }
}

/** A value that goes up and down, as last set. */
export class Gauge {
  private value = 0;

  constructor(
    readonly name: string,
    readonly help: string,
  ) {
    checkName(name);
  }

  set(value: number): void {
    this.value = value;
  }

  family(): MetricFamily {
    return { name: this.name, help: this.help, type: 'gauge', samples: [{ labels: {}, value: this.value }] };
  }
}

/** Observations counted into fixed upper bounds (`le`, inclusive), plus their sum and count. */
export class Histogram {
  private readonly bounds: readonly number[];
  /** Per bucket, not cumulative; the last one is `+Inf`. */
  private readonly counts: number[];
  private sum = 0;
  private count = 0;

  constructor(
    readonly name: string,
    readonly help: string,
    bounds: readonly number[],
  ) {
    checkName(name);
    if (bounds.length === 0 || bounds.some((b, i) => !Number.isFinite(b) || (i > 0 && b <= bounds[i - 1]!))) {
      throw new Error(`${name}: bucket bounds must be finite and strictly increasing`);
    }
    this.bounds = [...bounds, Infinity];
    this.counts = this.bounds.map(() => 0);
  }

  observe(value: number): void {
    if (Number.isNaN(value)) return;
    const index = this.bounds.findIndex((le) => value <= le);
    this.counts[index]!++;
    this.sum += value;
    this.count++;
  }

  family(): MetricFamily {
    let running = 0;
    const buckets = this.bounds.map((le, i) => ({ le, count: (running += this.counts[i]!) }));
    return { name: this.name, help: this.help, type: 'histogram', buckets, sum: this.sum, count: this.count };
  }
}

/** The metrics of one process, rendered in the order they were registered. */
export class MetricsRegistry {
  private readonly metrics: { name: string; family(): MetricFamily }[] = [];

  counter(name: string, help: string, labelNames: readonly string[] = []): Counter {
    return this.add(new Counter(name, help, labelNames));
  }

  gauge(name: string, help: string): Gauge {
    return this.add(new Gauge(name, help));
  }

  histogram(name: string, help: string, bounds: readonly number[]): Histogram {
    return this.add(new Histogram(name, help, bounds));
  }

  render(): string {
    return renderExposition(this.metrics.map((m) => m.family()));
  }

  private add<M extends { name: string; family(): MetricFamily }>(metric: M): M {
    if (this.metrics.some((m) => m.name === metric.name)) throw new Error(`${metric.name} is registered twice`);
    this.metrics.push(metric);
    return metric;
  }
}
