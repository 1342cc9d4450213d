/**
 * The capacity run's result: one JSON object (`--json`), or the same figures as a short
 * table for a person. Workers' counts are summed and their latency samples pooled before
 * any percentile is taken (a percentile of percentiles would be no percentile).
 */
import { percentile } from '../bench/stats.js';
import type { CommitFigures } from './commits.js';
import type { RosterResult, TrafficResult } from './ipc.js';

export interface Latency {
  count: number;
  p50: number | null;
  p99: number | null;
  max: number | null;
}

export interface RelayFigures {
  url: string;
  /** Started by this run (else given with --relays). */
  own: boolean;
  pid: number | null;
  rss_after_ramp_bytes: number | null;
  rss_peak_bytes: number | null;
  rss_end_bytes: number | null;
  cpu_seconds: { ramp: number | null; idle: number | null; roster: number | null; traffic: number | null };
  /** Its commits over the traffic window, from its /metrics (null without them). */
  commits: CommitFigures | null;
}

/** The PostgreSQL cluster's server processes (primary and standby) and the primary's WAL, with `--postgres-cluster`. */
export interface DatabaseFigures {
  idle_cpu_percent: number | null;
  idle_wal_bytes_per_second: number | null;
  traffic_cpu_ms_per_message: number | null;
  traffic_wal_bytes_per_second: number | null;
}

export interface CapacityReport {
  sessions: number;
  workers: number;
  rate: number;
  senders: number;
  store: string;
  connected: number;
  connect_failed: number;
  connected_at_end: number;
  /** Connections that were up and dropped (the session reconnects, as sessions do). */
  disconnects: number;
  /** Why connection attempts failed, with counts: during the ramp, and in all. */
  troubles: { ramp: Record<string, number>; all: Record<string, number> };
  ramp: { seconds: number; target_per_second: number };
  roster: RosterResult & { seconds: number; relay_cpu_ms_per_request: number | null };
  messages: Omit<TrafficResult, 'acceptToDeliver' | 'sendToAccept' | 'deliveredFirst' | 'receiptsSent' | 'receiptsAccepted' | 'receiptsDelivered' | 'receipted'>;
  receipts: { sent: number; accepted: number; delivered: number; messages_receipted: number };
  latency_ms: { accept_to_deliver: Latency; send_to_accept: Latency; delivered_before_accepted: number };
  relay: {
    /** Before the first session connected. */
    rss_start_bytes: number | null;
    rss_after_ramp_bytes: number | null;
    rss_peak_bytes: number | null;
    rss_end_bytes: number | null;
    idle_seconds: number;
    idle_cpu_percent: number | null;
    /** Bytes the relay wrote to storage per second while idle (renewed announcements rewrite its roster file under --db), and during the traffic. */
    idle_written_bytes_per_second: number | null;
    traffic_written_bytes_per_second: number | null;
    traffic_seconds: number;
    traffic_cpu_seconds: number | null;
    /** Relay CPU over the traffic window (sending and draining) per message delivered. */
    cpu_ms_per_message: number | null;
    /** The same less what the relay spent idle at the idle window's rate: what messages and receipts cost. */
    marginal_cpu_ms_per_message: number | null;
    /** The relay's commits over the traffic window (one relay only: else see `relays`). */
    commits: CommitFigures | null;
  };
  relays: RelayFigures[];
  /** With `--postgres-cluster` only. */
  database: DatabaseFigures | null;
  seconds: number;
}

export function latency(samples: readonly number[]): Latency {
  if (samples.length === 0) return { count: 0, p50: null, p99: null, max: null };
  const sorted = [...samples].sort((a, b) => a - b);
  const round = (n: number) => Math.round(n * 100) / 100;
  return { count: sorted.length, p50: round(percentile(sorted, 50)), p99: round(percentile(sorted, 99)), max: round(sorted[sorted.length - 1]!) };
}

export function addCounts(into: Record<string, number>, from: Record<string, number>): void {
  for (const [code, n] of Object.entries(from)) into[code] = (into[code] ?? 0) + n;
}

/** The workers' traffic as one. */
export function mergeTraffic(results: readonly TrafficResult[]): TrafficResult {
  const merged: TrafficResult = {
    sent: 0,
    accepted: 0,
    refused: {},
    unanswered: 0,
    delivered: 0,
    duplicates: 0,
    lost: 0,
    rejected: {},
    receiptsSent: 0,
    receiptsAccepted: 0,
    receiptsDelivered: 0,
    receipted: 0,
    acceptToDeliver: [],
    sendToAccept: [],
    deliveredFirst: 0,
  };
  for (const r of results) {
    for (const field of ['sent', 'accepted', 'unanswered', 'delivered', 'duplicates', 'lost', 'receiptsSent', 'receiptsAccepted', 'receiptsDelivered', 'receipted', 'deliveredFirst'] as const) merged[field] += r[field];
    addCounts(merged.refused, r.refused);
    addCounts(merged.rejected, r.rejected);
    merged.acceptToDeliver.push(...r.acceptToDeliver);
    merged.sendToAccept.push(...r.sendToAccept);
  }
  return merged;
}

