/**
 * The relay's connections: each one's frame budget (a token bucket), the heartbeat that
 * cuts off dead peers, and backpressure on every frame sent (DESIGN.md "The relay":
 * "Authenticated reads" and "Bounded by construction"; docs/PROTOCOL.md "Relay frames":
 * "Delivery and acknowledgement", "Limits" and "Heartbeat").
 *
 * What a connection reads is decided in `delivery.ts`; this module only sends what it is
 * given, and never lets one peer's unread frames grow the relay's memory without bound.
 */
import { randomBytes } from 'node:crypto';
import WebSocket from 'ws';
import { log } from '../log.js';
import { newNonce } from '../wire/auth.js';
import { messageOf, type RefusalCode } from '../errors.js';
import { PROTOCOL_VERSION, type RelayFrame } from '../wire/frames.js';
import { SendChain } from './send-chain.js';
import { sourceGroup } from './shares.js';
import type { Deferrals } from './deferrals.js';

export const DEFAULT_HEARTBEAT_MS = 15_000;
/** Token bucket per connection: every frame takes a token, but a reader's acks. */
export const DEFAULT_FRAME_RATE = 2_000;
export const DEFAULT_FRAME_BURST = 4_000;
/** Deliveries pause while a connection has more than this buffered, and resume when it drains. */
export const HIGH_WATER_BYTES = 1024 * 1024;
/** A peer that lets replies pile up beyond this is cut off (deliveries alone stop at HIGH_WATER_BYTES). */
export const MAX_BUFFERED_BYTES = 8 * 1024 * 1024;
/**
 * The relay stops reading a peer's frames while more than this waits in its send buffer,
 * and reads on once it drains: a peer that does not read its replies cannot ask for more
 * (only the frames of the chunk already read are still answered).
 */
export const READ_PAUSE_BYTES = 64 * 1024;
/** Random bytes in each heartbeat ping: only a pong that echoes them counts as life. */
const PING_BYTES = 8;
/** How long closeAll() and closeSoon() let peers finish the closing handshake before cutting them off. */
const CLOSE_GRACE_MS = 2_000;
/**
 * How long a connection may take to prove a key (`auth`, or `auth` with `read: false`)
 * after the relay's challenge: a WebSocket that proves nothing, pongs answered or not, is
 * closed, so idle sockets cannot hold the relay's connections for good.
 */
export const DEFAULT_PROOF_WITHIN_MS = 10_000;
/** WebSocket close code 1008, "policy violation": the connection proved no key in time. */
const NO_PROOF_CLOSE_CODE = 1008;

/** The part of a ws socket a connection sends on (a fake one in unit tests). */
export interface RelaySocket {
  readonly readyState: number;
  readonly bufferedAmount: number;
  send(data: string | Buffer, options: { binary: false; fin: boolean }, cb?: (err?: Error) => void): void;
  ping(data: Buffer): void;
  pause(): void;
  resume(): void;
  terminate(): void;
  close(code: number, reason: string): void;
  once(event: 'close', listener: () => void): unknown;
}

export interface Subscription {
  route: string;
  /** highest id delivered on this connection: the next delivery comes after it */
  cursor: number;
  /** delivered here and neither acknowledged nor deferred yet */
  inFlight: Set<number>;
  /** delivered here and deferred by the reader: delivered again when due (deferrals.ts) */
  deferrals: Deferrals;
  /** a read from a shared store is under way (delivery.ts `pump`) */
  reading: boolean;
  /** something may have arrived while it was: read again when it returns */
  again: boolean;
  /**
   * Something may be queued past the cursor that this connection was not sent: set by
   * every arrival on the route, and by a read cut short (by the window, the connection's
   * buffer, or its limit); cleared when a read starts. While clear, a pump (an
   * acknowledgement opening the window) reads nothing: the last read found the route's end.
   */
  unread: boolean;
}

export class TokenBucket {
  private tokens: number;
  private last: number;

  constructor(
    private readonly rate: number,
    private readonly burst: number,
    now: number,
  ) {
    this.tokens = burst;
    this.last = now;
  }

