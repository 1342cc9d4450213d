/**
 * Sends on PostgreSQL, stored in batches per connection (DESIGN.md "The relay": "Where the
 * queues live", "Order per route without gaps" and "Bounds in the same transaction"): each
 * batch is one call of `relay_enqueue_readers` (schema.ts), answered only after its commit,
 * with the fair shares of the sender's address and connection checked in the same
 * transaction. What a sender holds is counted by `src` (a keyed hash of its address group,
 * the same in every relay of the database) and by `origin` (this process and the
 * connection).
 */
import { createHmac } from 'node:crypto';
import { z } from 'zod';
import { InterlinkError } from '../../errors.js';
import type { Origin } from '../queue-store.js';
import type { EnqueueResult } from '../queues.js';
import type { QueueLimits, Share } from '../limits.js';
import { sourceGroup } from '../shares.js';
import type { AckBatches } from './acks.js';
import type { TargetedMessage } from './channels.js';
import { int8, type Sql } from './database.js';
import type { DatabaseCalls } from './health.js';
import { readersOf } from './readers.js';

const enqueueRow = z.object({
  outcome: z.enum(['enqueued', 'routeMessages', 'messages', 'bytes', 'perAddress', 'perConnection']),
  id: int8.nullable(),
  follows: int8.nullable(),
  /** Other relay processes reading the route, comma-separated; null on a route's later rows of one call, and on refusals. */
  readers: z.string().nullable(),
});
const countRow = z.object({ messages: int8, bytes: int8 });

interface WaitingSend {
  route: string;
  payload: string;
  /** The payload's UTF-8 bytes, as the database counts them (octet_length). */
  bytes: number;
  resolve(result: EnqueueResult): void;
  reject(err: unknown): void;
}

interface SendBatch {
  origin: Origin;
  waiting: WaitingSend[];
  committing: boolean;
}

/** Sends and payload bytes one transaction stores at most. */
const BATCH_SENDS = 256;
const BATCH_BYTES = 8 * 1024 * 1024;

/** Takes the first sends of `waiting`, within the batch bounds (always at least one). */
function takeBatch(waiting: WaitingSend[]): WaitingSend[] {
  let count = 0;
  let bytes = 0;
  while (count < waiting.length && count < BATCH_SENDS) {
    bytes += waiting[count]!.payload.length;
    if (count > 0 && bytes > BATCH_BYTES) break;
    count++;
  }
  return waiting.splice(0, count);
}

export interface SendBatchesOptions {
  sql: Sql;
  calls: DatabaseCalls;
  limits: QueueLimits;
  /** This relay process (`PostgresStore.instance`). */
  instance: string;
  now: () => number;
  /** The key every relay of the database keys `src` with (relay_meta.source_key). */
  sourceKey: Buffer;
  /** Acknowledgements committed before a batch's synchronous commit are on the standby once it returns. */
  acks: AckBatches;
  /** Runs a commit through `calls`, timing it for the metrics. */
  timed<T>(work: () => Promise<T>): Promise<T>;
  /** These messages were committed, with `bytes` of payload together. */
  stored(messages: readonly TargetedMessage[], bytes: number): void;
}

export class SendBatches {
  /** Per connection, the sends waiting for its batch under way to commit. */
  private readonly batches = new Map<string, SendBatch>();
  /**
   * Per open connection, at least what it holds queued: its count when last counted, plus
   * what it stored since. Only its own batches (one at a time) add to what a connection
   * holds, and acknowledgements anywhere only take away, so while this bound leaves room
   * for a batch, the batch fits its share without counting. Counting means reading every
   * index entry of the connection's messages, those acknowledged since the last vacuum
   * too: once per send, a long-lived connection's sends cost more and more.
   */
  private readonly heldBound = new Map<string, Share>();

  constructor(private readonly options: SendBatchesOptions) {}

  /**
   * A connection's sends are stored in the order they reached this relay: while its batch
   * is committing, its next sends wait, and go together in the next batch (one
   * transaction, ids in arrival order per route). Batches go per share holder (a proven
   * key, or a network's keyless connections: queue-store.ts `Origin`), one at a time in this
   * relay, which keeps the holder's count exact here; relays of one database that serve
   * connections of the same holder at once may each add a batch past its share before
   * either counts the other's.
   */
  enqueue(route: string, payload: string, origin: Origin): Promise<EnqueueResult> {
    return new Promise((resolve, reject) => {
      const key = this.originOf(origin);
      if (!this.heldBound.has(key)) this.heldBound.set(key, { messages: 0, bytes: 0 });
      let batch = this.batches.get(key);
      if (batch === undefined) {
        batch = { origin, waiting: [], committing: false };
        this.batches.set(key, batch);
      }
      batch.waiting.push({ route, payload, bytes: Buffer.byteLength(payload, 'utf8'), resolve, reject });
      if (!batch.committing) void this.commitBatches(key, batch);
    });
  }

  closed(origin: Origin): void {
    this.heldBound.delete(this.originOf(origin));
  }

