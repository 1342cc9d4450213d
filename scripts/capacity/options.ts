/**
 * The capacity run's command line (`npm run capacity -- …`). Every figure the run may take
 * is bounded here, before anything starts: sessions, workers and the total deadline.
 */
import { parseArgs } from 'node:util';
import { parseRelayUrl } from '../../src/config/relay-url.js';

export const USAGE = `usage: npm run capacity -- --sessions N [--rate R] [--duration D] [--ramp N]
                        [--relays URL,… [--relay-pid PID,…]] [--db DIR | --store postgres://…]
                        [--postgres-cluster N]
                        [--workers N] [--idle D] [--drain D] [--roster-sample F] [--deadline D] [--json]

Simulated sessions (each its own key, paired in twos) against a relay: connected, findable
by their pair on the roster, and R of them sending one sealed, signed message a second to
their pair, which answers with signed receipts. Prints the relay's memory and CPU and the
latency from the relay's accepted to the receiver's delivery.

  --sessions N        simulated sessions, an even number (default 200)
  --rate R            the fraction of sessions that send one message a second (default 0.01)
  --duration D        how long they send (default 30s; D as 500ms, 30s, 2m or seconds)
  --ramp N            sessions connected per second, at most (default 500)
  --relays URL,…      use these relays (pin a key with #key=…; pairs are spread over them)
                      instead of starting one; their memory and CPU are read only with
  --relay-pid PID,…   their process ids, in the same order
  --db DIR            the started relay's store (default: a fresh temporary directory)
  --store URL         or a PostgreSQL store for it
  --postgres-cluster N
                      start a PostgreSQL primary with a synchronous standby (a throwaway
                      cluster, as the tests and benchmarks start) and N relays on it (2 or
                      more), all sharing its key; pairs are spread over them
  --workers N         generator processes (default: one per 2,000 sessions, at least 2; at most
                      8,000 sessions each)
  --idle D            a quiet window before the messages, for the relay's idle CPU (default 5s)
  --drain D           how long to wait for the last deliveries and receipts (default 15s)
  --roster-sample F   the fraction of sessions that check their pair on the roster (default 1)
  --deadline D        give up after D in all (default: from the sessions, ramp and duration)
  --json              print one JSON object instead of the table`;

/** Sockets per generator process: well below an open-files limit of 20,000, with room for the process's own files. */
export const MAX_SESSIONS_PER_WORKER = 8_000;
/**
 * Sessions per generator process by default: the library keeps 4,096 direction keys and
 * public keys per process (envelope/seal.ts, identity/ed25519.ts), which a real process of
 * one session never fills; past 2,048 sessions (two readers each) a worker would derive
 * them again for every announcement and message, and spend its CPU on the generator's
 * artifact instead of on load.
 */
export const SESSIONS_PER_WORKER = 2_000;
/** Connections the started relay allows beyond the sessions: the probe that learns a relay's key, and slack. */
export const CONNECTION_MARGIN = 64;
const MAX_SESSIONS = 200_000;

export interface Options {
  sessions: number;
  rate: number;
  durationMs: number;
  rampPerSecond: number;
  /** Given relays (the URLs as given, pins included); empty: start one. */
  relays: string[];
  relayPids: number[];
  db: string | undefined;
  store: string | undefined;
  /** Relays to start on a PostgreSQL primary with a synchronous standby this run starts; 0: none. */
  postgresCluster: number;
  workers: number;
  idleMs: number;
  drainMs: number;
  rosterSample: number;
  deadlineMs: number;
  json: boolean;
}

export class UsageError extends Error {}

/** `500ms`, `30s`, `2m`, or a number of seconds. */
export function parseDuration(flag: string, text: string): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(text.trim());
  if (match === null) throw new UsageError(`--${flag} ${JSON.stringify(text)}: expected a duration such as 500ms, 30s or 2m`);
  const value = Number(match[1]);
  const unit = match[2] ?? 's';
  return Math.round(unit === 'ms' ? value : unit === 'm' ? value * 60_000 : value * 1000);
}

function number(flag: string, text: string | undefined, fallback: number, check: (n: number) => boolean, rule: string): number {
  if (text === undefined) return fallback;
  const n = Number(text);
  if (text.trim() === '' || !Number.isFinite(n) || !check(n)) throw new UsageError(`--${flag} ${JSON.stringify(text)}: ${rule}`);
  return n;
}

