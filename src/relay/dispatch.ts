/**
 * What the relay does with each client frame, one handler per frame type, and delivery
 * to the connections that authenticated a route (docs/PROTOCOL.md "Relay frames": "Client
 * → relay", "Refusal codes", "Sending", "Delivery and acknowledgement"; DESIGN.md "The
 * relay": "What it guarantees" and "Authenticated reads").
 *
 * A message is committed before `accepted` is sent and before it is delivered to anyone;
 * only a connection that proved a route's key receives or acknowledges its messages.
 */
import type WebSocket from 'ws';
import { log } from '../log.js';
import { describeSchemaError } from '../json.js';
import { signWelcome, verifyAuth } from '../wire/auth.js';
import type { Connection, Subscription } from './connection.js';
import { ackRouteOf, isHello, deliverText, frameText, NOT_JSON, parseJson, refOf } from './frame-text.js';
import { clientFrame, MAX_PAYLOAD_BYTES, PROTOCOL_VERSION, type ClientFrame } from '../wire/frames.js';
import { MAX_JSON_DEPTH, memberText, nestsDeeperThan } from '../wire/json-scan.js';
import type { Origin, QueueStore, RosterStore } from './queue-store.js';
import type { EnqueueResult, QueuedMessage } from './queues.js';
import type { QueueLimits, Share } from './limits.js';
import type { AnnounceOutcome, GoodbyeOutcome } from './roster.js';
import type { RelayMetrics } from './relay-metrics.js';
import { RosterReplies } from './roster-replies.js';
import type { RelayKey } from './relay-key.js';
import { messageOf } from '../errors.js';
import { crashPoint } from '../store/crash-point.js';
import { RepeatedEvents } from './repeated-log.js';
import { outOfOrderMessage } from './send-chain.js';
import { Deferrals } from './deferrals.js';

/** Unacknowledged deliveries per connection and route. */
export const DEFAULT_DELIVERY_WINDOW = 256;
/** Payload bytes one connection may have waiting for a commit; beyond it sends are refused `rate_limited`. */
export const MAX_UNCOMMITTED_BYTES = 32 * 1024 * 1024;
/** Routes one connection may authenticate. */
export const MAX_ROUTES_PER_CONNECTION = 64;

export interface DispatchSettings {
  /** the frame rate named in a `rate_limited` refusal (the buckets enforce it) */
  frameRate: number;
  deliveryWindow: number;
  /** Counts accepted, delivered and acknowledged messages for the operator. */
  metrics?: RelayMetrics;
  /** The relay's own key: it signs `welcome`, and auth proofs must name it. */
  key: RelayKey;
}

function shareText(share: Share): string {
  return `${share.messages} messages or ${share.bytes} bytes of payload`;
}

type Held = { address: Share; connection: Share };

/**
 * What the sender holds is read when the refusal is written, after the commit that decided
 * it (undefined: the store could not say).
 */
function queueFullMessage(route: string, result: Extract<EnqueueResult, { outcome: 'queue_full' }>, limits: QueueLimits, held: Held | undefined): string {
  const holds = (share: Share | undefined) => (share === undefined ? '' : `it holds ${shareText(share)} queued; `);
  switch (result.limit) {
    case 'perConnection':
      return `this connection's share of the relay is full (${holds(held?.connection)}its share is ${shareText(limits.perConnection!)}); try again once they are read or expire`;
    case 'perAddress':
      return `your address's share of the relay is full (${holds(held?.address)}its share is ${shareText(limits.perAddress!)}); try again once they are read or expire`;
    case 'routeMessages':
      return `the queue of ${route} is full (${limits.routeMessages} messages waiting for its reader); try again later`;
    case 'messages':
      return `the relay is full (${limits.messages} messages queued); try again later`;
    case 'bytes':
      return `the relay is full (${limits.bytes} bytes of payload queued); try again later`;
  }
}

export class Dispatcher {
  /** The connections that authenticated each route. */
  private readonly subscribers = new Map<string, Set<Connection>>();
  /** Connections that said hello: one welcome each, so a peer cannot make the relay sign at its frame rate. */
  private readonly welcomed = new WeakSet<Connection>();
  /** Commits in progress and what follows them. */
  private readonly pending = new Set<Promise<unknown>>();
  private readonly rosterReplies: RosterReplies;
  /** Routes whose first reader here waits for the store to note it (`QueueStore.watch`). */
  private readonly watching = new Map<string, Promise<void>>();
  /** Each connection's last announcement or goodbye still being stored (a shared roster only). */
  private readonly rosterWrites = new WeakMap<Connection, Promise<void>>();
  /** Store failures, which repeat with every frame while an outage lasts: logged with counts. */
  readonly failures: RepeatedEvents;

