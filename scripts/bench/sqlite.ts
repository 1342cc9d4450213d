/**
 * The yardstick for the mailbox: better-sqlite3 in WAL mode with synchronous=FULL, so a
 * commit is durable when it returns, as a mailbox commit is.
 *
 * better-sqlite3 is a native module that compiles on install, so it is not a dependency
 * of the project: `npm run bench:sqlite-setup` installs it for the benchmark only. It is
 * loaded at run time, and when it is missing the baseline is reported as skipped.
 */
import { importOptional } from './optional-import.js';
import type { Envelope } from '../../src/envelope/envelope.js';

export const SQLITE_SETUP = 'npm run bench:sqlite-setup';
export const SQLITE_MISSING = `better-sqlite3 is not installed (\`${SQLITE_SETUP}\` installs it)`;

/** The part of better-sqlite3's API the baseline uses. */
interface Statement {
  run(...params: unknown[]): unknown;
  get(...params: unknown[]): unknown;
}

interface Database {
  pragma(source: string): unknown;
  exec(source: string): unknown;
  prepare(source: string): Statement;
  transaction(fn: () => void): () => void;
  close(): unknown;
}

type DatabaseConstructor = new (path: string) => Database;

/** The module's default export is the Database class; nothing more can be checked before use. */
function isDatabaseConstructor(value: unknown): value is DatabaseConstructor {
  return typeof value === 'function';
}

export interface SqliteBaseline {
  /** SQLite's own version, as the installed better-sqlite3 reports it. */
  sqliteVersion: string;
  open(path: string): SqliteRecords;
}

let loading: Promise<SqliteBaseline | undefined> | undefined;

/** better-sqlite3 when it is installed; undefined when it is not (any other failure throws). */
export function loadSqlite(): Promise<SqliteBaseline | undefined> {
  loading ??= importSqlite();
  return loading;
}

async function importSqlite(): Promise<SqliteBaseline | undefined> {
  const loaded = await importOptional('better-sqlite3');
  if (loaded === undefined) return undefined;
  const constructor = typeof loaded === 'object' && loaded !== null && 'default' in loaded ? loaded.default : undefined;
  if (!isDatabaseConstructor(constructor)) throw new Error('better-sqlite3 has no default export to open a database with');
  return { sqliteVersion: sqliteVersion(constructor), open: (path) => new SqliteRecords(new constructor(path)) };
}

function sqliteVersion(Database: DatabaseConstructor): string {
  const db = new Database(':memory:');
  try {
    const row: unknown = db.prepare('SELECT sqlite_version() AS v').get();
    return typeof row === 'object' && row !== null && 'v' in row ? String(row.v) : 'unknown';
  } finally {
    db.close();
  }
}

export class SqliteRecords {
  private readonly insertStatement: Statement;

  constructor(private readonly db: Database) {
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    db.exec('CREATE TABLE IF NOT EXISTS records (id TEXT PRIMARY KEY, body TEXT NOT NULL)');
    this.insertStatement = db.prepare('INSERT INTO records (id, body) VALUES (?, ?)');
  }

  /** One transaction for the lot, then a checkpoint, so measuring starts from an empty WAL. */
  prefill(envelopes: readonly Envelope[]): void {
    this.db.transaction(() => {
      for (const envelope of envelopes) this.insertStatement.run(recordId(envelope), JSON.stringify(envelope));
    })();
    this.db.pragma('wal_checkpoint(TRUNCATE)');
  }

  /** One row in its own transaction; durable when it returns. */
  insert(envelope: Envelope): void {
    this.insertStatement.run(recordId(envelope), JSON.stringify(envelope));
  }

  /** Frames now in the WAL; SQLite checkpoints (and restarts the WAL) when it reaches 1,000. */
  walFrames(): number {
    const rows: unknown = this.db.pragma('wal_checkpoint(PASSIVE)');
    const row: unknown = Array.isArray(rows) ? rows[0] : undefined;
    return typeof row === 'object' && row !== null && 'log' in row ? Number(row.log) : -1;
  }

  count(): number {
    const row: unknown = this.db.prepare('SELECT count(*) AS n FROM records').get();
    return typeof row === 'object' && row !== null && 'n' in row ? Number(row.n) : -1;
  }

  close(): void {
    this.db.close();
  }
}

/** The mailbox's receipt key: sender and msg_id. */
function recordId(envelope: Envelope): string {
  return `${envelope.from} ${envelope.msg_id}`;
}
