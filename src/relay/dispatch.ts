/**
 * What the relay does with each client frame, one handler per frame type (docs/PROTOCOL.md
 * "Relay frames": "Client → relay", "Refusal codes"; DESIGN.md "The relay": "What it
 * guarantees" and "Authenticated reads"): the frame is read within the connection's frame
 * budget and validated, then handled here (hello, auth, ack, defer) or by its module —
 * sends (`sends.ts`), delivery, acknowledgement and deferral to the connections that
 * authenticated a route (`delivery.ts`), the roster (`roster-frames.ts`).
 *
 * A message is committed before `accepted` is sent and before it is delivered to anyone;
 * only a connection that proved a route's key receives or acknowledges its messages.
 */
import type WebSocket from 'ws';
import { log } from '../log.js';
import { describeSchemaError } from '../json.js';
import { signWelcome, verifyAuth } from '../wire/auth.js';
import type { Connection } from './connection.js';
import { Delivery } from './delivery.js';
import { ackRouteOf, isHello, frameText, NOT_JSON, parseJson, refOf } from './frame-text.js';
import { clientFrame, PROTOCOL_VERSION, type ClientFrame } from '../wire/frames.js';
import { MAX_JSON_DEPTH, memberText, nestsDeeperThan } from '../wire/json-scan.js';
import type { QueueStore, RosterStore } from './queue-store.js';
import type { RelayMetrics } from './relay-metrics.js';
import type { RelayKey } from './relay-key.js';
import { RepeatedEvents } from './repeated-log.js';
import { RosterFrames } from './roster-frames.js';
import { Sends } from './sends.js';
import { SenderKeys } from './sender-keys.js';
import { parseRoute } from '../envelope/route.js';

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

export class Dispatcher {
  /** Connections that said hello: one welcome each, so a peer cannot make the relay sign at its frame rate. */
  private readonly welcomed = new WeakSet<Connection>();
  /** Commits in progress and what follows them. */
  private readonly pending = new Set<Promise<unknown>>();
  private readonly delivery: Delivery;
  private readonly sends: Sends;
  private readonly rosterFrames: RosterFrames;
  /** Which proven keys get a share of their own (sender-keys.ts). */
  private readonly senderKeys: SenderKeys;
  /** Store failures, which repeat with every frame while an outage lasts: logged with counts. */
  readonly failures: RepeatedEvents;

  constructor(
    private readonly storage: QueueStore,
    roster: RosterStore,
    private readonly settings: DispatchSettings,
    private readonly now: () => number,
  ) {
    this.senderKeys = new SenderKeys(now);
    this.failures = new RepeatedEvents(now);
    const track = (work: Promise<unknown>) => this.track(work);
    this.delivery = new Delivery(storage, settings, now, track, this.failures);
    this.sends = new Sends(storage, this.delivery, settings.metrics, track, this.failures);
    this.rosterFrames = new RosterFrames(roster, now, track, this.failures);
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
    this.rosterFrames.closed(conn);
    this.storage.closed?.({ address: conn.address, connection: conn.shareHolder });
    this.delivery.closed(conn);
  }

  /** The connection's send buffer drained: deliveries resume on every route it reads. */
  onDrained(conn: Connection): void {
    this.delivery.drained(conn);
  }

  /** `text` is the frame as it arrived: a payload is kept as those bytes, never serialized again. */
  private dispatch(conn: Connection, frame: ClientFrame, text: string): void {
    switch (frame.type) {
      case 'hello':
        return this.onHello(conn, frame.nonce);
      case 'auth':
        return this.onAuth(conn, frame.route, frame.sig, frame.relay, frame.read !== false);
      case 'send':
        return this.sends.onSend(conn, frame.ref, frame.to, memberText(text, 'payload')!, frame.after);
      case 'ack':
        return this.onAck(conn, frame.route, frame.ids);
      case 'defer':
        return this.onDefer(conn, frame.route, frame.ids, frame.ms);
      case 'announce':
        return this.rosterFrames.onAnnounce(conn, frame.announcement);
      case 'goodbye':
        return this.rosterFrames.onGoodbye(conn, frame.goodbye);
      case 'roster':
        return this.rosterFrames.onRoster(conn, frame.ref, { ...(frame.keys && { keys: frame.keys }), ...(frame.fingerprints && { fingerprints: frame.fingerprints }), ...(frame.name_bucket !== undefined && { name_bucket: frame.name_bucket }) });
    }
  }

  private onHello(conn: Connection, nonce: string): void {
    if (this.welcomed.has(conn)) return conn.refuse(undefined, 'bad_frame', 'one hello per connection: this connection was already welcomed');
    this.welcomed.add(conn);
    conn.send({ v: PROTOCOL_VERSION, type: 'welcome', sig: signWelcome(this.settings.key.signingKey, conn.nonce, nonce) });
  }

  private onAuth(conn: Connection, route: string, sig: string, relay: string | undefined, read: boolean): void {
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
    conn.proved();
    // The first key a connection proves is whose share its sends count against, if the relay gives it one.
    const key = parseRoute(route)?.key;
    if (conn.senderKey === undefined && key !== undefined && this.senderKeys.admit(key, conn.address)) conn.senderKey = key;
    if (!read) return conn.send({ v: PROTOCOL_VERSION, type: 'auth_ok', route, read: false });
    let subscription = conn.subscriptions.get(route);
    if (subscription === undefined) {
      if (conn.subscriptions.size >= MAX_ROUTES_PER_CONNECTION) {
        return conn.refuse(undefined, 'auth_failed', `a connection may authenticate at most ${MAX_ROUTES_PER_CONNECTION} routes`);
      }
      subscription = this.delivery.subscribe(conn, route);
    }
    subscription.unread = true;
    conn.send({ v: PROTOCOL_VERSION, type: 'auth_ok', route });
    this.delivery.startReading(conn, subscription);
  }

  /** Only the route's reader may defer its messages (delivery.ts). */
  private onDefer(conn: Connection, route: string, ids: readonly number[], ms: number): void {
    const sub = conn.subscriptions.get(route);
    if (sub === undefined) {
      return conn.refuse(undefined, 'not_authenticated', `this connection has not authenticated ${route}; only its reader may defer its messages`);
    }
    this.delivery.defer(conn, sub, ids, ms);
  }

  /** Only the route's reader may acknowledge its messages (delivery.ts). */
  private onAck(conn: Connection, route: string, ids: readonly number[]): void {
    const subscription = conn.subscriptions.get(route);
    if (subscription === undefined) {
      return conn.refuse(undefined, 'not_authenticated', `this connection has not authenticated ${route}; only its reader may acknowledge its messages`);
    }
    this.delivery.acknowledge(conn, subscription, ids);
  }

  private track(commit: Promise<unknown>): void {
    const work = commit.catch((err: unknown) => log.error('relay_internal_error', { error: (err as Error).stack ?? String(err) }));
    this.pending.add(work);
    void work.finally(() => this.pending.delete(work));
  }
}
