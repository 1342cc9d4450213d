/**
 * The relay's metric set in prom-client 15, for the comparison in prometheus.ts: the
 * families (names, HELP, TYPE, label sets, histogram bounds) are read from the relay's
 * own exposition (src/relay/relay-metrics.ts), so that both sides always carry the same
 * series, and the values are fed the same way.
 *
 * prom-client is not a dependency of the project (DESIGN.md "Operating it" says why):
 * `npm run bench:prometheus` installs it for the benchmark only. It is loaded at run
 * time, and when it is missing the comparison says so.
 */
import { importOptional } from './optional-import.js';

/** The part of prom-client's API used here. */
export interface PromMetric {
  set?(labels: Record<string, string>, value: number): void;
  inc?(labels: Record<string, string>, value: number): void;
  observe?(value: number): void;
}

interface MetricConfig {
  name: string;
  help: string;
  labelNames?: string[];
  buckets?: number[];
  registers: unknown[];
}

export interface PromClient {
  version: string;
  Registry: new () => { metrics(): Promise<string> };
  Counter: new (config: MetricConfig) => PromMetric;
  Gauge: new (config: MetricConfig) => PromMetric;
  Histogram: new (config: MetricConfig) => PromMetric;
}

export const PROM_CLIENT_SETUP = 'npm run bench:prometheus';
export const PROM_CLIENT_MISSING = `prom-client is not installed (\`${PROM_CLIENT_SETUP}\` installs it for the benchmark)`;

function isPromClient(value: unknown): value is Omit<PromClient, 'version'> {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as Record<string, unknown>;
  return ['Registry', 'Counter', 'Gauge', 'Histogram'].every((name) => typeof v[name] === 'function');
}

/** prom-client when it is installed; undefined when it is not (any other failure throws). */
export async function loadPromClient(): Promise<PromClient | undefined> {
  const loaded = await importOptional('prom-client');
  if (loaded === undefined) return undefined;
  const module = typeof loaded === 'object' && loaded !== null && 'default' in loaded ? loaded.default : loaded;
  if (!isPromClient(module)) throw new Error('prom-client exports no Registry, Counter, Gauge and Histogram');
  const { createRequire } = await import('node:module');
  const manifest: unknown = createRequire(import.meta.url)('prom-client/package.json');
  const version = typeof manifest === 'object' && manifest !== null && 'version' in manifest ? String(manifest.version) : 'unknown';
  return { ...module, version };
}

interface Family {
  name: string;
  help: string;
  type: string;
  labelNames: string[];
  buckets: number[];
  samples: { labels: Record<string, string>; value: number }[];
}

function parseLabels(text: string | undefined): Record<string, string> {
  const labels: Record<string, string> = {};
  // The relay's label values are refusal codes and bucket bounds: no escapes to undo.
  for (const pair of text === undefined ? [] : text.split(',')) {
    const [name, quoted] = pair.split('=') as [string, string];
    labels[name] = quoted.slice(1, -1);
  }
  return labels;
}

/** The families of an exposition, in order (the relay's: no escapes in its help or labels). */
export function readFamilies(exposition: string): Family[] {
  const families: Family[] = [];
  for (const line of exposition.split('\n')) {
    const help = /^# HELP (\S+) (.*)$/.exec(line);
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (help) families.push({ name: help[1]!, help: help[2]!, type: '', labelNames: [], buckets: [], samples: [] });
    else if (type) families[families.length - 1]!.type = type[2]!;
    else if (sample) {
      const family = families[families.length - 1]!;
      const labels = parseLabels(sample[2]);
      const value = sample[3] === '+Inf' ? Infinity : Number(sample[3]);
      if (family.type !== 'histogram') family.samples.push({ labels, value });
      if (sample[1] === `${family.name}_bucket` && labels['le'] !== '+Inf') family.buckets.push(Number(labels['le']));
      if (family.type !== 'histogram') family.labelNames = Object.keys(labels);
    }
  }
  return families;
}

/** The relay's gauges that a scrape sets from its state, as RelayMetrics.render does. */
export interface ScrapeState {
  connections: number;
  routes: number;
  messages: number;
  bytes: number;
}

export interface PromRelayRegistry {
  /** The metric named `interlink_relay_<name>`. */
  metric(name: string): PromMetric;
  /** Sets the state and process gauges, then renders: what a scrape of a prom-client relay would do. */
  render(state: ScrapeState): Promise<string>;
}

/**
 * A prom-client registry with the families of `exposition` (a render of RelayMetrics),
 * holding its counter and gauge values; the histogram is given `observations`, the values
 * the relay's histogram was given. No default metrics, no global registry.
 */
export function promRelayRegistry(client: PromClient, exposition: string, observations: readonly number[]): PromRelayRegistry {
  const registry = new client.Registry();
  const byName = new Map<string, PromMetric>();
  for (const family of readFamilies(exposition)) {
    const config: MetricConfig = { name: family.name, help: family.help, registers: [registry] };
    if (family.type === 'histogram') {
      const histogram = new client.Histogram({ ...config, buckets: family.buckets });
      for (const value of observations) histogram.observe!(value);
      byName.set(family.name, histogram);
    } else if (family.type === 'counter') {
      const counter = new client.Counter({ ...config, labelNames: family.labelNames });
      for (const sample of family.samples) counter.inc!(sample.labels, sample.value);
      byName.set(family.name, counter);
    } else {
      const gauge = new client.Gauge({ ...config, labelNames: family.labelNames });
      for (const sample of family.samples) gauge.set!(sample.labels, sample.value);
      byName.set(family.name, gauge);
    }
  }
  const metric = (name: string): PromMetric => {
    const found = byName.get(`interlink_relay_${name}`);
    if (found === undefined) throw new Error(`the relay has no metric interlink_relay_${name}`);
    return found;
  };
  const gauge = (name: string, value: number) => metric(name).set!({}, value);
  return {
    metric,
    render: (state) => {
      gauge('connections', state.connections);
      gauge('routes', state.routes);
      gauge('queued_messages', state.messages);
      gauge('queued_bytes', state.bytes);
      gauge('resident_memory_bytes', process.memoryUsage.rss());
      gauge('uptime_seconds', process.uptime());
      return registry.metrics();
    },
  };
}
