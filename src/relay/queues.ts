/**
 * The relay's queues in memory: one keep-until-acknowledged queue per route
 * (`<recipient key>#<session>`), in id order. No I/O. The same ops in the same order
 * always give the same state, so `JournalStore` can replay them after a crash
 * (`relayQueueFormat`), and the relay runs the very same state in memory without `--db`.
 *
 * Message ids come from one counter per state: increasing across all routes and never
 * reused, also after every message was acknowledged (the snapshot keeps the counter).
 * An enqueue beyond a bound is refused (`queue_full`); an accepted message is never
 * dropped to make room. Only an acknowledgement or expiry removes one.
 *
 * Fair shares (`shares.ts`): each message counts against its sender's address — `src`,
 * journaled, so a restart keeps the count — and its connection, which lives in memory
 * only (a connection does not survive a restart, and replayed messages count against
 * none). A message without `src` (journaled before shares existed) counts against no
 * address.
 */
import type { JournalFormat } from '../store/journal.js';
import { DEFAULT_QUEUE_LIMITS, type QueueLimits, type Share } from './limits.js';
import { ShareLedger } from './shares.js';
import { ownBytes, RouteQueue, StoredMessage, type QueuedMessage } from './route-queue.js';
import { queueDataSchema, queueOpSchema, type AckOp, type EnqueueOp, type ExpireOp, type QueueData, type QueuedData, type QueueOp } from './queue-ops.js';
import { queueSnapshotLines } from './queue-snapshot.js';

export type { QueuedMessage } from './route-queue.js';
export { queueDataSchema, queueOpSchema, queuedSchema, type AckOp, type EnqueueOp, type ExpireOp, type QueueData, type QueuedData, type QueueOp } from './queue-ops.js';

/** Who sent a message: its address (`src`) and its share holder, either unknown. */
export interface Sender {
  src?: string;
  connection?: string;
}

export type EnqueueResult =
  | {
      outcome: 'enqueued';
      id: number;
      /**
       * A shared store's word on what precedes the message: the route's newest id queued
       * before it (null: none was), so a reader that was sent everything up to that id is
       * sent this one without reading the store. Absent from stores in this process.
       */
      follows?: number | null;
    }
  | { outcome: 'queue_full'; limit: keyof QueueLimits }
  /** the op's id is not above every id issued so far: refused, never journaled */
  | { outcome: 'id_reused'; id: number };
export interface AckResult {
  outcome: 'acked';
  removed: number;
}
export interface ExpireResult {
  outcome: 'expired';
  removed: number;
}
export type QueueResult = EnqueueResult | AckResult | ExpireResult;

export class RelayQueueState {
  /** Only routes with at least one queued message. */
  private readonly routes = new Map<string, RouteQueue>();
  private next = 0;
  private count = 0;
  private bytes = 0;
  private readonly byAddress = new ShareLedger<string>();
  private readonly byConnection = new ShareLedger<string>();

  constructor(readonly limits: Readonly<QueueLimits> = DEFAULT_QUEUE_LIMITS) {}

  /** Loads whatever the snapshot holds, even beyond the limits: accepted messages are never dropped. */
  static fromData(data: QueueData, limits: Readonly<QueueLimits> = DEFAULT_QUEUE_LIMITS): RelayQueueState {
    const state = new RelayQueueState(limits);
    state.next = data.next_id;
    for (const r of data.routes) for (const m of r.messages) state.restore(r.route, m);
    return state;
  }

  /**
   * One message of a snapshot, loaded as it is, even beyond the limits (accepted messages
   * are never dropped); the caller keeps the snapshot's order (`queueDataSchema`), and
   * loads its `next_id` through `fromData`. The snapshot reader (queue-snapshot.ts) loads
   * message by message, so a snapshot is never all in memory twice.
   */
  restore(route: string, m: QueuedData): void {
    this.insert(route, new StoredMessage(m.id, m.at, ownBytes(m.payload, payloadBytes(m.payload)), m.src, undefined));
  }

  toData(): QueueData {
    const routes = [...this.routes].map(([route, queue]) => ({
      route,
      messages: [...queue.messages()].map((m) => ({ id: m.id, at: m.at, payload: m.payload, ...(m.src !== undefined && { src: m.src }) })),
    }));
    return { next_id: this.next, routes };
  }

  /** The id the next enqueue must use (or exceed). */
  get nextId(): number {
    return this.next;
  }

  get stats(): { routes: number; messages: number; bytes: number } {
    return { routes: this.routes.size, messages: this.count, bytes: this.bytes };
  }

  /** What the sender holds queued: by its address and by its connection. */
  held(sender: Sender): { address: Share; connection: Share } {
    const none = { messages: 0, bytes: 0 };
    return {
      address: sender.src === undefined ? none : this.byAddress.get(sender.src),
      connection: sender.connection === undefined ? none : this.byConnection.get(sender.connection),
    };
  }

  size(route: string): number {
    return this.routes.get(route)?.size ?? 0;
  }

  has(route: string, id: number): boolean {
    return this.routes.get(route)?.has(id) ?? false;
  }

  /** The route's first queued message with `after` < id < `below`, in id order. */
  nextAfter(route: string, after: number, below = Number.POSITIVE_INFINITY): QueuedMessage | undefined {
    return this.routes.get(route)?.nextAfter(after, below);
  }

