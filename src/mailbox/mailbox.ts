/**
 * The shared mailbox of one identity and session: `mailbox/<identity>/<session>.json`.
 *
 * Verified bodies are committed here before the relay is acknowledged. Fetching never
 * consumes; acknowledgement is explicit, idempotent and scoped to (sender key, msg_id).
 *
 * Commits from one process are grouped: operations that arrive while a commit is being
 * synced wait for it and then share the next append and fsync. Every commit runs under
 * the mailbox's sidecar lock and first reads what other processes appended, so several
 * MCP processes of one session can share a mailbox.
 */
import type { Envelope } from '../envelope/envelope.js';
import { InterlinkError, asStorageError } from '../errors.js';
import { log } from '../log.js';
import { withFileLock } from '../store/lock.js';
import { crashPoint } from '../store/crash-point.js';
import type { Recovery } from '../store/json-store.js';
import type { Op, Receipt, StoredRecord } from './format.js';
import { appendLines, compact, loadMailbox, readTail, shouldCompact, type Loaded } from './journal.js';
import { DEFAULT_LIMITS, DEFAULT_FETCH_LIMIT, clampFetchLimit, type Limits } from './rules.js';
import type { AckCounts, StoreOutcome } from './state.js';

export interface MailboxOptions {
  limits?: Limits;
  /** A read-only view takes no lock and never writes (for `inbox` and `status`). */
  readOnly?: boolean;
  lockTimeoutMs?: number;
  now?: () => number;
}

interface Job {
  op: Op;
  resolve: (result: StoreOutcome | AckCounts) => void;
  reject: (error: unknown) => void;
}

export interface FetchResult {
  messages: StoredRecord[];
  more: boolean;
}

export class Mailbox {
  private loaded: Loaded | undefined;
  private queue: Job[] = [];
  private flushing = false;
  private serial: Promise<unknown> = Promise.resolve();
  private readonly limits: Limits;
  private readonly now: () => number;
  /** Damaged files moved aside while this mailbox was open. */
  readonly recoveries: Recovery[] = [];

  private constructor(
    readonly path: string,
    private readonly options: MailboxOptions,
  ) {
    this.limits = options.limits ?? DEFAULT_LIMITS;
    this.now = options.now ?? Date.now;
  }

  static async open(path: string, options: MailboxOptions = {}): Promise<Mailbox> {
    const mailbox = new Mailbox(path, options);
    await mailbox.exclusive(() => (options.readOnly ? mailbox.refresh() : mailbox.locked(() => mailbox.syncUnderLock())));
    return mailbox;
  }

  /** Commits a verified message. Resolves once it is durable (or known to be a duplicate). */
  async store(envelope: Envelope, meta: { peer?: string } = {}): Promise<StoreOutcome> {
    const op: Op = { op: 'store', at: this.now(), envelope, ...(meta.peer !== undefined && { peer: meta.peer }) };
    return (await this.submit(op)) as StoreOutcome;
  }

  /** Idempotent; counts what changed. Never touches a message not named by its receipt. */
  async acknowledge(receipts: readonly Receipt[]): Promise<AckCounts> {
    if (receipts.length === 0) return { acknowledged: 0, already_acknowledged: 0, unknown: 0 };
    const op: Op = { op: 'ack', at: this.now(), receipts: receipts.map((r) => ({ sender: r.sender, msg_id: r.msg_id })) };
    return (await this.submit(op)) as AckCounts;
  }

  /** Current unread messages, non-progress first; consumes nothing. */
  async fetch(limit?: number): Promise<FetchResult> {
    const bounded = clampFetchLimit(limit);
    return this.exclusive(async () => {
      await this.refresh();
      const unread = this.state().unreadInFetchOrder();
      return { messages: unread.slice(0, bounded).map(clone), more: unread.length > bounded };
    });
  }

  /**
   * The last `limit` messages from `sender`, oldest first. With `consume`, exactly the
   * returned messages are acknowledged before this resolves.
   */
  async history(sender: string, options: { limit?: number; consume?: boolean } = {}): Promise<StoredRecord[]> {
    const limit = Math.max(1, Math.floor(options.limit ?? DEFAULT_FETCH_LIMIT));
    const selected = await this.exclusive(async () => {
      await this.refresh();
      const fromSender = [...this.state().all()].filter((r) => r.envelope.from === sender);
      return fromSender.slice(-limit);
    });
    if (options.consume === true) {
      const receipts = this.state().unacknowledgedReceipts(selected);
      if (receipts.length > 0) await this.acknowledge(receipts);
    }
    return this.exclusive(async () => selected.map((r) => clone(this.state().get(r.envelope.from, r.envelope.msg_id) ?? r)));
  }

