/**
 * The relay's queues as the server uses them: in memory, or with `--db` a journaled
 * store held under `<db>/relay.lock`; the ids it issues; and which of them are committed,
 * and so deliverable (DESIGN.md "The relay": "What it guarantees" and "The durable
 * store"); and the key that turns a sender's address into the `src` its messages are
 * counted by (fair shares). The queue rules themselves are the pure `RelayQueueState` in
 * `queues.ts`.
 */
import { createHmac, randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { open } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { errnoCode, InterlinkError, messageOf } from '../errors.js';
import { log } from '../log.js';
import { JournalStore } from '../store/journal-store.js';
import { withFileLock } from '../store/lock.js';
import { writeFileAtomic } from '../store/atomic.js';
import { makePrivateDir, NO_FOLLOW } from '../store/private.js';
import type { Origin, QueueStats, QueueStore } from './queue-store.js';
import { RelayQueueState, relayQueueFormat, type EnqueueResult, type QueueData, type QueuedMessage, type QueueOp, type QueueResult } from './queues.js';
import type { QueueLimits, Share } from './limits.js';
import { SOURCE_KEY_BYTES, sourceGroup } from './shares.js';

/** How long a new relay waits for another relay that holds the same --db. */
const DB_LOCK_TIMEOUT_MS = 2_000;

async function readNoFollow(path: string): Promise<Buffer> {
  const handle = await open(path, constants.O_RDONLY | NO_FOLLOW);
  try {
    return await handle.readFile();
  } finally {
    await handle.close();
  }
}

/** `<db>/sources.key` as it is, whatever its length; undefined when there is none. */
async function readSourceKey(dir: string): Promise<Buffer | undefined> {
  return readNoFollow(join(dir, 'sources.key')).catch((err: unknown) => {
    if (errnoCode(err) === 'ENOENT') return undefined;
    throw err;
  });
}

/**
 * `<db>/sources.key`, made on first use: the HMAC key of `src`. The files keep no
 * sender's address in the clear, while the same address still maps to the same `src`
 * after a restart. (With this key an IPv4 address can be found again by trying all of
 * them: it keeps addresses out of copies of the queues, not from whoever holds the key.)
 */
async function loadSourceKey(dir: string): Promise<Buffer> {
  const path = join(dir, 'sources.key');
  const existing = await readSourceKey(dir);
  if (existing?.length === SOURCE_KEY_BYTES) return existing;
  // A damaged key only restarts every address's count: the messages stay queued.
  if (existing !== undefined) log.warn('relay_source_key_replaced', { path, bytes: existing.length });
  const key = randomBytes(SOURCE_KEY_BYTES);
  await writeFileAtomic(path, key);
  return key;
}

interface QueueBackend {
  submit(op: QueueOp): Promise<QueueResult>;
  /** After the last submit settled. */
  release(): Promise<void>;
}

/** Store directories held by relays of this process (the file lock queues callers within a process instead of refusing them). */
const heldDbs = new Set<string>();

/**
 * Holds `<db>/relay.lock` until released: two relays on one store would issue the same
 * ids. `relay migrate` holds it too, so no relay starts on a store being moved.
 */
export async function holdDbLock(dir: string): Promise<() => Promise<void>> {
  const busy = (why: string, cause?: unknown) => new InterlinkError('busy', `${dir} is in use by another relay (${why})`, undefined, { cause });
  if (heldDbs.has(dir)) throw busy('in this process');
  heldDbs.add(dir);
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let acquired!: () => void;
  const held = new Promise<void>((r) => (acquired = r));
  const lock = withFileLock(
    join(dir, 'relay'),
    async () => {
      acquired();
      await released;
    },
    { timeoutMs: DB_LOCK_TIMEOUT_MS },
  );
  try {
    await Promise.race([held, lock]);
  } catch (err) {
    heldDbs.delete(dir);
    throw busy(messageOf(err), err);
  }
  return async () => {
    release();
    await lock;
    heldDbs.delete(dir);
  };
}

/** What a `--db` store holds, for `relay migrate`. */
export interface DbContents {
  data: QueueData;
  /** The HMAC key of `src`; undefined when missing or damaged (a relay would make a new one). */
  sourceKey: Buffer | undefined;
}

/**
 * The queues under `dir` as a relay starting there would load them (the snapshot, then
 * the journal's tail), read without writing anything, and its source key. The caller
 * holds the store's lock (`holdDbLock`), so nothing changes the files meanwhile.
 */
export async function readDbContents(dir: string): Promise<DbContents> {
  const store = await JournalStore.open(join(dir, 'queues.json'), relayQueueFormat(), { readOnly: true });
  try {
    const data = await store.read((state) => state.toData());
    const key = await readSourceKey(dir);
    return { data, sourceKey: key?.length === SOURCE_KEY_BYTES ? key : undefined };
  } finally {
    await store.close();
  }
}

/** The queues of one relay process: in memory, or journaled under `--db` (the embedded store). */
export class RelayStorage implements QueueStore {
  /** Replaced when the durable store reloads its files: always the state its commits change. */
  private queues: RelayQueueState;
  private backend!: QueueBackend;
  /** Ids are assigned here, before the commit that applies them. */
  private nextId = 0;
  /** Only ids below this are committed, and so deliverable. */
  private deliverableBelow = 0;
  /** The connection each id was sent on, until its commit settles (memory only). */
  private readonly connectionOf = new Map<number, string>();
  /** In memory a fresh key per run: nothing outlives it. */
  private sourceKey: Buffer = randomBytes(SOURCE_KEY_BYTES);

  private constructor(
    readonly limits: QueueLimits,
    private readonly now: () => number,
    private readonly onCommit: ((seconds: number) => void) | undefined,
    readonly kind: 'memory' | 'journal',
  ) {
    this.queues = new RelayQueueState(limits);
  }

  /**
   * The queues under `dbDir` (created if missing), or in memory without it. `onCommit` is
   * told how long each commit took, in seconds of the monotonic clock.
   */
  static async open(dbDir: string | undefined, limits: QueueLimits, now: () => number, onCommit?: (seconds: number) => void): Promise<RelayStorage> {
    const storage = new RelayStorage(limits, now, onCommit, dbDir === undefined ? 'memory' : 'journal');
    storage.backend = dbDir === undefined ? storage.inMemory() : await storage.durable(resolve(dbDir));
    // Ids continue from the clock (in microseconds) when that is ahead of the store: a
    // relay restarted without its queues never reissues an id a client may still hold.
    storage.nextId = Math.max(storage.queues.nextId, Math.floor(now()) * 1000);
    storage.deliverableBelow = storage.queues.nextId;
    return storage;
  }

  private inMemory(): QueueBackend {
    const state = this.queues;
    return { submit: async (op) => state.apply(op, op.op === 'enq' ? this.connectionOf.get(op.id) : undefined), release: async () => {} };
  }

  private async durable(dir: string): Promise<QueueBackend> {
    await makePrivateDir(dir);
    const releaseLock = await holdDbLock(dir);
    try {
      this.sourceKey = await loadSourceKey(dir);
      const format = relayQueueFormat(
        this.limits,
        (state) => (this.queues = state),
        (id) => this.connectionOf.get(id),
      );
      const store = await JournalStore.open(join(dir, 'queues.json'), format);
      for (const r of store.recoveries) log.error('relay_store_recovered', { ...r });
      return {
        submit: (op) => store.submit(op),
        release: async () => {
          await store.close();
          await releaseLock();
        },
      };
    } catch (err) {
      await releaseLock();
      throw err;
    }
  }

  stats(): QueueStats {
    return this.queues.stats;
  }

  async refresh(): Promise<void> {}

  /** A new id, above every id issued or stored so far. */
  private issueId(): number {
    const id = Math.max(this.nextId, this.queues.nextId);
    this.nextId = id + 1;
    return id;
  }

  /**
   * Commits (with `--db`: fsyncs) the message under a new id, counted against its sender's
   * shares. The id is issued now, before the commit: commits apply in submission order, so
   * once this one returned, it and every id below are committed and may be delivered.
   */
  async enqueue(route: string, payload: string, origin: Origin): Promise<EnqueueResult> {
    const id = this.issueId();
    const src = this.srcOf(origin.address);
    this.connectionOf.set(id, origin.connection);
    try {
      const result = await this.submit({ op: 'enq', at: this.now(), route, id, payload, ...(src !== undefined && { src }) });
      if (result.outcome === 'acked' || result.outcome === 'expired') throw new Error(`an enq op was answered ${result.outcome}`);
      if (result.outcome === 'enqueued') this.deliverableBelow = Math.max(this.deliverableBelow, result.id + 1);
      return result;
    } finally {
      this.connectionOf.delete(id);
    }
  }

  /** What a sender holds queued, by its address and by its connection. */
  held(origin: Origin): { address: Share; connection: Share } {
    return this.queues.held({ src: this.srcOf(origin.address), connection: origin.connection });
  }

  /** The `src` a message from `address` is counted by: a keyed hash of the address (IPv6: its /64). */
  private srcOf(address: string | undefined): string | undefined {
    const group = sourceGroup(address);
    return group === undefined ? undefined : createHmac('sha256', this.sourceKey).update(group).digest('base64url').slice(0, 22);
  }

  /** Ids no longer queued cost no commit. */
  async acknowledge(route: string, ids: readonly number[]): Promise<number> {
    if (!ids.some((id) => this.queues.has(route, id))) return 0;
    const result = await this.submit({ op: 'ack', at: this.now(), route, ids: [...ids] });
    return result.outcome === 'acked' ? result.removed : 0;
  }

  async expire(maxAgeMs: number): Promise<number> {
    const now = this.now();
    const result = await this.submit({ op: 'expire', at: now, before: now - maxAgeMs });
    return result.outcome === 'expired' ? result.removed : 0;
  }

  /** The route's committed messages after `after`, in id order. */
  read(route: string, after: number, limit: number): QueuedMessage[] {
    const messages: QueuedMessage[] = [];
    let cursor = after;
    while (messages.length < limit) {
      const message = this.queues.nextAfter(route, cursor, this.deliverableBelow);
      if (message === undefined) break;
      messages.push(message);
      cursor = message.id;
    }
    return messages;
  }

  /** Only this process writes these queues: nothing arrives from elsewhere. */
  subscribe(): void {}

  private submit(op: QueueOp): Promise<QueueResult> {
    const started = performance.now();
    const commit = this.backend.submit(op);
    const onCommit = this.onCommit;
    if (onCommit !== undefined) void commit.then(() => onCommit((performance.now() - started) / 1000), () => undefined);
    return commit;
  }

  /** After the last commit settled. */
  release(): Promise<void> {
    return this.backend.release();
  }
}