  constructor(
    private readonly storage: QueueStore,
    private readonly roster: RosterStore,
    private readonly settings: DispatchSettings,
    private readonly now: () => number,
  ) {
    this.rosterReplies = new RosterReplies(roster, now);
    this.failures = new RepeatedEvents(now);
    storage.subscribe({
      arrived: (route) => this.pumpRoute(route),
      committed: (route, message, follows) => this.committed(route, message, follows),
      resync: () => {
        for (const route of this.subscribers.keys()) this.pumpRoute(route);
      },
    });
  }

  /** Resolves once every commit submitted so far has been answered. */
  async settled(): Promise<void> {
    await Promise.allSettled([...this.pending]);
  }

  /**
   * Every frame, even one that is refused, takes a token from the connection's bucket —
   * except an ack or a defer for a route the connection authenticated: refusing it would
   * leave the message in flight, holding a slot of the window until the connection closes
   * — and the connection's first hello.
   */
  onFrame(conn: Connection, data: WebSocket.RawData, isBinary: boolean): void {
    const text = isBinary ? '' : frameText(data);
    // Nesting is bounded before anything parses the text (a frame a million deep is 2 MB).
    const tooDeep = !isBinary && nestsDeeperThan(text, MAX_JSON_DEPTH);
    const json = isBinary || tooDeep ? NOT_JSON : parseJson(text);
    const ref = refOf(json);
    const ackRoute = ackRouteOf(json);
    const readerAck = ackRoute !== undefined && conn.subscriptions.has(ackRoute);
    // The one hello of a connection is part of opening it, like the challenge.
    const firstHello = isHello(json) && !this.welcomed.has(conn);
    if (!readerAck && !firstHello && !conn.bucket.take(this.now())) {
      return conn.refuse(ref, 'rate_limited', `more than ${this.settings.frameRate} frames per second on this connection; slow down and send it again`);
    }
    if (isBinary) return conn.refuse(undefined, 'bad_frame', 'frames are JSON text, not binary');
    if (tooDeep) return conn.refuse(undefined, 'bad_frame', `the frame nests deeper than ${MAX_JSON_DEPTH} levels`);
    if (json === NOT_JSON) return conn.refuse(undefined, 'bad_frame', 'the frame is not JSON');
    const parsed = clientFrame.safeParse(json);
    if (!parsed.success) return conn.refuse(ref, 'bad_frame', `invalid frame: ${describeSchemaError(parsed.error)}`);
    this.dispatch(conn, parsed.data, text);
  }

