/**
 * One connection to one relay, kept open: reconnects with backoff, authenticates the
 * routes it reads, and turns frames into calls and events. Sends resolve with the
 * relay's answer; nothing here retries a send — the outbox decides that.
 */
import { EventEmitter } from 'node:events';
import WebSocket from 'ws';
import { log } from '../log.js';
import type { SigningKey } from '../identity/ed25519.js';
import type { Announcement, Goodbye } from '../presence/announcement.js';
import { newNonce, signAuth, verifyWelcome } from '../wire/auth.js';
import { relayEndpoint, type RelayEndpoint } from '../config/relay-url.js';
import { PINS_ONLY, type RelayKeyVerdict, type RelayTrust } from './known-relays.js';
import { keyRefusalSentence, type KeyRefusal } from './key-refusal.js';
import { connectError, type RelayTrouble } from './reach.js';
import { relayOf } from './relay-groups.js';
import { OfferLedger } from './offer-ledger.js';
import { trustOptions, type ClientTls } from '../wire/tls.js';
import { MAX_FRAME_BYTES, PROTOCOL_VERSION, parseFrame, relayFrame, type ClientFrame, type RosterEntry } from '../wire/frames.js';
import { messageOf, type RefusalCode, type SendFailureCode } from '../errors.js';

export type SendOutcome = { accepted: true; id: number } | { accepted: false; code: RefusalCode | SendFailureCode; message: string };

export interface Delivery {
  relay: string;
  route: string;
  id: number;
  payload: Record<string, unknown>;
}

export interface RelayClientOptions {
  /** The relay URL, perhaps pinning its key (`#key=`, config/relay-url.ts). */
  url: string;
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
  /**
   * A relay pings every 15 s; a connection silent this long is presumed dead (a relay
   * host that vanished without closing TCP) and replaced.
   */
  silenceMs?: number;
  /** Log each outage and recovery and each key refusal (default). A command that reports them itself turns it off. */
  logOutages?: boolean;
  /** Certificates a `wss://` relay may present besides Node's CAs (INTERLINK_TLS_CA). */
  tls?: ClientTls;
  /** Decides whether to trust the key a relay proved (known-relays.ts); default: its pin only. */
  trust?: RelayTrust;
}

/** One connection's handshake: our nonce, then the relay's challenge, then its welcome. */
interface Handshake {
  clientNonce: string;
  challenge?: { key: string; nonce: string; revision?: number };
  trusted?: boolean;
}

const DEFAULT_SILENCE_MS = 35_000;

interface Pending<T> {
  resolve: (value: T) => void;
  timer: NodeJS.Timeout;
}

/** Sends whose answer may still come after their timeout, at most this many per connection (the oldest are forgotten). */
const MAX_LATE = 1024;

const MAX_BACKOFF_MS = 5_000;

/** Listeners per event past which Node warns of a leak: a session's loops, and two per ended session it took. */
const MAX_LISTENERS = 96;

/**
 * Events: 'delivery' (Delivery), 'connected', 'disconnected', 'authenticated' (route),
 * 'unreachable' (why, once per outage, and when the relay's key is refused).
 *
 * Routes are authenticated only with a relay that proved its key over our fresh nonce and
 * whose key the trust decision accepts (DESIGN.md "The relay's key"); a refused key closes
 * the connection, logged once per reason as `relay_key_refused`, and it is tried again
 * with backoff (a person may accept the new key meanwhile).
 *
 * An outage starts when a connection attempt fails (not when a connection drops: the
 * first reconnect may well succeed) and ends when one opens. Each is logged once at
 * warning level, the default, naming the relay and the error, however many retries the
 * outage takes: a relay that is not there is visible without being noisy.
 */
