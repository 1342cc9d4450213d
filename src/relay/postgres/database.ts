/**
 * The connection to the relay's PostgreSQL database: the pool, the one listening
 * connection, and what a database failure means in a sentence. We use postgres.js
 * (`postgres` on npm) rather than `pg`: it takes a connection string with several hosts
 * and `target_session_attrs=primary`, so a relay follows a promoted standby by itself, its
 * LISTEN connection re-subscribes after every reconnect and says so, and it has no
 * dependencies of its own.
 */
import postgres from 'postgres';
import { z } from 'zod';
import { InterlinkError, messageOf } from '../../errors.js';
import { log } from '../../log.js';

export type Sql = postgres.Sql;

/** Connections per relay process; `?max=N` in the connection string changes it. */
export const DEFAULT_POOL_SIZE = 10;
/** A relay waits this long for a connection before it refuses the send (a failover takes longer: the sender keeps it). */
const CONNECT_TIMEOUT_S = 5;

/** PostgreSQL's type ids of the arrays the relay sends and reads. */
const TEXT_ARRAY = 1009;
const BIGINT_ARRAY = 1016;

/**
 * An array literal with every element quoted (`{"a","b\"c"}`), `null` as NULL: what a
 * `text[]` or `bigint[]` parameter is sent as.
 */
export function arrayLiteral(values: readonly (string | number | null)[]): string {
  return `{${values.map((v) => (v === null ? 'NULL' : `"${String(v).replace(/[\\"]/g, (c) => `\\${c}`)}"`)).join(',')}}`;
}

/** A `bigint[]` as PostgreSQL writes it (`{1,2,3}`, no NULLs), its elements as text like every int8. */
export function parseBigintArray(text: string): string[] {
  const inner = text.slice(1, -1);
  return inner === '' ? [] : inner.split(',');
}

/**
 * The array types, given here instead of fetched: postgres.js would otherwise ask the
 * catalog for them as the first query of every new connection, and that query's failure
 * (a connection cut while it starts, as in a failover) escapes as an unhandled rejection,
 * which ends the relay process (porsager/postgres#1192, #1223).
 */
const ARRAY_TYPES = {
  textArray: { to: TEXT_ARRAY, from: [TEXT_ARRAY], serialize: arrayLiteral, parse: (text: string) => text },
  bigintArray: { to: BIGINT_ARRAY, from: [BIGINT_ARRAY], serialize: arrayLiteral, parse: parseBigintArray },
};

/** `postgres://` or `postgresql://`, one or several `host:port` pairs. */
export function isPostgresUrl(text: string): boolean {
  return /^postgres(ql)?:\/\//.test(text);
}

/** The connection string without its password, for logs and errors. */
export function redactedUrl(url: string): string {
  return url.replace(/^(postgres(?:ql)?:\/\/[^:@/]*):[^@/]*@/, '$1:***@');
}

/** `?max=N` in the connection string, or the default. */
function poolSizeOf(url: string): number {
  const named = /[?&]max=([^&#]*)/.exec(url)?.[1];
  if (named === undefined) return DEFAULT_POOL_SIZE;
  if (!/^[1-9][0-9]{0,3}$/.test(named)) throw new InterlinkError('usage', `--store: max=${JSON.stringify(named)} is not a pool size (a whole number from 1 to 9999)`);
  return Number(named);
}

/** `onClose` hears of each connection of the pool that closes, whoever closed it (acks.ts says why). */
export function connect(url: string, onClose?: () => void): Sql {
  if (!isPostgresUrl(url)) throw new InterlinkError('usage', `--store ${JSON.stringify(redactedUrl(url))} is not a postgres:// connection string`);
  // postgres.js prefers an option given here to the same one in the URL (and would take the
  // URL's `max` as text): the pool size is read here, the connect timeout left to the URL.
  const max = poolSizeOf(url);
  try {
    return postgres(url, {
      max,
      fetch_types: false,
      types: ARRAY_TYPES,
      ...(!/[?&]connect_timeout=/.test(url) && { connect_timeout: CONNECT_TIMEOUT_S }),
      onnotice: (notice) => log.debug('relay_db_notice', { message: String(notice.message) }),
      connection: { application_name: 'interlink-relay' },
      ...(onClose !== undefined && { onclose: () => onClose() }),
    });
  } catch (err) {
    throw new InterlinkError('usage', `--store ${redactedUrl(url)}: ${messageOf(err)}`, undefined, { cause: err });
  }
}

const CONNECTION_LOST = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'CONNECT_TIMEOUT', 'CONNECTION_CLOSED', 'CONNECTION_DESTROYED', 'CONNECTION_ENDED']);

