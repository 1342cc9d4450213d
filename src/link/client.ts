/**
 * A session's client of one relay: over a connection kept open to a trusted relay
 * (connection.ts), it reads its routes (route-reading.ts), sends and awaits the answers
 * (sends.ts), asks for the roster, and turns the relay's frames into calls and events.
 * Sends resolve with the relay's answer; nothing here retries a send — the outbox decides
 * that.
 */
import { EventEmitter } from 'node:events';
import { log } from '../log.js';
import type { SigningKey } from '../identity/ed25519.js';
import type { Announcement, Goodbye } from '../presence/announcement.js';
import { RelayConnection, type ConnectionOptions, type TrustedFrame } from './connection.js';
import type { KeyRefusal } from './key-refusal.js';
import type { RelayTrouble } from './reach.js';
import { relayOf } from './relay-groups.js';
import { RequestTable, type RequestChannel } from './requests.js';
import { RouteReading } from './route-reading.js';
import { Sends, type SendOptions, type SendOutcome } from './sends.js';
import { PROTOCOL_VERSION, ROSTER_QUERY_REVISION, type ClientFrame, type RosterEntry, type RosterQuery } from '../wire/frames.js';
import { pickEntries } from './roster-query.js';

export interface Delivery {
  relay: string;
  route: string;
  id: number;
  payload: Record<string, unknown>;
}

export interface RelayClientOptions extends ConnectionOptions {
  key: SigningKey;
  /** Routes this client reads (authenticated after every (re)connect, or once `read()` is called). */
  routes: readonly string[];
  /**
   * Authenticate the routes as soon as the relay is trusted, on every connection (the
   * default). False for a relay reached at several addresses: only the address elected
   * to read does (relay-groups.ts), by calling `read()`.
   */
  readOnConnect?: boolean;
  requestTimeoutMs?: number;
}

/** Listeners per event past which Node warns of a leak: a session's loops, and two per ended session it took. */
const MAX_LISTENERS = 96;

/**
 * Events: 'delivery' (Delivery), 'connected', 'disconnected', 'authenticated' (route),
 * 'unreachable' (why, once per outage (outage.ts), and when the relay's key is refused).
 *
 * Routes are authenticated only with a relay that proved its key over our fresh nonce and
 * whose key the trust decision accepts (DESIGN.md "The relay's key", connection.ts).
 */
export class RelayClient extends EventEmitter {
  private readonly connection: RelayConnection;
  private nextRef = 0;
  private readonly sends: Sends;
  private readonly rosters: RequestTable<RosterEntry[] | undefined>;
  private readonly routes: RouteReading;

  constructor(options: RelayClientOptions) {
    super();
    this.connection = new RelayConnection(options, {
      trusted: (challenge) => {
        this.routes.trusted(challenge);
        this.emit('connected');
      },
      frame: (frame) => this.onFrame(frame),
      unreachable: (why) => this.emit('unreachable', why),
      closed: (current) => {
        this.routes.disconnected();
        this.failAll('disconnected');
        if (current) this.routes.reset();
        this.emit('disconnected');
      },
    });
    this.routes = new RouteReading(options.routes, options.readOnConnect ?? true, options.key, (frame) => this.write(frame));
    const channel: RequestChannel = { connected: () => this.connected, write: (frame) => this.write(frame) };
    const timeoutMs = options.requestTimeoutMs ?? 10_000;
    this.sends = new Sends(this.url, channel, timeoutMs, () => this.ref());
    this.rosters = new RequestTable(channel, timeoutMs);
    // Each ended session a session takes adds a delivery and a connection listener
    // (agent/succession.ts, at most 32), beyond Node's warning threshold of 10.
    this.setMaxListeners(MAX_LISTENERS);
  }

  /** Reads one more route from now on: authenticated at once if this connection reads, and on every reconnection. */
  readRoute(route: string): void {
    this.routes.add(route, this.connection.challenge);
  }

  /**
   * Stops reading a route added by `readRoute`. A relay keeps delivering a route to the
   * connection that authenticated it, so a connection that did is replaced: what it was
   * sent and not acknowledged goes to the route's next reader.
   */
  stopReading(route: string): void {
    if (this.routes.remove(route)) this.connection.replace('route no longer read');
  }

  /**
   * Which relay this URL reaches: the key it pins, else the URL itself. URLs that pin one
   * key are one relay at several addresses (known-relays.ts, relay-groups.ts).
   */
  get relay(): string {
    return relayOf(this.connection.endpoint);
  }

  /** Whether this connection reads the routes (authenticates them once the relay is trusted). */
  get reads(): boolean {
    return this.routes.reads;
  }

  /** Starts reading the routes on this connection, now if it is open and trusted; until it drops. */
  read(): void {
    this.routes.read(this.connection.challenge);
  }

  /** The relay's URL without a pin: its name in logs, deliveries and relays.json. */
  get url(): string {
    return this.connection.url;
  }

  /** Why this relay's key is refused, while it is. */
  get untrusted(): KeyRefusal | undefined {
    return this.connection.untrusted;
  }

  /**
   * Why nothing is read here now, for a person: the failed connection attempt while one
   * does (the present fact), else the refused key. Undefined while all is well.
   */
  get trouble(): RelayTrouble | undefined {
    return this.connection.trouble;
  }

  /** Open, and the relay proved a key we trust: nothing is sent to a relay before that. */
  get connected(): boolean {
    return this.connection.connected;
  }

  /** Whether the relay of this connection answers roster queries and takes version 3 announcements (protocol revision 4). */
  get queriesRoster(): boolean {
    return (this.connection.challenge?.revision ?? 0) >= ROSTER_QUERY_REVISION;
  }

