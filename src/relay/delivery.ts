/**
 * Delivery and acknowledgement (docs/PROTOCOL.md "Relay frames": "Delivery and
 * acknowledgement"; DESIGN.md "The relay": "What it guarantees" and "Authenticated
 * reads"): each route's committed messages go, in id order and within the window, to the
 * connections that authenticated the route, which acknowledge them (the store deletes) or
 * defer them (they come again when due, deferrals.ts). Reads wait for backpressure
 * (connection.ts) and, on a shared store, for the store to note the route's reader.
 */
import { crashPoint } from '../store/crash-point.js';
import { messageOf } from '../errors.js';
import type { Connection, Subscription } from './connection.js';
import { Deferrals } from './deferrals.js';
import { deliverParts, deliverText } from './frame-text.js';
import type { QueueStore } from './queue-store.js';
import type { QueuedMessage } from './queues.js';
import type { RelayMetrics } from './relay-metrics.js';
import type { RepeatedEvents } from './repeated-log.js';

/** Unacknowledged deliveries per connection and route. */
export const DEFAULT_DELIVERY_WINDOW = 256;

export interface DeliverySettings {
  deliveryWindow: number;
  /** Counts delivered and acknowledged messages for the operator. */
  metrics?: RelayMetrics;
}

export class Delivery {
  /** The connections that authenticated each route. */
  private readonly subscribers = new Map<string, Set<Connection>>();
  /** Routes whose first reader here waits for the store to note it (`QueueStore.watch`). */
  private readonly watching = new Map<string, Promise<void>>();

  /** `track` keeps work under way until the relay has settled (dispatch.ts); `failures` logs store failures with counts. */
  constructor(
    private readonly storage: QueueStore,
    private readonly settings: DeliverySettings,
    private readonly now: () => number,
    private readonly track: (work: Promise<unknown>) => void,
    private readonly failures: RepeatedEvents,
  ) {
    storage.subscribe({
      arrived: (route) => this.pumpRoute(route),
      committed: (route, message, follows) => this.committed(route, message, follows),
      resync: () => {
        for (const route of this.subscribers.keys()) this.pumpRoute(route);
      },
    });
  }

  /** The connection reads `route` from now on (it proved the route's key). */
  subscribe(conn: Connection, route: string): Subscription {
    const subscription: Subscription = { route, cursor: -1, inFlight: new Set(), deferrals: new Deferrals(), reading: false, again: false, unread: true };
    conn.subscriptions.set(route, subscription);
    let set = this.subscribers.get(route);
    if (set === undefined) {
      this.subscribers.set(route, (set = new Set()));
      const watched = this.storage.watch?.(route);
      if (watched !== undefined) this.watching.set(route, watched);
    }
    set.add(conn);
    return subscription;
  }

  /**
   * Delivery starts (again) on an authenticated route. A shared store first notes that this
   * process reads the route: a read before that could miss a commit of another relay
   * process that did not yet know to tell this one.
   */
  startReading(conn: Connection, subscription: Subscription): void {
    const watched = this.watching.get(subscription.route);
    if (watched === undefined) return this.pump(conn, subscription);
    this.track(
      watched.then(() => {
        if (this.watching.get(subscription.route) === watched) this.watching.delete(subscription.route);
        subscription.unread = true;
        this.pump(conn, subscription);
      }),
    );
  }

  /** Its in-flight messages stay queued: the next connection authenticated for the route gets them. */
  closed(conn: Connection): void {
    for (const [route, sub] of conn.subscriptions) {
      sub.deferrals.clear();
      const set = this.subscribers.get(route);
      set?.delete(conn);
      if (set?.size === 0) {
        this.subscribers.delete(route);
        this.storage.unwatch?.(route);
      }
    }
  }

  /** The connection's send buffer drained: deliveries resume on every route it reads. */
  drained(conn: Connection): void {
    for (const subscription of conn.subscriptions.values()) this.pump(conn, subscription);
  }

  /**
   * The reader cannot take these now (its mailbox holds that sender's share): they leave
   * the window, so the route's other messages flow, and come again when due (deferrals.ts).
   */
  defer(conn: Connection, sub: Subscription, ids: readonly number[], ms: number): void {
    if (sub.deferrals.defer(sub.inFlight, ids, ms, this.now()) === 0) return;
    this.scheduleDeferred(conn, sub);
    this.pump(conn, sub);
  }

  /** The window opens at once; every reader of the route forgets the ids once the store deleted them. */
  acknowledge(conn: Connection, subscription: Subscription, ids: readonly number[]): void {
    const route = subscription.route;
    for (const id of ids) {
      subscription.inFlight.delete(id);
      subscription.deferrals.forget(id);
    }
    this.pump(conn, subscription);
    const commit = this.storage.acknowledge(route, ids);
    this.track(
      commit.then(
        (removed) => {
          if (removed > 0) this.settings.metrics?.acknowledged(removed);
          for (const subscriber of this.subscribers.get(route) ?? []) {
            const sub = subscriber.subscriptions.get(route)!;
            for (const id of ids) {
              sub.inFlight.delete(id);
              sub.deferrals.forget(id);
            }
            this.pump(subscriber, sub);
          }
        },
        (err: unknown) => {
          this.failures.note('error', 'relay_commit_failed', { error: messageOf(err) });
          conn.refuse(undefined, 'storage', `the relay could not record the acknowledgement (${messageOf(err)}); the messages stay queued (a relay on PostgreSQL records it once its database commits again)`);
        },
      ),
    );
  }