export class RelayClient extends EventEmitter {
  private socket: WebSocket | undefined;
  private closed = false;
  private backoff = 100;
  private nextRef = 0;
  private readonly sends = new Map<string, Pending<SendOutcome>>();
  /** Sends that timed out on this connection, by ref: a slow relay's answer still counts (send's `late`). */
  private readonly lateSends = new Map<string, (outcome: SendOutcome) => void>();
  private readonly rosters = new Map<string, Pending<RosterEntry[] | undefined>>();
  /** This connection's sends by name, for sends that follow them. */
  private readonly offers = new OfferLedger();
  private readonly authenticated = new Set<string>();
  private reconnectTimer: NodeJS.Timeout | undefined;
  private silenceTimer: NodeJS.Timeout | undefined;
  /** Why the relay cannot be reached, while an outage lasts. */
  private outage: { error: string; since: number } | undefined;
  private readonly endpoint: RelayEndpoint;
  private handshake: Handshake | undefined;
  /** Why the relay's key is refused, until a handshake is trusted again. */
  private keyRefusal: KeyRefusal | undefined;
  /** Whether this connection reads (authenticates) the routes; reset on every disconnect. */
  private reading: boolean;
  /** The routes read: the options' own, then those added by `readRoute` (an ended session's, agent/succession.ts). */
  private readonly routes: string[];

  constructor(private readonly options: RelayClientOptions) {
    super();
    this.endpoint = relayEndpoint(options.url);
    this.reading = options.readOnConnect ?? true;
    this.routes = [...options.routes];
    // Each ended session a session takes adds a delivery and a connection listener
    // (agent/succession.ts, at most 32), beyond Node's warning threshold of 10.
    this.setMaxListeners(MAX_LISTENERS);
  }

  /** Reads one more route from now on: authenticated at once if this connection reads, and on every reconnection. */
  readRoute(route: string): void {
    if (this.routes.includes(route)) return;
    this.routes.push(route);
    const challenge = this.handshake?.challenge;
    if (this.connected && this.reading && challenge !== undefined) this.authenticateRoute(challenge, route);
  }

  /**
   * Stops reading a route added by `readRoute`. A relay keeps delivering a route to the
   * connection that authenticated it, so a connection that did is replaced: what it was
   * sent and not acknowledged goes to the route's next reader.
   */
  stopReading(route: string): void {
    const index = this.routes.indexOf(route);
    if (index < 0 || this.options.routes.includes(route)) return;
    this.routes.splice(index, 1);
    if (this.authenticated.delete(route)) this.socket?.close(1000, 'route no longer read');
  }

  /**
   * Which relay this URL reaches: the key it pins, else the URL itself. URLs that pin one
   * key are one relay at several addresses (known-relays.ts, relay-groups.ts).
   */
  get relay(): string {
    return relayOf(this.endpoint);
  }

  /** Whether this connection reads the routes (authenticates them once the relay is trusted). */
  get reads(): boolean {
    return this.reading;
  }

  /** Starts reading the routes on this connection, now if it is open and trusted; until it drops. */
  read(): void {
    if (this.reading) return;
    this.reading = true;
    if (this.connected) this.authenticate(this.handshake!.challenge!);
  }

  /** The relay's URL without a pin: its name in logs, deliveries and relays.json. */
  get url(): string {
    return this.endpoint.url;
  }

  /** Why this relay's key is refused, while it is. */
  get untrusted(): KeyRefusal | undefined {
    return this.keyRefusal;
  }

  /**
   * Why nothing is read here now, for a person: the failed connection attempt while one
   * does (the present fact), else the refused key. Undefined while all is well.
   */
  get trouble(): RelayTrouble | undefined {
    if (this.outage !== undefined) return { kind: 'unreachable', error: this.outage.error };
    return this.keyRefusal === undefined ? undefined : { kind: 'untrusted', refusal: this.keyRefusal };
  }

  /** Open, and the relay proved a key we trust: nothing is sent to a relay before that. */
  get connected(): boolean {
    return this.socket?.readyState === WebSocket.OPEN && this.handshake?.trusted === true;
  }

  /** Whether the relay of this connection takes `defer` (protocol revision 3). */
  get defers(): boolean {
    return this.connected && (this.handshake?.challenge?.revision ?? 0) >= 3;
  }

  /** Why the last connection attempt failed, while no connection is open since. */
  get unreachable(): string | undefined {
    return this.outage?.error;
  }

  /** Whether close() was called: it will not connect again. */
  get stopped(): boolean {
    return this.closed;
  }

  start(): void {
    this.connect();
  }

  /**
   * Resolves once every route is authenticated, or false at the deadline; with
   * `failFast`, false as soon as a connection attempt has failed.
   */
  ready(timeoutMs: number, options: { failFast?: boolean } = {}): Promise<boolean> {
    if (this.isReady()) return Promise.resolve(true);
    if (options.failFast === true && (this.outage !== undefined || this.keyRefusal !== undefined)) return Promise.resolve(false);
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
    return this.connected && (!this.reading || this.routes.every((r) => this.authenticated.has(r)));
  }