  /** What a sender holds queued, by its address and by its connection. */
  async held(origin: Origin): Promise<{ address: Share; connection: Share }> {
    const { sql, calls } = this.options;
    const src = this.srcOf(origin.address);
    const none = { messages: 0, bytes: 0 };
    const count = async (column: 'src' | 'origin', value: string): Promise<Share> => {
      const rows = await calls.call(() => sql`SELECT count(*) AS messages, coalesce(sum(bytes), 0) AS bytes FROM relay_messages WHERE ${sql(column)} = ${value}`);
      return countRow.parse(rows[0]);
    };
    return { address: src === null ? none : await count('src', src), connection: await count('origin', this.originOf(origin)) };
  }

  /** The `src` a message from `address` is counted by: a keyed hash, the same in every relay of the database. */
  private srcOf(address: string | undefined): string | null {
    const group = sourceGroup(address);
    return group === undefined ? null : createHmac('sha256', this.options.sourceKey).update(group).digest('base64url').slice(0, 22);
  }

  private originOf(origin: Origin): string {
    // A key's or a network's share is the cluster's, not one relay's: the same holder on every
    // relay, keyed like `src` so that no network is written in the clear.
    return createHmac('sha256', this.options.sourceKey).update(origin.connection).digest('base64url').slice(0, 22);
  }

  /** A share the relay-wide bounds already cover needs no count of its own. */
  private share(share: Share | undefined): Share | undefined {
    const { limits } = this.options;
    return share === undefined || (share.messages >= limits.messages && share.bytes >= limits.bytes) ? undefined : share;
  }

  private async commitBatches(key: string, batch: SendBatch): Promise<void> {
    batch.committing = true;
    while (batch.waiting.length > 0) {
      const sends = takeBatch(batch.waiting);
      try {
        const results = await this.commitBatch(batch.origin, sends);
        sends.forEach((send, i) => send.resolve(results[i]!));
      } catch (err) {
        for (const send of sends) send.reject(err);
      }
    }
    batch.committing = false;
    this.batches.delete(key);
  }

  /**
   * The connection's share to check in the batch's transaction, or undefined when it
   * certainly fits: its bound leaves room, perhaps once counted again (acknowledgements may
   * have freed some). A connection that closed meanwhile is counted.
   */
  private async connectionShare(key: string, sends: readonly WaitingSend[]): Promise<Share | undefined> {
    const { sql, calls } = this.options;
    const share = this.share(this.options.limits.perConnection);
    let bound = this.heldBound.get(key);
    if (share === undefined || bound === undefined) return share;
    const messages = sends.length;
    const bytes = sends.reduce((sum, s) => sum + s.bytes, 0);
    const fits = (held: Share) => held.messages + messages <= share.messages && held.bytes + bytes <= share.bytes;
    if (!fits(bound)) {
      const [row] = await calls.call(() => sql`SELECT count(*) AS messages, coalesce(sum(bytes), 0) AS bytes FROM relay_messages WHERE origin = ${key}`);
      bound = countRow.parse(row);
      if (this.heldBound.has(key)) this.heldBound.set(key, bound);
    }
    return fits(bound) ? undefined : share;
  }

  private async commitBatch(origin: Origin, sends: readonly WaitingSend[]): Promise<EnqueueResult[]> {
    const { sql, calls, limits, acks } = this.options;
    const address = this.share(limits.perAddress);
    const key = this.originOf(origin);
    const connection = await this.connectionShare(key, sends);
    // A synchronous commit: once it returns, the acknowledgements committed before it are on the standby too.
    const mark = acks.mark();
    const rows = await this.options.timed(
      () => sql`
        SELECT outcome, id, follows, readers FROM relay_enqueue_readers(
          ${this.options.instance}, ${this.options.now()}, ${sends.map((s) => s.route)}::text[], ${sends.map((s) => s.payload)}::text[],
          ${this.srcOf(origin.address)}, ${key},
          ${limits.routeMessages}, ${limits.messages}, ${limits.bytes},
          ${address?.messages ?? null}, ${address?.bytes ?? null},
          ${connection?.messages ?? null}, ${connection?.bytes ?? null})`,
    );
    acks.confirm(mark);
    calls.committed();
    if (rows.length !== sends.length) throw new InterlinkError('storage', `the relay database answered ${rows.length} of ${sends.length} sends`);
    // Each route's readers come with its first message of the call.
    const readers = new Map<string, string[]>();
    const results = rows.map((row, i): EnqueueResult => {
      const parsed = enqueueRow.parse(row);
      if (parsed.readers !== null && !readers.has(sends[i]!.route)) readers.set(sends[i]!.route, readersOf(parsed.readers));
      if (parsed.outcome !== 'enqueued') return { outcome: 'queue_full', limit: parsed.outcome };
      if (parsed.id === null) throw new InterlinkError('storage', 'the relay database enqueued a message without an id');
      return { outcome: 'enqueued', id: parsed.id, follows: parsed.follows };
    });
    const stored = sends.filter((_, i) => results[i]!.outcome === 'enqueued');
    if (stored.length > 0) {
      const bytes = stored.reduce((sum, s) => sum + s.bytes, 0);
      const bound = this.heldBound.get(key);
      if (bound !== undefined) this.heldBound.set(key, { messages: bound.messages + stored.length, bytes: bound.bytes + bytes });
      this.options.stored(
        results.flatMap((result, i) => {
          const route = sends[i]!.route;
          return result.outcome === 'enqueued' ? [{ route, follows: result.follows ?? null, id: result.id, payload: sends[i]!.payload, readers: readers.get(route) ?? [] }] : [];
        }),
        bytes,
      );
    }
    return results;
  }
}
