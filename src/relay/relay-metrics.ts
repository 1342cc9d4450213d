/**
 * What the relay counts for its operator: the `interlink_relay_*` metrics that
 * `--metrics` serves, and the `relay_summary` log line (DESIGN.md "The relay":
 * "Operating it"). Counters only go up while the process runs; the gauges are the relay's
 * state when scraped.
 */
import { REFUSAL_CODES, type RefusalCode } from '../errors.js';
import { MetricsRegistry, type Counter, type Gauge, type Histogram } from './metrics.js';

/** Commit latency bounds in seconds: an fdatasync takes from a fraction of a millisecond (NVMe) to a second (a busy disk). */
export const COMMIT_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1] as const;

/** The relay's state at one moment. */
export interface RelayGauges {
  connections: number;
  routes: number;
  messages: number;
  bytes: number;
}

interface Counts {
  accepted: number;
  delivered: number;
  acknowledged: number;
  expired: number;
  refused: number;
}

/** One `relay_summary` line: the state now, and what was counted since the previous line. */
export type RelaySummary = RelayGauges & Counts;

const GAUGES = ['connections', 'routes', 'messages', 'bytes'] as const;

/** What the process costs, read at each scrape (injectable for tests). */
export interface ProcessReadings {
  uptimeSeconds(): number;
  rssBytes(): number;
}

const PROCESS: ProcessReadings = { uptimeSeconds: () => process.uptime(), rssBytes: () => process.memoryUsage.rss() };

const PREFIX = 'interlink_relay_';

export class RelayMetrics {
  private readonly registry = new MetricsRegistry();
  private readonly state: Record<keyof RelayGauges, Gauge>;
  private readonly acceptedTotal: Counter;
  private readonly deliveredTotal: Counter;
  private readonly acknowledgedTotal: Counter;
  private readonly expiredTotal: Counter;
  private readonly refusedTotal: Counter;
  private readonly storeReadsTotal: Counter;
  private readonly commitSeconds: Histogram;
  private readonly rss: Gauge;
  private readonly storeUpGauge: Gauge;
  private readonly storeOutagesTotal: Counter;
  private readonly uptime: Gauge;
  /** The state and counter totals when the previous summary was taken. */
  private last: { gauges: RelayGauges; totals: Counts } | undefined;

  constructor(private readonly readings: ProcessReadings = PROCESS) {
    const r = this.registry;
    this.state = {
      connections: r.gauge(`${PREFIX}connections`, 'Open WebSocket connections.'),
      routes: r.gauge(`${PREFIX}routes`, 'Routes with queued messages.'),
      messages: r.gauge(`${PREFIX}queued_messages`, 'Messages accepted and not yet acknowledged or expired.'),
      bytes: r.gauge(`${PREFIX}queued_bytes`, 'Payload bytes of the queued messages.'),
    };
    this.acceptedTotal = r.counter(`${PREFIX}accepted_total`, 'Messages stored and answered accepted.');
    this.deliveredTotal = r.counter(`${PREFIX}delivered_total`, 'Deliver frames sent; a message delivered again after a reconnect counts again.');
    this.acknowledgedTotal = r.counter(`${PREFIX}acknowledged_total`, 'Queued messages removed by an acknowledgement.');
    this.expiredTotal = r.counter(`${PREFIX}expired_total`, 'Queued messages dropped after the maximum age.');
    this.refusedTotal = r.counter(`${PREFIX}refused_total`, 'Frames refused, by refusal code.', ['code']);
    // Every code from the start, so that a rate over a code never begins at a missing series.
    for (const code of REFUSAL_CODES) this.refusedTotal.inc({ code }, 0);
    this.storeReadsTotal = r.counter(`${PREFIX}store_reads_total`, 'Reads of the queue store for deliveries (on PostgreSQL, one query each).');
    this.commitSeconds = r.histogram(`${PREFIX}commit_seconds`, 'Time from submitting a queue change to its commit (with --db, including the fdatasync).', COMMIT_BUCKETS);
    this.storeUpGauge = r.gauge(`${PREFIX}store_up`, 'Whether the queue store commits (0 while a database is found unable to commit in time).');
    this.storeUpGauge.set(1);
    this.storeOutagesTotal = r.counter(`${PREFIX}store_outages_total`, 'Times the queue store was found unable to commit in time.');
    this.rss = r.gauge(`${PREFIX}resident_memory_bytes`, 'Resident set size of the relay process.');
    this.uptime = r.gauge(`${PREFIX}uptime_seconds`, 'Seconds since the relay process started.');
  }

  accepted(): void {
    this.acceptedTotal.inc();
  }

  delivered(): void {
    this.deliveredTotal.inc();
  }

  acknowledged(count: number): void {
    this.acknowledgedTotal.inc({}, count);
  }

  expired(count: number): void {
    this.expiredTotal.inc({}, count);
  }

  refused(code: RefusalCode): void {
    this.refusedTotal.inc({ code });
  }

  storeRead(): void {
    this.storeReadsTotal.inc();
  }

  /** The store was found unable to commit (false), or commits again (true). */
  storeUp(up: boolean): void {
    this.storeUpGauge.set(up ? 1 : 0);
    if (!up) this.storeOutagesTotal.inc();
  }

  committed(seconds: number): void {
    this.commitSeconds.observe(seconds);
  }

  /** The exposition served on GET /metrics, with the relay's state `now`. */
  render(now: RelayGauges): string {
    for (const key of GAUGES) this.state[key].set(now[key]);
    this.rss.set(this.readings.rssBytes());
    this.uptime.set(this.readings.uptimeSeconds());
    return this.registry.render();
  }

  /**
   * The next summary line, or undefined when nothing moved since the previous one (no
   * counter went up and the state is the same): an idle relay does not repeat itself.
   */
  summary(now: RelayGauges): RelaySummary | undefined {
    const gauges: RelayGauges = { connections: now.connections, routes: now.routes, messages: now.messages, bytes: now.bytes };
    const totals: Counts = {
      accepted: this.acceptedTotal.total(),
      delivered: this.deliveredTotal.total(),
      acknowledged: this.acknowledgedTotal.total(),
      expired: this.expiredTotal.total(),
      refused: this.refusedTotal.total(),
    };
    const previous = this.last;
    this.last = { gauges, totals };
    const delta = (key: keyof Counts) => totals[key] - (previous?.totals[key] ?? 0);
    const since: Counts = { accepted: delta('accepted'), delivered: delta('delivered'), acknowledged: delta('acknowledged'), expired: delta('expired'), refused: delta('refused') };
    const moved = Object.values(since).some((n) => n !== 0);
    const same = previous !== undefined && GAUGES.every((key) => previous.gauges[key] === gauges[key]);
    return moved || !same ? { ...gauges, ...since } : undefined;
  }
}