export function mergeRoster(results: readonly RosterResult[]): RosterResult {
  const merged: RosterResult = { checked: 0, answered: 0, found: 0, foundFirst: 0, requests: 0, entriesMax: 0, bytesMax: 0 };
  for (const r of results) {
    merged.checked += r.checked;
    merged.answered += r.answered;
    merged.found += r.found;
    merged.foundFirst += r.foundFirst;
    merged.requests += r.requests;
    merged.entriesMax = Math.max(merged.entriesMax, r.entriesMax);
    merged.bytesMax = Math.max(merged.bytesMax, r.bytesMax);
  }
  return merged;
}

const mib = (bytes: number | null) => (bytes === null ? 'n/a' : `${(bytes / 2 ** 20).toFixed(1)} MiB`);
const ms = (n: number | null, digits = 2) => (n === null ? 'n/a' : `${n.toFixed(digits)} ms`);
const count = (n: number) => n.toLocaleString('en-US');
const codes = (counts: Record<string, number>) => (Object.keys(counts).length === 0 ? '0' : Object.entries(counts).map(([c, n]) => `${c} ${n}`).join(', '));

/** The figures for a person, one per line. */
export function renderText(r: CapacityReport): string {
  const m = r.messages;
  const rows: [string, string][] = [
    ['sessions connected', `${count(r.connected)} of ${count(r.sessions)} (${r.connect_failed} failed; ${count(r.connected_at_end)} still connected at the end, ${r.disconnects} disconnects) over ${r.workers} workers, store ${r.store}`],
    ['ramp', `${r.ramp.seconds.toFixed(1)} s at up to ${r.ramp.target_per_second}/s; failed attempts: ${codes(r.troubles.ramp)}`],
    ['pair found on the roster', `${count(r.roster.found)} of ${count(r.roster.checked)} checked, ${count(r.roster.foundFirst)} at the first request (${count(r.roster.answered)} answered, ${count(r.roster.requests)} requests, up to ${count(r.roster.entriesMax)} entries / ${mib(r.roster.bytesMax)} per answer) in ${r.roster.seconds.toFixed(1)} s; relay ${ms(r.roster.relay_cpu_ms_per_request)} CPU per request`],
    ['messages', `${count(m.sent)} sent by ${r.senders} senders, ${count(m.accepted)} accepted, ${count(m.delivered)} delivered, ${m.lost} lost, ${m.unanswered} unanswered, ${m.duplicates} duplicates; refused: ${codes(m.refused)}; rejected by the gate: ${codes(m.rejected)}`],
    ['receipts', `${count(r.receipts.sent)} sent, ${count(r.receipts.accepted)} accepted, ${count(r.receipts.delivered)} delivered, reporting ${count(r.receipts.messages_receipted)} messages`],
    ['accepted → delivered', `p50 ${ms(r.latency_ms.accept_to_deliver.p50)}, p99 ${ms(r.latency_ms.accept_to_deliver.p99)}, max ${ms(r.latency_ms.accept_to_deliver.max)} (${count(r.latency_ms.accept_to_deliver.count)} messages; ${r.latency_ms.delivered_before_accepted} delivered before the sender read accepted, counted 0)`],
    ['send → accepted', `p50 ${ms(r.latency_ms.send_to_accept.p50)}, p99 ${ms(r.latency_ms.send_to_accept.p99)}`],
    ['relay commits', r.relay.commits === null ? 'n/a' : `${count(r.relay.commits.commits)} during the traffic, mean ${ms(r.relay.commits.mean_ms)}, p50 ≤ ${ms(r.relay.commits.p50_at_most_ms, 1)}, p99 ≤ ${ms(r.relay.commits.p99_at_most_ms, 1)}`],
    ['relay RSS', `${mib(r.relay.rss_start_bytes)} at the start, ${mib(r.relay.rss_after_ramp_bytes)} after the ramp, ${mib(r.relay.rss_peak_bytes)} peak, ${mib(r.relay.rss_end_bytes)} at the end`],
    ['relay CPU idle', r.relay.idle_cpu_percent === null ? 'n/a' : `${r.relay.idle_cpu_percent.toFixed(1)}% of a core over ${r.relay.idle_seconds.toFixed(1)} s (heartbeats, announcements renewed every 30 s)`],
    ['relay storage writes', `${mib(r.relay.idle_written_bytes_per_second)}/s idle, ${mib(r.relay.traffic_written_bytes_per_second)}/s during the traffic`],
    ['relay CPU per message', `${ms(r.relay.cpu_ms_per_message, 3)} (${r.relay.traffic_cpu_seconds?.toFixed(2) ?? 'n/a'} s over ${r.relay.traffic_seconds.toFixed(1)} s of traffic and drain); less idle: ${ms(r.relay.marginal_cpu_ms_per_message, 3)}`],
  ];
  const d = r.database;
  if (d !== null) {
    rows.push(['PostgreSQL (both nodes)', `CPU ${d.idle_cpu_percent?.toFixed(1) ?? 'n/a'}% of a core idle, ${ms(d.traffic_cpu_ms_per_message, 3)} per message; primary's WAL ${mib(d.idle_wal_bytes_per_second)}/s idle, ${mib(d.traffic_wal_bytes_per_second)}/s during the traffic`]);
  }
  const width = Math.max(...rows.map(([k]) => k.length));
  return [`capacity: ${count(r.sessions)} sessions, rate ${r.rate}, ${r.seconds.toFixed(0)} s`, ...rows.map(([k, v]) => `  ${k.padEnd(width)}  ${v}`)].join('\n');
}
