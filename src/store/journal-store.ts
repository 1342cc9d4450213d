/**
 * A journaled store in use: the state in memory, kept in step with the files, and a
 * commit queue.
 *
 * Ops from one process are grouped: ops submitted while a commit is being synced wait
 * for it and then share the next append and fsync. Every commit runs under the store's
 * sidecar lock and first reads what other processes appended, so several processes can
 * share one store. A read-only view takes no lock and never writes.
 */
import { asStorageError, messageOf } from '../errors.js';
import { log } from '../log.js';
import { crashPoint } from './crash-point.js';
import type { Recovery } from './json-store.js';
import { closeSync } from 'node:fs';
import { journalLine } from './journal-lines.js';
import { appendLines, compact, cutBack, loadJournaled, openJournal, readTail, shouldCompact, type JournalFormat, type Loaded } from './journal.js';
import { letGoOfKept, withFileLock } from './lock.js';
import { InterlinkError } from '../errors.js';

/** How long a lazily submitted op may wait for company before it is committed alone. */
const LINGER_MS = 20;
/**
 * How long the sidecar lock stays held after a commit, for the next one (lock.ts): a
 * session committing under load takes the lock once per burst. Another process writing
 * the same file waits at most about this much longer (it marks the lock, and the holder
 * lets go at its next commit or when this runs out).
 */
const KEEP_LOCK_MS = 100;

export interface JournalStoreOptions {
  readOnly?: boolean;
  lockTimeoutMs?: number;
}

interface Job<Op, Result> {
  op: Op;
  /** Lazy (submitLazily): when it must be committed even alone (Date.now() clock); undefined for an op a caller waits on. */
  due?: number;
  resolve: (result: Result) => void;
  reject: (error: unknown) => void;
}

export class JournalStore<State, Op, Result, Data> {
  private loaded: Loaded<State> | undefined;
  private queue: Job<Op, Result>[] = [];
  private flushing = false;
  private lingerTimer: NodeJS.Timeout | undefined;
  /** When the linger timer fires (Date.now() clock). */
  private lingerDue = 0;
  private serial: Promise<unknown> = Promise.resolve();
  /** The journal kept open between commits (opening it each time costs more than the write). */
  private journal: { fd: number; ino: number } | undefined;
  /** Damaged files moved aside while this store was open. */
  readonly recoveries: Recovery[] = [];

  private constructor(
    readonly path: string,
    private readonly format: JournalFormat<State, Op, Result, Data>,
    private readonly options: JournalStoreOptions,
  ) {}

  static async open<State, Op, Result, Data>(
    path: string,
    format: JournalFormat<State, Op, Result, Data>,
    options: JournalStoreOptions = {},
  ): Promise<JournalStore<State, Op, Result, Data>> {
    const store = new JournalStore(path, format, options);
    await store.exclusive(() => (options.readOnly ? store.refresh() : store.locked(() => store.syncUnderLock())));
    return store;
  }

  /** Commits one op; resolves with its result once it is durable (or changed nothing). */
  submit(op: Op): Promise<Result> {
    if (this.options.readOnly) return Promise.reject(new InterlinkError('storage', `${this.path} is open read-only`));
    return new Promise((resolve, reject) => {
      this.queue.push({ op, resolve, reject });
      this.cancelLinger();
      if (!this.flushing) void this.drain();
    });
  }

  /**
   * Commits an op that nobody waits on, within `lingerMs` or with the next commit,
   * whichever comes first: records of facts already true elsewhere (a relay accepted a
   * message, a receiver reported one) share a commit instead of each costing one, and do
   * not hold up the commit a caller waits on. Resolves when durable.
   */
  submitLazily(op: Op, lingerMs = LINGER_MS): Promise<Result> {
    if (this.options.readOnly) return Promise.reject(new InterlinkError('storage', `${this.path} is open read-only`));
    return new Promise((resolve, reject) => {
      this.queue.push({ op, due: Date.now() + lingerMs, resolve, reject });
      // While a commit runs, the drain arms the timer after it, if no waited-on op came.
      if (!this.flushing) this.linger();
    });
  }

  /** Arms the timer for the earliest due lazy op waiting (only lazy ops wait, or the drain would take them). */
  private linger(): void {
    let due = Number.POSITIVE_INFINITY;
    for (const job of this.queue) if (job.due !== undefined && job.due < due) due = job.due;
    if (due === Number.POSITIVE_INFINITY || (this.lingerTimer !== undefined && this.lingerDue <= due)) return;
    clearTimeout(this.lingerTimer);
    this.lingerDue = due;
    this.lingerTimer = setTimeout(() => {
      this.lingerTimer = undefined;
      if (!this.flushing) void this.drain(true);
    }, Math.max(0, due - Date.now()));
  }

  /** Runs `fn` on the current state (brought up to date with the files first). */
  read<T>(fn: (state: State) => T): Promise<T> {
    return this.exclusive(async () => {
      await this.refresh();
      return fn(this.state());
    });
  }

  private state(): State {
    if (!this.loaded) throw new InterlinkError('storage', `${this.path} is not loaded`);
    return this.loaded.state;
  }