function list(text: string | undefined): string[] {
  return text === undefined ? [] : text.split(',').map((s) => s.trim()).filter((s) => s !== '');
}

export function parseOptions(argv: readonly string[]): Options | 'help' {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      sessions: { type: 'string' },
      rate: { type: 'string' },
      duration: { type: 'string' },
      ramp: { type: 'string' },
      relays: { type: 'string' },
      'relay-pid': { type: 'string' },
      db: { type: 'string' },
      store: { type: 'string' },
      'postgres-cluster': { type: 'string' },
      workers: { type: 'string' },
      idle: { type: 'string' },
      drain: { type: 'string' },
      'roster-sample': { type: 'string' },
      deadline: { type: 'string' },
      json: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
    allowPositionals: false,
  });
  if (values.help === true) return 'help';
  const sessions = number('sessions', values.sessions, 200, (n) => Number.isInteger(n) && n >= 2 && n % 2 === 0 && n <= MAX_SESSIONS, `an even whole number from 2 to ${MAX_SESSIONS}`);
  const rate = number('rate', values.rate, 0.01, (n) => n >= 0 && n <= 1, 'a fraction from 0 to 1');
  const rampPerSecond = number('ramp', values.ramp, 500, (n) => Number.isInteger(n) && n >= 1 && n <= 10_000, 'a whole number from 1 to 10000');
  const neededWorkers = Math.ceil(sessions / MAX_SESSIONS_PER_WORKER);
  const workers = number('workers', values.workers, Math.min(Math.max(Math.ceil(sessions / SESSIONS_PER_WORKER), 2), sessions / 2), (n) => Number.isInteger(n) && n >= neededWorkers && n <= sessions / 2, `a whole number from ${neededWorkers} (${MAX_SESSIONS_PER_WORKER} sessions each at most) to ${sessions / 2} (one pair each)`);
  const relays = list(values.relays);
  for (const url of relays) {
    const parsed = parseRelayUrl(url);
    if ('error' in parsed) throw new UsageError(`--relays: ${parsed.error}`);
  }
  const relayPids = list(values['relay-pid']).map((p) => number('relay-pid', p, 0, (n) => Number.isInteger(n) && n > 0, 'process ids'));
  if (relayPids.length > 0 && relayPids.length !== relays.length) throw new UsageError('--relay-pid takes one process id per relay of --relays, in the same order');
  if (relays.length > 0 && (values.db !== undefined || values.store !== undefined)) throw new UsageError('--db and --store are for the relay this run starts; not with --relays');
  if (values.db !== undefined && values.store !== undefined) throw new UsageError('--db or --store, not both');
  if (values.store !== undefined && !/^postgres(ql)?:\/\//.test(values.store)) throw new UsageError('--store takes a postgres:// URL');
  const postgresCluster = number('postgres-cluster', values['postgres-cluster'], 0, (n) => Number.isInteger(n) && n >= 2 && n <= 8, 'a number of relays from 2 to 8');
  if (postgresCluster > 0 && (relays.length > 0 || values.db !== undefined || values.store !== undefined)) throw new UsageError('--postgres-cluster starts its own relays and store: not with --relays, --db or --store');
  const durationMs = values.duration === undefined ? 30_000 : parseDuration('duration', values.duration);
  const idleMs = values.idle === undefined ? 5_000 : parseDuration('idle', values.idle);
  const drainMs = values.drain === undefined ? 15_000 : parseDuration('drain', values.drain);
  const rosterSample = number('roster-sample', values['roster-sample'], 1, (n) => n >= 0 && n <= 1, 'a fraction from 0 to 1');
  // Four times the ramp (a busy machine's generators connect slower than asked), a tenth
  // of a second per session checking the roster (three passes of a roster up to 1 MiB),
  // and a minute for the rest.
  const fallbackDeadline = 60_000 + (4 * sessions * 1000) / rampPerSecond + sessions * rosterSample * 100 + idleMs + durationMs + drainMs;
  const deadlineMs = values.deadline === undefined ? Math.round(fallbackDeadline) : parseDuration('deadline', values.deadline);
  return { sessions, rate, durationMs, rampPerSecond, relays, relayPids, db: values.db, store: values.store, postgresCluster, workers, idleMs, drainMs, rosterSample, deadlineMs, json: values.json === true };
}