  /** The route's queued messages in id order. */
  messages(route: string): QueuedMessage[] {
    const queue = this.routes.get(route);
    return queue ? [...queue.messages()] : [];
  }

  /** `connection`: who sent an `enq`, known only in the run that received it (never journaled). */
  apply(op: QueueOp, connection?: string): QueueResult {
    switch (op.op) {
      case 'enq':
        return this.enqueue(op, connection);
      case 'ack':
        return this.acknowledge(op);
      case 'expire':
        return this.expire(op);
    }
  }

  /** A full scan (at most `limits.messages`), run about once a minute. */
  private expire(op: ExpireOp): ExpireResult {
    let removed = 0;
    for (const [route, queue] of this.routes) {
      const old = [...queue.messages()].filter((m) => m.at < op.before).map((m) => m.id);
      if (old.length > 0) removed += this.acknowledge({ op: 'ack', at: op.at, route, ids: old }).removed;
    }
    return { outcome: 'expired', removed };
  }

  /** The relay's bounds first, then the sender's shares: a share can be the whole relay. */
  private enqueue(op: EnqueueOp, connection: string | undefined): EnqueueResult {
    if (op.id < this.next) return { outcome: 'id_reused', id: op.id };
    const size = payloadBytes(op.payload);
    const { perAddress, perConnection } = this.limits;
    if (this.size(op.route) >= this.limits.routeMessages) return { outcome: 'queue_full', limit: 'routeMessages' };
    if (this.count >= this.limits.messages) return { outcome: 'queue_full', limit: 'messages' };
    if (this.bytes + size > this.limits.bytes) return { outcome: 'queue_full', limit: 'bytes' };
    if (perConnection && connection !== undefined && !this.byConnection.fits(connection, size, perConnection)) return { outcome: 'queue_full', limit: 'perConnection' };
    if (perAddress && op.src !== undefined && !this.byAddress.fits(op.src, size, perAddress)) return { outcome: 'queue_full', limit: 'perAddress' };
    this.insert(op.route, new StoredMessage(op.id, op.at, ownBytes(op.payload, size), op.src, connection));
    this.next = op.id + 1;
    return { outcome: 'enqueued', id: op.id };
  }

  private acknowledge(op: AckOp): AckResult {
    const queue = this.routes.get(op.route);
    let removed = 0;
    if (queue === undefined) return { outcome: 'acked', removed };
    for (const id of op.ids) {
      const message = queue.remove(id);
      if (message === undefined) continue;
      removed++;
      this.count--;
      this.bytes -= message.bytes;
      if (message.src !== undefined) this.byAddress.remove(message.src, message.bytes);
      if (message.connection !== undefined) this.byConnection.remove(message.connection, message.bytes);
    }
    if (queue.size === 0) this.routes.delete(op.route);
    return { outcome: 'acked', removed };
  }

  /** Every queued message, route by route, each route's in id order (a snapshot's order). */
  *entries(): IterableIterator<[string, IterableIterator<QueuedMessage>]> {
    for (const [route, queue] of this.routes) yield [route, queue.messages()];
  }

  private insert(route: string, message: StoredMessage): void {
    let queue = this.routes.get(route);
    if (queue === undefined) {
      queue = new RouteQueue();
      this.routes.set(route, queue);
    }
    queue.push(message);
    this.count++;
    this.bytes += message.bytes;
    if (message.src !== undefined) this.byAddress.add(message.src, message.bytes);
    if (message.connection !== undefined) this.byConnection.add(message.connection, message.bytes);
  }
}

export function payloadBytes(payload: string): number {
  return Buffer.byteLength(payload, 'utf8');
}

export type RelayQueueFormat = JournalFormat<RelayQueueState, QueueOp, QueueResult, QueueData>;

/**
 * The durable form (`<db>/queues.json` + `queues.journal`). `onState` sees every state
 * the store builds — at open, and again if it reloads the files after a failed write —
 * which is the object its later commits change: the relay reads deliveries from it.
 * `connectionOf` names the connection an `enq` came on while the relay still knows it
 * (memory only: an op replayed from the files counts against no connection).
 */
export function relayQueueFormat(
  limits: Readonly<QueueLimits> = DEFAULT_QUEUE_LIMITS,
  onState: (state: RelayQueueState) => void = () => {},
  connectionOf: (id: number) => string | undefined = () => undefined,
): RelayQueueFormat {
  const track = (state: RelayQueueState): RelayQueueState => {
    onState(state);
    return state;
  };
  return {
    name: 'interlink-relay-queues',
    label: 'relay',
    version: 1,
    opSchema: queueOpSchema,
    dataSchema: queueDataSchema,
    empty: () => track(new RelayQueueState(limits)),
    fromData: (data) => track(RelayQueueState.fromData(data, limits)),
    toData: (state) => state.toData(),
    lines: queueSnapshotLines((nextId) => track(RelayQueueState.fromData({ next_id: nextId, routes: [] }, limits))),
    apply: (state, op) => state.apply(op, op.op === 'enq' ? connectionOf(op.id) : undefined),
    changes: (result) => (result.outcome === 'enqueued' ? true : (result.outcome === 'acked' || result.outcome === 'expired') && result.removed > 0),
  };
}