  /**
   * Commits what waits, batch after batch, while a waited-on op is among it (or once, for
   * everything, when a lazy op fell due). Lazy ops left alone wait for their time.
   */
  private async drain(lingerOver = false): Promise<void> {
    this.flushing = true;
    let all = lingerOver;
    try {
      while (this.queue.length > 0 && (all || this.queue.some((job) => job.due === undefined))) {
        all = false;
        const batch = this.queue;
        this.queue = [];
        await this.exclusive(() => this.commit(batch)).catch((err: unknown) => {
          for (const job of batch) job.reject(err);
        });
      }
    } finally {
      this.flushing = false;
      if (this.queue.length > 0) this.linger();
    }
  }

  private async commit(batch: Job<Op, Result>[]): Promise<void> {
    await this.locked(async () => {
      // Even under a lock kept since our last commit: one stat, which also notices files replaced by hand.
      await this.syncUnderLock();
      const loaded = this.loaded!;
      const results: Result[] = [];
      let lines = '';
      for (const job of batch) {
        const result = this.format.apply(loaded.state, job.op);
        results.push(result);
        if (this.format.changes(result)) lines += journalLine(job.op);
      }
      if (lines.length > 0) {
        let fd: number | undefined;
        try {
          fd = this.journalFd(loaded.cursor.ino);
          loaded.cursor = await appendLines(fd, loaded.cursor, lines, this.format.label);
        } catch (err) {
          // The batch is reported failed, so none of it may come back: cut what was written.
          const clean = fd === undefined || cutBack(fd, loaded.cursor.offset);
          // Memory now runs ahead of disk; read the files again before the next commit.
          this.loaded = undefined;
          this.closeJournal();
          if (clean) throw err;
          throw new InterlinkError('storage_uncertain', `${asStorageError(err, this.path).message}, and the partial write could not be undone: what this commit held may or may not be kept`);
        }
        crashPoint(`${this.format.label}.append.after_sync`);
        if (shouldCompact(loaded.cursor)) await this.compactQuietly(loaded);
      }
      batch.forEach((job, i) => job.resolve(results[i]!));
    });
  }

  /** Compaction only re-writes durable state; if it fails the journal still holds it all. */
  private async compactQuietly(loaded: Loaded<State>): Promise<void> {
    try {
      loaded.cursor = await compact(this.path, this.format, loaded.state, loaded.cursor.generation + 1);
    } catch (err) {
      this.loaded = undefined;
      log.warn('compaction_failed', { path: this.path, error: messageOf(err) });
    }
  }

  /** Brings memory up to date with the files; the caller holds the lock, so it may repair. */
  private async syncUnderLock(): Promise<void> {
    // A journal from before line checksums is read whole, which rewrites it checked.
    if (this.loaded?.cursor.checked && this.applyTail(true)) return;
    const loaded = await loadJournaled(this.path, this.format, true);
    this.recoveries.push(...loaded.recoveries);
    this.loaded = loaded;
  }

  /** Brings memory up to date without the lock, never writing. */
  private async refresh(): Promise<void> {
    if (this.loaded && this.applyTail(false)) return;
    this.loaded = await loadJournaled(this.path, this.format, false);
  }

  /** Applies what others appended; false when the files must be read again whole. */
  private applyTail(locked: boolean): boolean {
    const loaded = this.loaded!;
    const tail = readTail(this.path, loaded.cursor, this.format.opSchema);
    // Under the lock, damage is repaired by a full load; a reader just stops before it.
    if (tail.kind === 'replaced' || (locked && tail.damage !== undefined)) return false;
    for (const op of tail.ops) this.format.apply(loaded.state, op);
    loaded.cursor = { ...loaded.cursor, offset: tail.offset };
    return true;
  }

  private cancelLinger(): void {
    clearTimeout(this.lingerTimer);
    this.lingerTimer = undefined;
  }

  /** The open journal of inode `ino` (the cursor's), reopened after a compaction replaced it. */
  private journalFd(ino: number): number {
    if (this.journal?.ino !== ino) {
      this.closeJournal();
      this.journal = openJournal(this.path);
    }
    return this.journal.fd;
  }

  private closeJournal(): void {
    if (this.journal) closeSync(this.journal.fd);
    this.journal = undefined;
  }

  /** Waits for queued commits, then lets go of the journal. The store can still be read. */
  async close(): Promise<void> {
    this.cancelLinger();
    while (this.queue.length > 0 || this.flushing) {
      if (!this.flushing) void this.drain(true);
      await this.exclusive(async () => undefined);
    }
    this.cancelLinger();
    await this.exclusive(async () => this.closeJournal());
    if (!this.options.readOnly) await letGoOfKept(this.path);
  }

  private locked<T>(fn: () => Promise<T>): Promise<T> {
    return withFileLock(this.path, fn, { keepMs: KEEP_LOCK_MS, ...(this.options.lockTimeoutMs !== undefined && { timeoutMs: this.options.lockTimeoutMs }) });
  }

  /** In-process serialization of everything that touches the in-memory state. */
  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.serial
      .catch(() => undefined)
      .then(fn)
      .catch((err: unknown) => {
        throw asStorageError(err, this.path);
      });
    this.serial = run;
    return run;
  }
}
