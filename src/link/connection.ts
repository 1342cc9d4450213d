/**
 * The connection under a relay client (client.ts), kept open: it connects, reconnects
 * with backoff, replaces a connection gone silent, opens each with the handshake
 * (handshake.ts) and decides whether the relay's key is trusted. Its client hears only
 * what a trusted relay says: nothing is read from or written to a relay before that.
 *
 * A refused key (DESIGN.md "The relay's key") closes the connection, logged once per
 * reason as `relay_key_refused`, and it is tried again with backoff (a person may accept
 * the new key meanwhile). Outages are logged as outage.ts says.
 */
import WebSocket from 'ws';
import { relayEndpoint, type RelayEndpoint } from '../config/relay-url.js';
import { messageOf } from '../errors.js';
import { log } from '../log.js';
import { MAX_FRAME_BYTES, parseFrame, relayFrame, type ClientFrame, type RelayFrame } from '../wire/frames.js';
import { trustOptions, type ClientTls } from '../wire/tls.js';
import { admitKey, Handshake, type Challenge } from './handshake.js';
import { keyRefusalSentence, type KeyRefusal } from './key-refusal.js';
import type { RelayTrust } from './known-relays.js';
import { Outage } from './outage.js';
import { connectError, type RelayTrouble } from './reach.js';

export interface ConnectionOptions {
  /** The relay URL, perhaps pinning its key (`#key=`, config/relay-url.ts). */
  url: string;
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

/** A frame of a trusted relay beyond the handshake. */
export type TrustedFrame = Exclude<RelayFrame, { type: 'challenge' | 'welcome' }>;

/** What the connection tells its client. */
export interface ConnectionEvents {
  /** The relay proved, over this connection's `challenge`, a key we trust. */
  trusted(challenge: Challenge): void;
  frame(frame: TrustedFrame): void;
  /** Why the relay is not usable: a failed connection attempt (once per outage) or a refused key. */
  unreachable(why: string): void;
  /** A connection closed; `current` unless another had replaced it already. */
  closed(current: boolean): void;
}

const DEFAULT_SILENCE_MS = 35_000;

const MAX_BACKOFF_MS = 5_000;

export class RelayConnection {
  readonly endpoint: RelayEndpoint;
  private socket: WebSocket | undefined;
  private closed = false;
  private backoff = 100;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private silenceTimer: NodeJS.Timeout | undefined;
  private readonly outage: Outage;
  private handshake: Handshake | undefined;
  /** Why the relay's key is refused, until a handshake is trusted again. */
  private keyRefusal: KeyRefusal | undefined;

  constructor(
    private readonly options: ConnectionOptions,
    private readonly events: ConnectionEvents,
  ) {
    this.endpoint = relayEndpoint(options.url);
    this.outage = new Outage(this.url, options.logOutages !== false);
  }

  /** The relay's URL without a pin: its name in logs, deliveries and relays.json. */
  get url(): string {
    return this.endpoint.url;
  }

  /** Open, and the relay proved a key we trust: nothing is sent to a relay before that. */
  get connected(): boolean {
    return this.socket?.readyState === WebSocket.OPEN && this.handshake?.trusted === true;
  }

  /** The relay's challenge while the connection is open and trusted: what routes are authenticated against. */
  get challenge(): Challenge | undefined {
    return this.connected ? this.handshake!.challenge! : undefined;
  }

  /** Whether the relay of this connection takes `defer` (protocol revision 3). */
  get defers(): boolean {
    return this.connected && (this.handshake?.challenge?.revision ?? 0) >= 3;
  }

  /** Why this relay's key is refused, while it is. */
  get untrusted(): KeyRefusal | undefined {
    return this.keyRefusal;
  }

  /** Why the last connection attempt failed, while no connection is open since. */
  get unreachable(): string | undefined {
    return this.outage.error;
  }

  /** When the present outage began (epoch ms), while connection attempts fail. */
  get unreachableSince(): number | undefined {
    return this.outage.since;
  }

  /**
   * Why nothing is read here now, for a person: the failed connection attempt while one
   * does (the present fact), else the refused key. Undefined while all is well.
   */
  get trouble(): RelayTrouble | undefined {
    const error = this.outage.error;
    if (error !== undefined) return { kind: 'unreachable', error };
    return this.keyRefusal === undefined ? undefined : { kind: 'untrusted', refusal: this.keyRefusal };
  }

  /** Whether close() was called: it will not connect again. */
  get stopped(): boolean {
    return this.closed;
  }

  start(): void {
    this.connect();
  }

  /** Sends `frame` if connected (then `written` is called once it is out); false when not. */
  write(frame: ClientFrame, written?: () => void): boolean {
    if (!this.connected) return false;
    const text = JSON.stringify(frame);
    if (written === undefined) this.socket!.send(text);
    else this.socket!.send(text, () => written());
    return true;
  }

  /** Closes the connection open now, if any; another follows with backoff. */
  replace(reason: string): void {
    this.socket?.close(1000, reason);
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.reconnectTimer);
    clearTimeout(this.silenceTimer);
    this.socket?.close();
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
      this.outage.recovered();
      this.backoff = 100;
      this.heard(socket);
      this.handshake = new Handshake();
      socket.send(JSON.stringify(this.handshake.hello()));
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
      const current = this.socket === socket;
      if (current) {
        this.socket = undefined;
        this.handshake = undefined;
      }
      this.events.closed(current);
      this.scheduleReconnect();
    });
  }

  private failedAttempt(error: string): void {
    if (this.outage.failed(error)) this.events.unreachable(error);
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
    if (frame.type === 'challenge') {
      if (this.handshake !== undefined) this.handshake.challenge = { key: frame.key, nonce: frame.nonce, revision: frame.revision };
    } else if (frame.type === 'welcome') {
      void this.welcomed(frame.sig);
    } else {
      this.events.frame(frame);
    }
  }

  /** The relay signed our nonce: if its key is trusted, the client hears of it. */
  private async welcomed(sig: string): Promise<void> {
    const socket = this.socket;
    const handshake = this.handshake;
    const challenge = handshake?.challenge;
    if (socket === undefined || handshake === undefined || challenge === undefined) return;
    if (!handshake.proves(challenge, sig)) return this.refuseKey(socket, { reason: 'unproven', url: this.url, key: challenge.key });
    const verdict = await admitKey(this.options.trust, this.endpoint, challenge.key);
    if (this.socket !== socket || this.handshake !== handshake) return;
    if (!verdict.trusted) return this.refuseKey(socket, verdict.refusal);
    if (this.keyRefusal !== undefined && this.options.logOutages !== false) log.warn('relay_key_trusted', { relay: this.url, key: challenge.key, message: `relay ${this.url} is trusted again` });
    this.keyRefusal = undefined;
    handshake.trusted = true;
    this.events.trusted(challenge);
  }

  /** Logged once per reason; the connection closes and is tried again with backoff. */
  private refuseKey(socket: WebSocket, refusal: KeyRefusal): void {
    const message = keyRefusalSentence(refusal);
    const repeated = this.keyRefusal !== undefined && keyRefusalSentence(this.keyRefusal) === message;
    if (!repeated && this.options.logOutages !== false) log.warn('relay_key_refused', { relay: this.url, code: 'relay_untrusted', reason: refusal.reason, message });
    this.keyRefusal = refusal;
    // A relay that is up but refused: no point in knocking faster than the slowest retry.
    this.backoff = MAX_BACKOFF_MS;
    this.events.unreachable(message);
    socket.close(1008, 'relay key refused');
  }
}