  take(now: number): boolean {
    this.tokens = Math.min(this.burst, this.tokens + (Math.max(0, now - this.last) * this.rate) / 1000);
    this.last = now;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}

export interface ConnectionHooks {
  /** The buffer drained below HIGH_WATER_BYTES after deliveries had paused. */
  drained(conn: Connection): void;
  /** Bytes buffered right after a send. */
  buffered(bytes: number): void;
  /** A frame was refused (counted for the operator, relay-metrics.ts). */
  refused?(code: RefusalCode): void;
}

export class Connection {
  readonly nonce = newNonce();
  readonly subscriptions = new Map<string, Subscription>();
  /** The peer answered the last ping (or none was sent yet). */
  alive = true;
  /** Deliveries are paused until the send buffer drains. */
  blocked = false;
  /** The peer's frames are not read until the send buffer drains below READ_PAUSE_BYTES. */
  readingPaused = false;
  /** Payload bytes of this connection's sends waiting for their commit. */
  uncommittedBytes = 0;
  /** Its recent sends' outcomes, for sends that name the one they follow (send-chain.ts). */
  readonly sends = new SendChain();
  readonly closed: Promise<void>;
  /** The send callback: resumes reading and deliveries once the buffer has drained. */
  private readonly flushed: () => void;
  /** The payload of the last ping, which the next pong must echo. */
  private lastPing: Buffer | undefined;
  /** The connection proved a key over its challenge (`auth`). */
  proven = false;
  /** The key whose share its sends count against, once the relay gave it one (sender-keys.ts). */
  senderKey: string | undefined;
  private proofDeadline: NodeJS.Timeout | undefined;

  constructor(
    readonly id: number,
    readonly ws: RelaySocket,
    readonly bucket: TokenBucket,
    private readonly hooks: ConnectionHooks,
    /** the peer's IP address, which its sends are counted by (fair shares) */
    readonly address?: string,
  ) {
    this.closed = new Promise((resolve) => ws.once('close', () => resolve()));
    this.flushed = () => {
      if (this.readingPaused && ws.bufferedAmount <= READ_PAUSE_BYTES) {
        this.readingPaused = false;
        ws.resume();
      }
      if (this.blocked && ws.bufferedAmount <= HIGH_WATER_BYTES) {
        this.blocked = false;
        hooks.drained(this);
      }
    };
  }

  get open(): boolean {
    return this.ws.readyState === WebSocket.OPEN;
  }

  /**
   * Whose share this connection's sends count against (queue-store.ts `Origin`): its
   * sender key's, else its network's pool of connections without one.
   */
  get shareHolder(): string {
    return this.senderKey !== undefined ? `key:${this.senderKey}` : `net:${sourceGroup(this.address) ?? 'unknown'}`;
  }

  /** Closes the connection unless it proves a key within `ms`. */
  awaitProof(ms: number): void {
    this.proofDeadline = setTimeout(() => {
      if (this.proven) return;
      log.debug('relay_no_proof', { conn: this.id, message: `no key proved within ${ms} ms: closed` });
      this.closeSoon(NO_PROOF_CLOSE_CODE, `no key proved within ${ms} ms; send auth (with read: false to only prove a key)`);
    }, ms);
    this.proofDeadline.unref();
    this.ws.once('close', () => clearTimeout(this.proofDeadline));
  }

  /** A valid `auth` arrived: the connection stays past the proof deadline. */
  proved(): void {
    this.proven = true;
    clearTimeout(this.proofDeadline);
  }

  /** Asks the peer to close, and cuts it off if the closing handshake has not ended within CLOSE_GRACE_MS. */
  closeSoon(code: number, reason: string): void {
    this.ws.close(code, reason);
    const cutOff = setTimeout(() => this.ws.terminate(), CLOSE_GRACE_MS);
    cutOff.unref();
    this.ws.once('close', () => clearTimeout(cutOff));
  }

  send(frame: RelayFrame): void {
    this.sendText(JSON.stringify(frame));
  }

  refuse(ref: string | undefined, code: RefusalCode, message: string): void {
    this.hooks.refused?.(code);
    this.send({ v: PROTOCOL_VERSION, type: 'refused', ...(ref !== undefined && { ref }), code, message });
  }

  /** Sends one text frame; see `sendMessage`. */
  sendText(text: string, written?: () => void): boolean {
    return this.sendMessage([text], written);
  }

