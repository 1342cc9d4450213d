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
import { z } from 'zod';
import { routeText as route } from '../envelope/route.js';
import type { JournalFormat } from '../store/journal.js';
import { DEFAULT_QUEUE_LIMITS, type QueueLimits, type Share } from './limits.js';
import { ShareLedger } from './shares.js';

const at = z.number().int();
const id = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);
/** The JSON text of the `send` frame's payload object, delivered exactly as stored. */
const payload = z.string().refine((s) => s.startsWith('{') && s.endsWith('}'), 'must be the JSON text of an object');

/** The sender's address, as the relay keeps it: a keyed hash (storage.ts), never the address itself. */
const src = z.string().min(1).max(64);

const enqOpSchema = z.object({ op: z.literal('enq'), at, route, id, payload, src: src.optional() });
const ackOpSchema = z.object({ op: z.literal('ack'), at, route, ids: z.array(id).min(1) });
/** Every message accepted before `before` (relay clock) leaves; a route left empty goes with it. */
const expireOpSchema = z.object({ op: z.literal('expire'), at, before: at });
export const queueOpSchema = z.discriminatedUnion('op', [enqOpSchema, ackOpSchema, expireOpSchema]);
export type QueueOp = z.infer<typeof queueOpSchema>;
export type EnqueueOp = z.infer<typeof enqOpSchema>;
export type AckOp = z.infer<typeof ackOpSchema>;
export type ExpireOp = z.infer<typeof expireOpSchema>;

const queuedSchema = z.object({ id, at, payload, src: src.optional() });
/** The snapshot: the id counter and every queued message, per route in id order. */
export const queueDataSchema = z
  .object({ next_id: id, routes: z.array(z.object({ route, messages: z.array(queuedSchema).min(1) })) })
  .refine((data) => new Set(data.routes.map((r) => r.route)).size === data.routes.length, 'routes must be unique')
  .refine(
    (data) => data.routes.every((r) => r.messages.every((m, i) => m.id < data.next_id && (i === 0 || m.id > r.messages[i - 1]!.id))),
    'message ids must increase within a route and stay below next_id',
  );
export type QueueData = z.infer<typeof queueDataSchema>;

export interface QueuedMessage {
  readonly id: number;
  /** relay clock when it was accepted */
  readonly at: number;
  readonly payload: string;
  /** UTF-8 bytes of `payload`: the unit of the byte bound */
  readonly bytes: number;
  /** the sender's address (`src`), if known */
  readonly src?: string;
  /** the share holder it counts against (queue-store.ts `Origin`), in this run of the relay only */
  readonly connection?: string;
}

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

class RouteQueue {
  /** Increasing ids, including some already removed, which are swept out lazily. */
  private order: number[] = [];
  private readonly byId = new Map<number, QueuedMessage>();

  get size(): number {
    return this.byId.size;
  }

  has(id: number): boolean {
    return this.byId.has(id);
  }

  push(message: QueuedMessage): void {
    this.order.push(message.id);
    this.byId.set(message.id, message);
  }

  remove(id: number): QueuedMessage | undefined {
    const message = this.byId.get(id);
    if (message === undefined) return undefined;
    this.byId.delete(id);
    // Sweeping once removed ids outnumber live ones keeps `order` within twice the queue.
    if (this.order.length > 64 && this.order.length > 2 * this.byId.size) this.order = this.order.filter((i) => this.byId.has(i));
    return message;
  }

  /** The first message with `after` < id < `below`. */
  nextAfter(after: number, below: number): QueuedMessage | undefined {
    let lo = 0;
    let hi = this.order.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.order[mid]! > after) hi = mid;
      else lo = mid + 1;
    }
    for (let i = lo; i < this.order.length; i++) {
      const id = this.order[i]!;
      if (id >= below) return undefined;
      const message = this.byId.get(id);
      if (message !== undefined) return message;
    }
    return undefined;
  }

  *messages(): IterableIterator<QueuedMessage> {
    for (const id of this.order) {
      const message = this.byId.get(id);
      if (message !== undefined) yield message;
    }
  }
}

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
    for (const r of data.routes) for (const m of r.messages) state.insert(r.route, { id: m.id, at: m.at, payload: m.payload, bytes: payloadBytes(m.payload), src: m.src });
    return state;
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
    this.insert(op.route, { id: op.id, at: op.at, payload: op.payload, bytes: size, src: op.src, connection });
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

  private insert(route: string, message: QueuedMessage): void {
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
    apply: (state, op) => state.apply(op, op.op === 'enq' ? connectionOf(op.id) : undefined),
    changes: (result) => (result.outcome === 'enqueued' ? true : (result.outcome === 'acked' || result.outcome === 'expired') && result.removed > 0),
  };
}