/**
 * A database failure as one sentence with its cause, as a `storage` error: the relay
 * refuses the frame with it, and the sender keeps the message in its outbox.
 */
export function databaseError(err: unknown): InterlinkError {
  if (err instanceof InterlinkError) return err;
  const code = typeof err === 'object' && err !== null && 'code' in err ? String(err.code) : undefined;
  let why: string;
  if (code !== undefined && CONNECTION_LOST.has(code)) why = `the relay's database is unreachable (${code}); no writable primary answered`;
  else if (code === '25006') why = "the relay's database is read-only: it is a standby, and no primary is writable";
  else if (code === '57P01' || code === '57P02' || code === '57P03') why = `the relay's database is shutting down or starting up (${code})`;
  else if (code === '53300') why = "the relay's database has no connection free (53300)";
  else why = `the relay's database failed: ${messageOf(err)}`;
  return new InterlinkError('storage', why, undefined, { cause: err });
}

/**
 * How long one database call may take. While no primary is writable, postgres.js keeps a
 * query waiting and tries the hosts again and again; the relay answers the sender instead.
 */
export const QUERY_DEADLINE_MS = 10_000;

/**
 * Runs `work` and turns any database failure into a `storage` error; past the deadline the
 * caller is answered with a refusal, and the query is left to finish or fail on its own.
 * It is not withdrawn: postgres.js strands a connection whose first query is withdrawn
 * while it connects (the connection opens, never runs it, and never serves another), and
 * during a failover every connection is connecting, so withdrawing left a relay with no
 * usable connection long after a primary was back. A send refused at the deadline may
 * therefore still commit: once its sender offers it again it is stored twice, and
 * receivers discard the copy by (`from`, `msg_id`), as for any redelivery. How much is left
 * running that way is bounded by `DatabaseCalls`, which stops issuing calls once the
 * database is found down.
 */
export async function guarded<T>(work: () => PromiseLike<T>, deadlineMs = QUERY_DEADLINE_MS): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await new Promise<T>((resolve, reject) => {
      timer = setTimeout(() => reject(new InterlinkError('storage', `the relay's database did not answer within ${deadlineMs / 1000} s: no writable primary is reachable`)), deadlineMs);
      Promise.resolve(work()).then(resolve, reject);
    });
  } catch (err) {
    throw databaseError(err);
  } finally {
    clearTimeout(timer);
  }
}

/** Failures that say the database cannot take calls now (not that one call was wrong). */
const OUTAGE_CODES = new Set([...CONNECTION_LOST, '25006', '57P01', '57P02', '57P03']);

/** Whether a failure says no writable primary is there (pure). */
export function isOutage(err: unknown): boolean {
  const cause = err instanceof InterlinkError && err.cause !== undefined ? err.cause : err;
  if (err instanceof InterlinkError && cause === err) return /did not (answer|commit) within/.test(err.message);
  const code = typeof cause === 'object' && cause !== null && 'code' in cause ? String(cause.code) : undefined;
  return code !== undefined && OUTAGE_CODES.has(code);
}

/** A bigint column as the driver returns it (text), checked to be a safe integer. */
export const int8 = z
  .union([z.string().regex(/^-?\d{1,16}$/), z.number().int()])
  .transform(Number)
  .refine(Number.isSafeInteger, 'must be a safe integer');