  async get(sender: string, msgId: string): Promise<StoredRecord | undefined> {
    return this.exclusive(async () => {
      await this.refresh();
      const record = this.state().get(sender, msgId);
      return record && clone(record);
    });
  }

  async has(sender: string, msgId: string): Promise<boolean> {
    return this.exclusive(async () => {
      await this.refresh();
      return this.state().has(sender, msgId);
    });
  }

  async stats(): Promise<{ records: number; unread: number; bytes: number; tombstones: number }> {
    return this.exclusive(async () => {
      await this.refresh();
      return this.state().stats;
    });
  }

  async all(): Promise<StoredRecord[]> {
    return this.exclusive(async () => {
      await this.refresh();
      return [...this.state().all()].map(clone);
    });
  }

  private state() {
    if (!this.loaded) throw new InterlinkError('storage', `mailbox ${this.path} is not loaded`);
    return this.loaded.state;
  }

  private submit(op: Op): Promise<StoreOutcome | AckCounts> {
    if (this.options.readOnly) return Promise.reject(new InterlinkError('storage', 'this mailbox view is read-only'));
    return new Promise((resolve, reject) => {
      this.queue.push({ op, resolve, reject });
      if (!this.flushing) void this.drain();
    });
  }

  /** Commits queued jobs; jobs queued meanwhile form the next batch and share its fsync. */
  private async drain(): Promise<void> {
    this.flushing = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.queue;
        this.queue = [];
        await this.exclusive(() => this.commit(batch)).catch((err: unknown) => {
          for (const job of batch) job.reject(err);
        });
      }
    } finally {
      this.flushing = false;
    }
  }

  private async commit(batch: Job[]): Promise<void> {
    await this.locked(async () => {
      await this.syncUnderLock();
      const loaded = this.loaded!;
      const results: (StoreOutcome | AckCounts)[] = [];
      let lines = '';
      for (const job of batch) {
        const result = loaded.state.apply(job.op);
        results.push(result);
        if (changesState(result)) lines += JSON.stringify(job.op) + '\n';
      }
      if (lines.length > 0) {
        try {
          loaded.cursor = await appendLines(this.path, loaded.cursor, lines);
        } catch (err) {
          // Memory now runs ahead of disk; read the files again before the next commit.
          this.loaded = undefined;
          throw err;
        }
        crashPoint('mailbox.append.after_sync');
        if (shouldCompact(loaded.cursor)) await this.compactQuietly(loaded);
      }
      batch.forEach((job, i) => job.resolve(results[i]!));
    });
  }

  /** Compaction only re-writes durable state; if it fails the journal still holds it all. */
  private async compactQuietly(loaded: Loaded): Promise<void> {
    try {
      loaded.cursor = await compact(this.path, loaded.state, loaded.cursor.generation + 1);
    } catch (err) {
      this.loaded = undefined;
      log.warn('mailbox_compaction_failed', { path: this.path, error: (err as Error).message });
    }
  }

  /** Brings memory up to date with the files; the caller holds the lock, so it may repair. */
  private async syncUnderLock(): Promise<void> {
    if (this.loaded) {
      const tail = readTail(this.path, this.loaded.cursor);
      if (tail.kind === 'tail' && tail.damage === undefined) {
        for (const op of tail.ops) this.loaded.state.apply(op);
        this.loaded.cursor = { ...this.loaded.cursor, offset: tail.offset };
        return;
      }
    }
    const loaded = await loadMailbox(this.path, this.limits, true);
    this.recoveries.push(...loaded.recoveries);
    this.loaded = loaded;
  }

  /** Brings memory up to date without the lock, never writing. */
  private async refresh(): Promise<void> {
    if (this.loaded) {
      const tail = readTail(this.path, this.loaded.cursor);
      if (tail.kind === 'tail') {
        for (const op of tail.ops) this.loaded.state.apply(op);
        this.loaded.cursor = { ...this.loaded.cursor, offset: tail.offset };
        return;
      }
    }
    this.loaded = await loadMailbox(this.path, this.limits, false);
  }

  private locked<T>(fn: () => Promise<T>): Promise<T> {
    return withFileLock(this.path, fn, this.options.lockTimeoutMs !== undefined ? { timeoutMs: this.options.lockTimeoutMs } : {});
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

function changesState(result: StoreOutcome | AckCounts): boolean {
  return 'outcome' in result ? result.outcome === 'stored' : result.acknowledged > 0;
}

function clone(record: StoredRecord): StoredRecord {
  return { ...record, states: record.states.map((s) => ({ ...s })) };
}