  /**
   * Sends one text message in consecutive fragments (ws copies no Buffer it is given, so
   * many replies can share one). Past READ_PAUSE_BYTES the peer's frames wait unread; past
   * HIGH_WATER_BYTES deliveries pause; past MAX_BUFFERED_BYTES the peer is cut off.
   * `written` runs once the message has left the send buffer or the socket failed.
   * Returns whether the message was sent.
   */
  sendMessage(parts: readonly (string | Buffer)[], written?: () => void): boolean {
    const ws = this.ws;
    if (!this.open) return false;
    const done = written === undefined ? this.flushed : () => (this.flushed(), written());
    parts.forEach((part, i) => ws.send(part, { binary: false, fin: i === parts.length - 1 }, i === parts.length - 1 ? done : undefined));
    const buffered = ws.bufferedAmount;
    this.hooks.buffered(buffered);
    if (buffered > MAX_BUFFERED_BYTES) {
      log.warn('relay_slow_consumer', { conn: this.id, buffered });
      ws.terminate();
      return true;
    }
    if (buffered > HIGH_WATER_BYTES) this.blocked = true;
    if (buffered > READ_PAUSE_BYTES && !this.readingPaused) {
      this.readingPaused = true;
      ws.pause();
    }
    return true;
  }

  /** One heartbeat: a peer that did not echo the last ping is terminated; a new random ping goes out. */
  beat(): void {
    if (!this.alive) {
      log.info('relay_heartbeat_missed', { conn: this.id });
      this.ws.terminate();
      return;
    }
    this.alive = false;
    this.lastPing = randomBytes(PING_BYTES);
    this.ws.ping(this.lastPing);
  }

  /** A pong is life only if it echoes the last ping: an unsolicited or stale one says nothing about reading. */
  pong(data: Buffer): void {
    if (this.lastPing !== undefined && data.equals(this.lastPing)) this.alive = true;
  }
}

export interface ConnectionEvents {
  frame(conn: Connection, data: WebSocket.RawData, isBinary: boolean): void;
  drained(conn: Connection): void;
  closed(conn: Connection): void;
  refused?(code: RefusalCode): void;
}

export interface FrameBudget {
  frameRate: number;
  frameBurst: number;
  /** Close a connection that proves no key within this long (none: never). */
  proofWithinMs?: number;
}

/** The open connections of one relay. */
export class ConnectionSet {
  private readonly connections = new Set<Connection>();
  private nextId = 1;
  private peakBufferedBytes = 0;
  private readonly hooks: ConnectionHooks;

  constructor(
    private readonly budget: FrameBudget,
    private readonly now: () => number,
    private readonly events: ConnectionEvents,
  ) {
    this.hooks = {
      drained: (conn) => events.drained(conn),
      refused: (code) => events.refused?.(code),
      buffered: (bytes) => {
        if (bytes > this.peakBufferedBytes) this.peakBufferedBytes = bytes;
      },
    };
  }

  add(ws: WebSocket, address?: string): Connection {
    const conn = new Connection(this.nextId++, ws, new TokenBucket(this.budget.frameRate, this.budget.frameBurst, this.now()), this.hooks, address);
    ws.on('error', (err) => log.debug('relay_socket_error', { conn: conn.id, error: err.message }));
    ws.on('pong', (data) => conn.pong(data));
    ws.on('message', (data, isBinary) => {
      // An error nobody foresaw in handling one frame ends that connection, never the relay.
      try {
        this.events.frame(conn, data, isBinary);
      } catch (err) {
        log.error('relay_frame_failed', { conn: conn.id, code: 'internal', error: messageOf(err) });
        ws.close(1011, 'internal error');
      }
    });
    ws.once('close', () => {
      this.connections.delete(conn);
      this.events.closed(conn);
    });
    this.connections.add(conn);
    if (this.budget.proofWithinMs !== undefined) conn.awaitProof(this.budget.proofWithinMs);
    return conn;
  }

  beat(): void {
    for (const conn of this.connections) conn.beat();
  }

  stats(): { connections: number; blocked: number; peakBufferedBytes: number } {
    let blocked = 0;
    for (const conn of this.connections) if (conn.blocked) blocked++;
    return { connections: this.connections.size, blocked, peakBufferedBytes: this.peakBufferedBytes };
  }

  /** Asks every peer to close (with `code` and `reason`), waits CLOSE_GRACE_MS for the handshakes, then cuts off the rest. */
  async closeAll(code = 1001, reason = 'relay shutting down'): Promise<void> {
    const connections = [...this.connections];
    for (const conn of connections) conn.ws.close(code, reason);
    const allClosed = Promise.all(connections.map((c) => c.closed));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([allClosed, new Promise<void>((r) => (timer = setTimeout(r, CLOSE_GRACE_MS)))]);
    clearTimeout(timer);
    for (const conn of connections) conn.ws.terminate();
    await allClosed;
  }
}