  /** Its in-flight messages stay queued: the next connection authenticated for the route gets them. */
  onClosed(conn: Connection): void {
    this.rosterReplies.release(conn);
    this.storage.closed?.({ address: conn.address, connection: conn.id });
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
  onDrained(conn: Connection): void {
    for (const subscription of conn.subscriptions.values()) this.pump(conn, subscription);
  }

  /** `text` is the frame as it arrived: a payload is kept as those bytes, never serialized again. */
  private dispatch(conn: Connection, frame: ClientFrame, text: string): void {
    switch (frame.type) {
      case 'hello':
        return this.onHello(conn, frame.nonce);
      case 'auth':
        return this.onAuth(conn, frame.route, frame.sig, frame.relay);
      case 'send':
        return this.onSend(conn, frame.ref, frame.to, memberText(text, 'payload')!, frame.after);
      case 'ack':
        return this.onAck(conn, frame.route, frame.ids);
      case 'defer':
        return this.onDefer(conn, frame.route, frame.ids, frame.ms);
      case 'announce':
        return this.onAnnounce(conn, frame.announcement);
      case 'goodbye':
        return this.onGoodbye(conn, frame.goodbye);
      case 'roster':
        return this.onRoster(conn, frame.ref);
    }
  }

  /**
   * A roster reply counts against the send budget like deliveries (roster-replies.ts). It
   * follows the connection's own announcements and goodbyes still being stored, so a
   * client reads its own word.
   */
  private onRoster(conn: Connection, ref: string): void {
    const reply = () => {
      if (!conn.open) return;
      const refusal = this.rosterReplies.reply(conn, ref);
      if (refusal !== undefined) conn.refuse(ref, 'rate_limited', refusal);
    };
    const writing = this.rosterWrites.get(conn);
    if (writing === undefined) return reply();
    this.track(writing.then(reply));
  }

  private onHello(conn: Connection, nonce: string): void {
    if (this.welcomed.has(conn)) return conn.refuse(undefined, 'bad_frame', 'one hello per connection: this connection was already welcomed');
    this.welcomed.add(conn);
    conn.send({ v: PROTOCOL_VERSION, type: 'welcome', sig: signWelcome(this.settings.key.signingKey, conn.nonce, nonce) });
  }

  private onAuth(conn: Connection, route: string, sig: string, relay: string | undefined): void {
    const own = this.settings.key.key;
    if (relay === undefined) {
      return conn.refuse(undefined, 'auth_failed', `the auth for ${route} is the old proof (interlink-relay-auth-v1), which names no relay; this relay takes only interlink-relay-auth-v2 proofs, which name its key ${own}: upgrade interlink-mcp`);
    }
    if (relay !== own) {
      // A proof made for another relay: the client was talking to that relay, which passed this one's challenge on.
      log.warn('relay_auth_other_relay', { conn: conn.id, route, named: relay });
      return conn.refuse(undefined, 'auth_failed', `the auth for ${route} names the relay key ${relay}, not this relay's key ${own}: it was made for another relay`);
    }
    if (!verifyAuth(own, conn.nonce, route, sig)) {
      return conn.refuse(undefined, 'auth_failed', `the signature does not prove the key of ${route} for this relay and this connection's challenge`);
    }
    let subscription = conn.subscriptions.get(route);
    if (subscription === undefined) {
      if (conn.subscriptions.size >= MAX_ROUTES_PER_CONNECTION) {
        return conn.refuse(undefined, 'auth_failed', `a connection may authenticate at most ${MAX_ROUTES_PER_CONNECTION} routes`);
      }
      subscription = { route, cursor: -1, inFlight: new Set(), deferrals: new Deferrals(), reading: false, again: false, unread: true };
      conn.subscriptions.set(route, subscription);
      let set = this.subscribers.get(route);
      if (set === undefined) {
        this.subscribers.set(route, (set = new Set()));
        const watched = this.storage.watch?.(route);
        if (watched !== undefined) this.watching.set(route, watched);
      }
      set.add(conn);
    }
    subscription.unread = true;
    conn.send({ v: PROTOCOL_VERSION, type: 'auth_ok', route });
    // A shared store first notes that this process reads the route: a read before that
    // could miss a commit of another relay process that did not yet know to tell this one.
    const watched = this.watching.get(route);
    if (watched === undefined) return this.pump(conn, subscription);
    const sub = subscription;
    this.track(
      watched.then(() => {
        if (this.watching.get(route) === watched) this.watching.delete(route);
        sub.unread = true;
        this.pump(conn, sub);
      }),
    );
  }

  /**
   * A send naming `after` waits for that send's outcome and goes on only if it was
   * accepted (send-chain.ts): a refusal stops what was pipelined behind it.
   */
  private onSend(conn: Connection, ref: string, to: string, payload: string, after: string | undefined): void {
    const settle = conn.sends.begin(ref);
    const bytes = Buffer.byteLength(payload, 'utf8');
    if (bytes > MAX_PAYLOAD_BYTES) {
      settle(false);
      return conn.refuse(ref, 'too_large', `the payload is ${bytes} bytes of JSON; the limit is ${MAX_PAYLOAD_BYTES} bytes (512 KiB)`);
    }
    if (conn.uncommittedBytes + bytes > MAX_UNCOMMITTED_BYTES) {
      settle(false);
      return conn.refuse(ref, 'rate_limited', `the relay is still storing ${conn.uncommittedBytes} bytes from this connection; wait for their replies`);
    }
    // Held while it waits for the send it follows, as while it commits.
    conn.uncommittedBytes += bytes;
    const release = () => (conn.uncommittedBytes -= bytes);
    const store = () => {
      const origin: Origin = { address: conn.address, connection: conn.id };
      const commit = this.storage.enqueue(to, payload, origin);
      void commit.finally(release).catch(() => undefined);
      return commit.then(
        (result) => {
          settle(result.outcome === 'enqueued');
          return this.afterEnqueue(conn, ref, to, payload, result, origin);
        },
        (err: unknown) => {
          settle(false);
          this.failures.note('error', 'relay_commit_failed', { error: messageOf(err) });
          conn.refuse(ref, 'storage', `the relay could not store the message (${messageOf(err)}); send it again`);
        },
      );
    };
    if (after === undefined) return void this.track(store());
    this.track(
      conn.sends.preceding(after).then((preceding) => {
        if (preceding === 'accepted') return store();
        release();
        settle(false);
        conn.refuse(ref, 'out_of_order', outOfOrderMessage(after, preceding));
      }),
    );
  }

  private async afterEnqueue(conn: Connection, ref: string, route: string, payload: string, result: EnqueueResult, origin: Origin): Promise<void> {
    if (result.outcome === 'enqueued') {
      this.settings.metrics?.accepted();
      conn.send({ v: PROTOCOL_VERSION, type: 'accepted', ref, id: result.id });
      if (result.follows === undefined) this.pumpRoute(route);
      else this.committed(route, { id: result.id, payload }, result.follows);
    } else if (result.outcome === 'queue_full') {
      const share = result.limit === 'perAddress' || result.limit === 'perConnection';
      const held = share ? await Promise.resolve(this.storage.held(origin)).catch(() => undefined) : undefined;
      conn.refuse(ref, 'queue_full', queueFullMessage(route, result, this.storage.limits, held));
    } else {
      log.error('relay_id_reused', { result });
      conn.refuse(ref, 'storage', 'the relay could not store the message (internal id conflict); send it again');
    }
  }

  /**
   * The reader cannot take these now (its mailbox holds that sender's share): they leave
   * the window, so the route's other messages flow, and come again when due (deferrals.ts).
   */
  private onDefer(conn: Connection, route: string, ids: readonly number[], ms: number): void {
    const sub = conn.subscriptions.get(route);
    if (sub === undefined) {
      return conn.refuse(undefined, 'not_authenticated', `this connection has not authenticated ${route}; only its reader may defer its messages`);
    }
    if (sub.deferrals.defer(sub.inFlight, ids, ms, this.now()) === 0) return;
    this.scheduleDeferred(conn, sub);
    this.pump(conn, sub);
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

  private onAck(conn: Connection, route: string, ids: readonly number[]): void {
    const subscription = conn.subscriptions.get(route);
    if (subscription === undefined) {
      return conn.refuse(undefined, 'not_authenticated', `this connection has not authenticated ${route}; only its reader may acknowledge its messages`);
    }
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

  private onAnnounce(conn: Connection, announcement: unknown): void {
    this.afterRoster(conn, this.roster.announce(announcement), 'the announcement');
  }

  private onGoodbye(conn: Connection, goodbye: unknown): void {
    this.afterRoster(conn, this.roster.goodbye(goodbye), 'the goodbye');
  }

  private afterRoster(conn: Connection, outcome: AnnounceOutcome | GoodbyeOutcome | Promise<AnnounceOutcome | GoodbyeOutcome>, what: string): void {
    const answer = (result: AnnounceOutcome | GoodbyeOutcome) => {
      if (result === 'invalid') conn.refuse(undefined, 'bad_frame', `${what} is malformed or its signature does not verify`);
    };
    if (typeof outcome === 'string') return answer(outcome);
    const written = outcome.then(answer, (err: unknown) => {
      this.failures.note('error', 'relay_roster_failed', { error: messageOf(err) });
      conn.refuse(undefined, 'storage', `the relay could not store ${what} (${messageOf(err)}); send it again`);
    });
    const earlier = this.rosterWrites.get(conn);
    const all = earlier === undefined ? written : Promise.all([earlier, written]).then(() => undefined);
    this.rosterWrites.set(conn, all);
    void all.finally(() => {
      if (this.rosterWrites.get(conn) === all) this.rosterWrites.delete(conn);
    });
    this.track(written);
  }

  /** Messages arrived on `route`: every connection that reads it looks for what it has not been sent yet. */
  private pumpRoute(route: string): void {
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
  private committed(route: string, message: { id: number; payload: string }, follows: number | null): void {
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

  private sendMessage(conn: Connection, sub: Subscription, message: { id: number; payload: string }): void {
    sub.cursor = message.id;
    sub.inFlight.add(message.id);
    conn.sendText(deliverText(sub.route, message.id, message.payload));
    crashPoint('relay.after_deliver');
    this.settings.metrics?.delivered();
  }

  private track(commit: Promise<unknown>): void {
    const work = commit.catch((err: unknown) => log.error('relay_internal_error', { error: (err as Error).stack ?? String(err) }));
    this.pending.add(work);
    void work.finally(() => this.pending.delete(work));
  }
}