  /** Whether the relay of this connection takes `defer` (protocol revision 3). */
  get defers(): boolean {
    return this.connection.defers;
  }

  /** Why the last connection attempt failed, while no connection is open since. */
  get unreachable(): string | undefined {
    return this.connection.unreachable;
  }

  /** When the present outage began (epoch ms), while connection attempts fail. */
  get unreachableSince(): number | undefined {
    return this.connection.unreachableSince;
  }

  /** Whether close() was called: it will not connect again. */
  get stopped(): boolean {
    return this.connection.stopped;
  }

  start(): void {
    this.connection.start();
  }

  /**
   * Resolves once every route is authenticated, or false at the deadline; with
   * `failFast`, false as soon as a connection attempt has failed.
   */
  ready(timeoutMs: number, options: { failFast?: boolean } = {}): Promise<boolean> {
    if (this.isReady()) return Promise.resolve(true);
    if (options.failFast === true && this.connection.trouble !== undefined) return Promise.resolve(false);
    return new Promise((resolve) => {
      const timer = setTimeout(() => finish(false), timeoutMs);
      const check = () => this.isReady() && finish(true);
      const failed = () => options.failFast === true && finish(false);
      const finish = (value: boolean) => {
        clearTimeout(timer);
        this.off('authenticated', check);
        this.off('connected', check);
        this.off('unreachable', failed);
        resolve(value);
      };
      // 'connected' for a client that reads no route (relay-check.ts) or not on this connection.
      this.on('authenticated', check);
      this.on('connected', check);
      this.on('unreachable', failed);
    });
  }

  /** Connected, and every route authenticated if this connection reads them. */
  private isReady(): boolean {
    return this.connected && this.routes.complete;
  }

  /**
   * Offers `payload` for the route `to`; resolves with the relay's answer, or `timeout`
   * when none came in time. A relay slower than that may still answer: `late` is told
   * that answer if it comes on the same connection (the relay stored the message, though
   * the caller was told it timed out). `name` names the send for a later one's `follows`;
   * `follows` names an earlier send on this connection that this one must come after
   * (offer-ledger.ts): the relay decides it only once that one was accepted.
   */
  send(to: string, payload: Record<string, unknown>, options: SendOptions = {}): Promise<SendOutcome> {
    return this.sends.send(to, payload, options);
  }

  ack(route: string, ids: number[]): void {
    this.write({ v: PROTOCOL_VERSION, type: 'ack', route, ids });
  }

  /** Asks the relay to deliver these again in `ms` and let the route's other messages through meanwhile (`defers` only). */
  defer(route: string, ids: number[], ms: number): void {
    this.write({ v: PROTOCOL_VERSION, type: 'defer', route, ids, ms });
  }

  announce(announcement: Announcement): void {
    this.write({ v: PROTOCOL_VERSION, type: 'announce', announcement });
  }

  goodbye(goodbye: Goodbye): Promise<void> {
    return new Promise((resolve) => {
      if (!this.connection.write({ v: PROTOCOL_VERSION, type: 'goodbye', goodbye }, resolve)) resolve();
    });
  }

  /** What `query` finds on the relay's roster (unverified: the caller verifies each announcement); empty when it did not answer. */
  async roster(query: RosterQuery): Promise<RosterEntry[]> {
    return (await this.rosterAnswer(query)) ?? [];
  }

  /**
   * What `query` finds on the relay's roster, or undefined when it did not answer (not
   * connected, a timeout, a refusal): an empty answer and no answer mean different things
   * to routing. A relay older than revision 4 is asked for its whole roster, and what the
   * query names is picked from it (roster-query.ts).
   */
  rosterAnswer(query: RosterQuery): Promise<RosterEntry[] | undefined> {
    const ref = this.ref();
    if (!this.queriesRoster) {
      return this.rosters.ask(ref, { v: PROTOCOL_VERSION, type: 'roster', ref }, () => undefined).then((entries) => entries && pickEntries(entries, query));
    }
    return this.rosters.ask(ref, { v: PROTOCOL_VERSION, type: 'roster', ref, ...query }, () => undefined);
  }

  close(): void {
    this.connection.close();
    this.failAll('disconnected');
  }

  private ref(): string {
    return (++this.nextRef).toString(36);
  }

  private write(frame: ClientFrame): void {
    this.connection.write(frame);
  }

  /** Their answers would have come on the connection that is gone. */
  private failAll(message: string): void {
    this.sends.failAll(message);
    this.rosters.failAll(() => undefined);
  }

  private onFrame(frame: TrustedFrame): void {
    switch (frame.type) {
      case 'auth_ok':
        if (frame.read === false) return this.routes.accepted(frame.route, false);
        this.routes.accepted(frame.route, true);
        this.emit('authenticated', frame.route);
        return;
      case 'accepted':
        this.sends.answered(frame.ref, { accepted: true, id: frame.id });
        return;
      case 'refused':
        if (frame.ref !== undefined && this.sends.answered(frame.ref, { accepted: false, code: frame.code, message: frame.message })) return;
        if (frame.ref !== undefined && this.rosters.has(frame.ref)) {
          // A busy relay refuses a roster `rate_limited`: no answer from this relay for now, as on a timeout.
          log.info('relay_roster_refused', { relay: this.url, code: frame.code, message: frame.message });
          this.rosters.settle(frame.ref, undefined);
        } else {
          log.warn('relay_refused', { relay: this.url, code: frame.code, message: frame.message });
        }
        return;
      case 'deliver': {
        const delivery: Delivery = { relay: this.url, route: frame.route, id: frame.id, payload: frame.payload };
        this.emit('delivery', delivery);
        return;
      }
      case 'roster':
        this.rosters.settle(frame.ref, frame.entries);
        return;
    }
  }
}
