/**
 * The yardstick for the mailbox: better-sqlite3 in WAL mode with synchronous=FULL, so a
 * commit is durable when it returns, as a mailbox commit is.
 */
import Database from 'better-sqlite3';
import type { Envelope } from '../../src/envelope/envelope.js';

export class SqliteRecords {
  private readonly insertStatement: Database.Statement<[string, string]>;

  private constructor(private readonly db: Database.Database) {
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    db.exec('CREATE TABLE IF NOT EXISTS records (id TEXT PRIMARY KEY, body TEXT NOT NULL)');
    this.insertStatement = db.prepare('INSERT INTO records (id, body) VALUES (?, ?)');
  }

  static open(path: string): SqliteRecords {
    return new SqliteRecords(new Database(path));
  }

  static version(): string {
    const db = new Database(':memory:');
    try {
      const row: unknown = db.prepare('SELECT sqlite_version() AS v').get();
      return typeof row === 'object' && row !== null && 'v' in row ? String(row.v) : 'unknown';
    } finally {
      db.close();
    }
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