  /** When the earliest deferral is due, delivery starts again from it (the cursor goes back). */
  private scheduleDeferred(conn: Connection, sub: Subscription): void {
    sub.deferrals.schedule(() => {
      if (!conn.open) return sub.deferrals.clear();
      const from = sub.deferrals.takeDue(this.now());
      if (from !== undefined) {
        sub.cursor = Math.min(sub.cursor, from - 1);
        sub.unread = true;
        this.pump(conn, sub);
      }
      this.scheduleDeferred(conn, sub);
    }, this.now());
  }

  /** Messages arrived on `route`: every connection that reads it looks for what it has not been sent yet. */
  pumpRoute(route: string): void {
    for (const subscriber of this.subscribers.get(route) ?? []) {
      const sub = subscriber.subscriptions.get(route)!;
      sub.unread = true;
      this.pump(subscriber, sub);
    }
  }

  /**
   * A message committed to a shared store, by this relay process or another, with the
   * route's newest id queued before it (`follows`, null: none). A reader that was sent
   * everything up to that id is sent this message as it is: a read would find nothing else
   * below it (the store orders each route's ids by commit). Any other reader, and one whose
   * read is under way or whose window is full, reads the store as for any arrival.
   */
  committed(route: string, message: { id: number; payload: string }, follows: number | null): void {
    for (const subscriber of this.subscribers.get(route) ?? []) {
      const sub = subscriber.subscriptions.get(route)!;
      const sendable = !sub.reading && subscriber.open && !subscriber.blocked && sub.inFlight.size < this.settings.deliveryWindow;
      if (sendable && (follows === null || sub.cursor >= follows)) {
        if (message.id > sub.cursor) this.sendMessage(subscriber, sub, message);
        // An arrival it has not read yet may wait behind this one.
        if (sub.unread) this.pump(subscriber, sub);
      } else {
        sub.unread = true;
        this.pump(subscriber, sub);
      }
    }
  }

  /**
   * Delivers the route's next committed messages, within the window, until the connection's
   * buffer is full. A store in this process answers the read at once; from a shared store
   * one read per subscription is under way at a time, and an arrival meanwhile reads again.
   * A subscription whose last read reached the route's end, with no arrival since, reads
   * nothing (`unread`): an acknowledgement then costs a shared store no query.
   */
  private pump(conn: Connection, sub: Subscription): void {
    if (sub.reading) {
      sub.again = true;
      return;
    }
    const room = this.settings.deliveryWindow - sub.inFlight.size;
    if (!sub.unread || conn.blocked || room <= 0 || !conn.open) return;
    // Cleared before the read: an arrival committed after the read's snapshot sets it again.
    sub.unread = false;
    this.settings.metrics?.storeRead();
    const read = this.storage.read(sub.route, sub.cursor, room);
    if (Array.isArray(read)) return this.deliver(conn, sub, read, room);
    sub.reading = true;
    sub.again = false;
    this.track(
      read.then(
        (messages) => {
          sub.reading = false;
          this.deliver(conn, sub, messages, room);
          if (sub.again) this.pump(conn, sub);
        },
        (err: unknown) => {
          sub.reading = false;
          sub.unread = true;
          this.failures.note('warn', 'relay_read_failed', { route: sub.route, error: messageOf(err) });
          // The store's resync (once it is reachable again) reads every route anew.
        },
      ),
    );
  }

  private deliver(conn: Connection, sub: Subscription, messages: readonly QueuedMessage[], room: number): void {
    for (const message of messages) {
      if (conn.blocked || !conn.open || sub.inFlight.size >= this.settings.deliveryWindow) {
        // Read and not sent: read again once the buffer drains or the window opens.
        sub.unread = true;
        return;
      }
      // Acknowledged meanwhile by another reader of the route: the store no longer has it.
      if (message.id <= sub.cursor) continue;
      // Read again from a deferred message back in time (scheduleDeferred): what is still in
      // flight, or deferred and not due, is passed over.
      if (sub.inFlight.has(message.id) || sub.deferrals.waiting(message.id, this.now())) {
        sub.cursor = message.id;
        continue;
      }
      this.sendMessage(conn, sub, message);
    }
    // A full batch: more may wait behind it.
    if (messages.length === room) {
      sub.unread = true;
      this.pump(conn, sub);
    }
  }

  private sendMessage(conn: Connection, sub: Subscription, message: { id: number; payload: string; utf8?: Buffer }): void {
    sub.cursor = message.id;
    sub.inFlight.add(message.id);
    if (message.utf8 === undefined) conn.sendText(deliverText(sub.route, message.id, message.payload));
    else conn.sendMessage(deliverParts(sub.route, message.id, message.utf8));
    crashPoint('relay.after_deliver');
    this.settings.metrics?.delivered();
  }
}