  /**
   * Offers `payload` for the route `to`; resolves with the relay's answer, or `timeout`
   * when none came in time. A relay slower than that may still answer: `late` is told
   * that answer if it comes on the same connection (the relay stored the message, though
   * the caller was told it timed out). `name` names the send for a later one's `follows`;
   * `follows` names an earlier send on this connection that this one must come after
   * (offer-ledger.ts): the relay decides it only once that one was accepted.
   */
  send(to: string, payload: Record<string, unknown>, options: { late?: (outcome: SendOutcome) => void; name?: string; follows?: string } = {}): Promise<SendOutcome> {
    // A sealed envelope leaves only in its wire form (envelope.ts wireOf): its opened body
    // must never reach a relay.
    if (payload.v === 4 && 'text' in payload) throw new Error('a sealed envelope was about to be sent with its opened body; send wireOf(envelope)');
    const following = options.follows === undefined ? {} : this.offers.follow(options.follows);
    if ('refuse' in following) return Promise.resolve({ accepted: false, code: 'out_of_order', message: `relay ${this.url}: ${following.refuse}` });
    const ref = this.ref();
    const fail = (message: string): SendOutcome => ({
      accepted: false,
      code: message === 'disconnected' ? 'disconnected' : 'timeout',
      message: `relay ${this.url}: ${message}`,
    });
    const { name, late } = options;
    // No answer (a timeout) leaves it pending: the relay may still decide it.
    const answered = (outcome: SendOutcome) => {
      if (name === undefined || (!outcome.accepted && (outcome.code === 'timeout' || outcome.code === 'disconnected'))) return;
      this.offers.answered(name, ref, outcome.accepted);
    };
    if (name !== undefined) this.offers.offered(name, ref);
    const frame: ClientFrame = { v: PROTOCOL_VERSION, type: 'send', ref, to, payload, ...following };
    const onLate = () => this.awaitLate(ref, (outcome) => (answered(outcome), late?.(outcome)));
    return this.request(this.sends, ref, frame, fail, onLate).then((outcome) => (answered(outcome), outcome));
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
      if (!this.connected) return resolve();
      this.socket!.send(JSON.stringify({ v: PROTOCOL_VERSION, type: 'goodbye', goodbye }), () => resolve());
    });
  }

  /** The relay's roster entries (unverified: the caller verifies each announcement); empty when it did not answer. */
  async roster(): Promise<RosterEntry[]> {
    return (await this.rosterAnswer()) ?? [];
  }

  /**
   * The relay's roster entries, or undefined when it did not answer (not connected, a
   * timeout, a refusal): an empty roster and no answer mean different things to routing.
   */
  rosterAnswer(): Promise<RosterEntry[] | undefined> {
    const ref = this.ref();
    return this.request(this.rosters, ref, { v: PROTOCOL_VERSION, type: 'roster', ref }, () => undefined);
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.reconnectTimer);
    clearTimeout(this.silenceTimer);
    this.socket?.close();
    this.failAll('disconnected');
  }

  private ref(): string {
    return (++this.nextRef).toString(36);
  }

  private request<T>(table: Map<string, Pending<T>>, ref: string, frame: ClientFrame, fail: (message: string) => T, onTimeout?: () => void): Promise<T> {
    return new Promise((resolve) => {
      if (!this.connected) return resolve(fail('disconnected'));
      const timer = setTimeout(() => {
        table.delete(ref);
        onTimeout?.();
        resolve(fail('timeout'));
      }, this.options.requestTimeoutMs ?? 10_000);
      table.set(ref, { resolve, timer });
      this.write(frame);
    });
  }

  private awaitLate(ref: string, late: (outcome: SendOutcome) => void): void {
    this.lateSends.set(ref, late);
    if (this.lateSends.size > MAX_LATE) this.lateSends.delete(this.lateSends.keys().next().value!);
  }

  /** A relay's answer to a send that had timed out: passed to its `late`, once. */
  private answeredLate(ref: string, outcome: SendOutcome): void {
    const late = this.lateSends.get(ref);
    if (late === undefined) return;
    this.lateSends.delete(ref);
    late(outcome);
  }

  private write(frame: ClientFrame): void {
    if (this.connected) this.socket!.send(JSON.stringify(frame));
  }

  private connect(): void {
    if (this.closed) return;
    let socket: WebSocket;
    try {
      socket = new WebSocket(this.url, { maxPayload: MAX_FRAME_BYTES, perMessageDeflate: false, handshakeTimeout: 5_000, ...trustOptions(this.options.tls) });
    } catch (err) {
      // A URL ws cannot use: no retry will change that.
      this.failedAttempt(`not a usable relay URL (${messageOf(err)})`);
      return;
    }
    this.socket = socket;
    let opened = false;
    let error: string | undefined;
    socket.on('error', (err) => {
      error = connectError(err);
      log.debug('relay_socket_error', { relay: this.url, error: err.message });
    });
    socket.on('open', () => {
      opened = true;
      log.debug('relay_open', { relay: this.url });
      this.recovered();
      this.backoff = 100;
      this.heard(socket);
      this.handshake = { clientNonce: newNonce() };
      socket.send(JSON.stringify({ v: PROTOCOL_VERSION, type: 'hello', nonce: this.handshake.clientNonce } satisfies ClientFrame));
    });
    socket.on('ping', () => this.heard(socket));
    socket.on('message', (data, isBinary) => {
      this.heard(socket);
      if (!isBinary) this.onFrame(data.toString());
    });
    socket.on('close', (code) => {
      log.debug('relay_closed', { relay: this.url, code });
      if (!opened) this.failedAttempt(error ?? `closed before it opened (code ${code})`);
      clearTimeout(this.silenceTimer);
      this.authenticated.clear();
      this.failAll('disconnected');
      if (this.socket === socket) {
        this.socket = undefined;
        this.handshake = undefined;
        this.reading = this.options.readOnConnect ?? true;
      }
      this.emit('disconnected');
      this.scheduleReconnect();
    });
  }

  /** The first failed attempt of an outage is logged; the retries that follow are not. */
  private failedAttempt(error: string): void {
    if (this.outage !== undefined) return;
    this.outage = { error, since: Date.now() };
    if (this.options.logOutages !== false) {
      const message = `relay ${this.url} does not answer (${error}); retrying in the background, and messages wait in the outbox meanwhile`;
      log.warn('relay_unreachable', { relay: this.url, error, message });
    }
    this.emit('unreachable', error);
  }

  private recovered(): void {
    if (this.outage === undefined) return;
    if (this.options.logOutages !== false) {
      log.warn('relay_reachable', { relay: this.url, message: `relay ${this.url} answers again`, outage_ms: Date.now() - this.outage.since });
    }
    this.outage = undefined;
  }

  /** Restarts the silence deadline; past it the connection is dropped and replaced. */
  private heard(socket: WebSocket): void {
    clearTimeout(this.silenceTimer);
    this.silenceTimer = setTimeout(() => {
      log.warn('relay_silent', { relay: this.url, silence_ms: this.options.silenceMs ?? DEFAULT_SILENCE_MS });
      socket.terminate();
    }, this.options.silenceMs ?? DEFAULT_SILENCE_MS);
    this.silenceTimer.unref();
  }

  private scheduleReconnect(): void {
    if (this.closed) return;
    const delay = this.backoff * (0.5 + Math.random());
    this.backoff = Math.min(this.backoff * 2, MAX_BACKOFF_MS);
    this.reconnectTimer = setTimeout(() => this.connect(), delay);
    this.reconnectTimer.unref();
  }

  private failAll(message: string): void {
    // Their answers would have come on the connection that is gone.
    this.lateSends.clear();
    this.offers.clear();
    for (const [ref, pending] of this.sends) {
      clearTimeout(pending.timer);
      pending.resolve({ accepted: false, code: 'disconnected', message: `relay ${this.url}: ${message}` });
      this.sends.delete(ref);
    }
    for (const [ref, pending] of this.rosters) {
      clearTimeout(pending.timer);
      pending.resolve(undefined);
      this.rosters.delete(ref);
    }
  }

  private onFrame(text: string): void {
    const frame = parseFrame(relayFrame, text);
    const socket = this.socket;
    if (frame === undefined && socket !== undefined && this.handshake !== undefined && this.handshake.challenge === undefined) {
      return this.refuseKey(socket, { reason: 'no_challenge', url: this.url });
    }
    if (frame === undefined) {
      log.warn('relay_bad_frame', { relay: this.url });
      return;
    }
    // Until the relay proved a key we trust, only its opening frames are read.
    if (this.handshake?.trusted !== true && frame.type !== 'challenge' && frame.type !== 'welcome') return;
    switch (frame.type) {
      case 'challenge':
        if (this.handshake !== undefined) this.handshake.challenge = { key: frame.key, nonce: frame.nonce, revision: frame.revision };
        return;
      case 'welcome':
        void this.welcomed(frame.sig);
        return;
      case 'auth_ok':
        this.authenticated.add(frame.route);
        this.emit('authenticated', frame.route);
        return;
      case 'accepted':
        if (this.sends.has(frame.ref)) this.settle(this.sends, frame.ref, { accepted: true, id: frame.id });
        else this.answeredLate(frame.ref, { accepted: true, id: frame.id });
        return;
      case 'refused':
        if (frame.ref !== undefined && this.sends.has(frame.ref)) {
          this.settle(this.sends, frame.ref, { accepted: false, code: frame.code, message: frame.message });
        } else if (frame.ref !== undefined && this.lateSends.has(frame.ref)) {
          this.answeredLate(frame.ref, { accepted: false, code: frame.code, message: frame.message });
        } else if (frame.ref !== undefined && this.rosters.has(frame.ref)) {
          // A busy relay refuses a roster `rate_limited`: no answer from this relay for now, as on a timeout.
          log.info('relay_roster_refused', { relay: this.url, code: frame.code, message: frame.message });
          this.settle(this.rosters, frame.ref, undefined);
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
        this.settle(this.rosters, frame.ref, frame.entries);
        return;
    }
  }

  /** The relay signed our nonce: if its key is trusted, our routes are authenticated against it. */
  private async welcomed(sig: string): Promise<void> {
    const socket = this.socket;
    const handshake = this.handshake;
    const challenge = handshake?.challenge;
    if (socket === undefined || handshake === undefined || challenge === undefined) return;
    if (!verifyWelcome(challenge.key, challenge.nonce, handshake.clientNonce, sig)) {
      return this.refuseKey(socket, { reason: 'unproven', url: this.url, key: challenge.key });
    }
    let verdict: RelayKeyVerdict;
    try {
      verdict = await (this.options.trust ?? PINS_ONLY).admit(this.endpoint, challenge.key);
    } catch (err) {
      verdict = { trusted: false, refusal: { reason: 'unchecked', url: this.url, error: messageOf(err) } };
    }
    if (this.socket !== socket || this.handshake !== handshake) return;
    if (!verdict.trusted) return this.refuseKey(socket, verdict.refusal);
    if (this.keyRefusal !== undefined && this.options.logOutages !== false) log.warn('relay_key_trusted', { relay: this.url, key: challenge.key, message: `relay ${this.url} is trusted again` });
    this.keyRefusal = undefined;
    handshake.trusted = true;
    if (this.reading) this.authenticate(challenge);
    this.emit('connected');
  }

  private authenticate(challenge: { key: string; nonce: string }): void {
    for (const route of this.routes) this.authenticateRoute(challenge, route);
  }

  private authenticateRoute(challenge: { key: string; nonce: string }, route: string): void {
    this.write({ v: PROTOCOL_VERSION, type: 'auth', route, relay: challenge.key, sig: signAuth(this.options.key, challenge.key, challenge.nonce, route) });
  }

  /** Logged once per reason; the connection closes and is tried again with backoff. */
  private refuseKey(socket: WebSocket, refusal: KeyRefusal): void {
    const message = keyRefusalSentence(refusal);
    const repeated = this.keyRefusal !== undefined && keyRefusalSentence(this.keyRefusal) === message;
    if (!repeated && this.options.logOutages !== false) log.warn('relay_key_refused', { relay: this.url, code: 'relay_untrusted', reason: refusal.reason, message });
    this.keyRefusal = refusal;
    // A relay that is up but refused: no point in knocking faster than the slowest retry.
    this.backoff = MAX_BACKOFF_MS;
    this.emit('unreachable', message);
    socket.close(1008, 'relay key refused');
  }

  private settle<T>(table: Map<string, Pending<T>>, ref: string, value: T): void {
    const pending = table.get(ref);
    if (pending === undefined) return;
    clearTimeout(pending.timer);
    table.delete(ref);
    pending.resolve(value);
  }
}
