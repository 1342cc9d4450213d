/**
 * The relay: a WebSocket server that keeps each route's messages until a reader that
 * proved the route's key acknowledges them (docs/PROTOCOL.md "Relay frames", DESIGN.md
 * "The relay").
 *
 * Anyone may send; only a connection that answered its challenge with the route's key
 * receives or acknowledges the route's messages. A message is committed (with `--db`:
 * fsynced) before `accepted` is sent and before it is delivered to anyone. The relay holds
 * no keys and never parses payloads: it verifies only auth proofs, announcements and
 * goodbyes.
 */
import { makePrivateDir } from '../store/private.js';
import { createServer, type Server as HttpServer } from 'node:http';
import { join, resolve } from 'node:path';
import WebSocket, { WebSocketServer } from 'ws';
import { errnoCode, InterlinkError } from '../errors.js';
import { log } from '../log.js';
import { JournalStore } from '../store/journal-store.js';
import { describeSchemaError } from '../store/json-store.js';
import { withFileLock } from '../store/lock.js';
import { newNonce, verifyAuth } from './auth.js';
import { clientFrame, MAX_FRAME_BYTES, MAX_PAYLOAD_BYTES, PROTOCOL_VERSION, type ClientFrame, type RefusalCode, type RelayFrame } from './frames.js';
import { DEFAULT_QUEUE_LIMITS, RelayQueueState, relayQueueFormat, type EnqueueResult, type QueueLimits, type QueueOp, type QueueResult } from './queues.js';
import { Roster, ROSTER_MAX_ENTRIES, ROSTER_RETAIN_MS } from './roster.js';

export const DEFAULT_HEARTBEAT_MS = 15_000;
/** Unacknowledged deliveries per connection and route. */
export const DEFAULT_DELIVERY_WINDOW = 256;
/** Token bucket per connection: every frame takes a token, but a reader's acks. */
export const DEFAULT_FRAME_RATE = 2_000;
export const DEFAULT_FRAME_BURST = 4_000;
/** Deliveries pause while a connection has more than this buffered, and resume when it drains. */
export const HIGH_WATER_BYTES = 1024 * 1024;
/** A peer that lets replies pile up beyond this is cut off (deliveries alone stop at HIGH_WATER_BYTES). */
export const MAX_BUFFERED_BYTES = 8 * 1024 * 1024;
/** Payload bytes one connection may have waiting for a commit; beyond it sends are refused `rate_limited`. */
export const MAX_UNCOMMITTED_BYTES = 32 * 1024 * 1024;
/** Routes one connection may authenticate. */
export const MAX_ROUTES_PER_CONNECTION = 64;
/** How long close() lets peers finish the closing handshake before cutting them off. */
const CLOSE_GRACE_MS = 2_000;
/** How long a new relay waits for another relay that holds the same --db. */
const DB_LOCK_TIMEOUT_MS = 2_000;

export interface RelayOptions {
  host: string;
  port: number;
  /** Durable queues under this directory (created if missing); in memory without it. */
  dbDir?: string;
  heartbeatMs?: number;
  maxRouteMessages?: number;
  maxMessages?: number;
  maxBytes?: number;
  frameRate?: number;
  frameBurst?: number;
  deliveryWindow?: number;
  rosterMaxEntries?: number;
  now?: () => number;
}

export interface RelayStats {
  connections: number;
  /** connections whose deliveries are paused for backpressure */
  blocked: number;
  /** the most bytes any connection had buffered right after a send */
  peakBufferedBytes: number;
  routes: number;
  messages: number;
  bytes: number;
}

interface QueueBackend {
  submit(op: QueueOp): Promise<QueueResult>;
  /** After the last submit settled. */
  release(): Promise<void>;
}

interface Subscription {
  route: string;
  /** highest id delivered on this connection: the next delivery comes after it */
  cursor: number;
  /** delivered here and not acknowledged yet */
  inFlight: Set<number>;
}

class TokenBucket {
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

class Connection {
  readonly nonce = newNonce();
  readonly subscriptions = new Map<string, Subscription>();
  alive = true;
  blocked = false;
  uncommittedBytes = 0;
  readonly closed: Promise<void>;
  /** The send callback: resumes deliveries once the buffer has drained. */
  readonly flushed: () => void;

  constructor(
    readonly id: number,
    readonly ws: WebSocket,
    readonly bucket: TokenBucket,
    onDrained: (conn: Connection) => void,
  ) {
    this.closed = new Promise((resolve) => ws.once('close', () => resolve()));
    this.flushed = () => {
      if (this.blocked && ws.bufferedAmount <= HIGH_WATER_BYTES) {
        this.blocked = false;
        onDrained(this);
      }
    };
  }
}

function frameText(data: WebSocket.RawData): string {
  if (Array.isArray(data)) return Buffer.concat(data).toString('utf8');
  if (data instanceof ArrayBuffer) return Buffer.from(data).toString('utf8');
  return data.toString('utf8');
}

const NOT_JSON = Symbol('not JSON');

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return NOT_JSON;
  }
}

/** The `ref` of a frame that failed validation, if it has a usable one, so the refusal can name it. */
function refOf(data: unknown): string | undefined {
  if (typeof data !== 'object' || data === null || !('ref' in data)) return undefined;
  const ref = data.ref;
  return typeof ref === 'string' && ref.length >= 1 && ref.length <= 64 ? ref : undefined;
}

function isReaderAck(conn: Connection, data: unknown): boolean {
  if (typeof data !== 'object' || data === null || !('type' in data) || !('route' in data)) return false;
  return data.type === 'ack' && typeof data.route === 'string' && conn.subscriptions.has(data.route);
}

/** The deliver frame, with the stored payload text spliced in unparsed. */
function deliverText(route: string, id: number, payload: string): string {
  return `{"v":${PROTOCOL_VERSION},"type":"deliver","route":${JSON.stringify(route)},"id":${id},"payload":${payload}}`;
}

function queueFullMessage(route: string, result: Extract<EnqueueResult, { outcome: 'queue_full' }>, limits: QueueLimits): string {
  switch (result.limit) {
    case 'routeMessages':
      return `the queue of ${route} is full (${limits.routeMessages} messages waiting for its reader); try again later`;
    case 'messages':
      return `the relay is full (${limits.messages} messages queued); try again later`;
    case 'bytes':
      return `the relay is full (${limits.bytes} bytes of payload queued); try again later`;
  }
}

/** Store directories held by relays of this process (the file lock queues callers within a process instead of refusing them). */
const heldDbs = new Set<string>();

/** Holds `<db>/relay.lock` until released: two relays on one store would issue the same ids. */
async function holdDbLock(dir: string): Promise<() => Promise<void>> {
  const busy = (why: string, cause?: unknown) => new InterlinkError('busy', `${dir} is in use by another relay (${why})`, undefined, { cause });
  if (heldDbs.has(dir)) throw busy('in this process');
  heldDbs.add(dir);
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let acquired!: () => void;
  const held = new Promise<void>((r) => (acquired = r));
  const lock = withFileLock(
    join(dir, 'relay'),
    async () => {
      acquired();
      await released;
    },
    { timeoutMs: DB_LOCK_TIMEOUT_MS },
  );
  try {
    await Promise.race([held, lock]);
  } catch (err) {
    heldDbs.delete(dir);
    throw busy((err as Error).message, err);
  }
  return async () => {
    release();
    await lock;
    heldDbs.delete(dir);
  };
}

function listen(server: HttpServer, host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error) => {
      server.off('listening', onListening);
      reject(err);
    };
    const onListening = () => {
      server.off('error', onError);
      resolve();
    };
    server.once('error', onError);
    server.once('listening', onListening);
    server.listen(port, host);
  });
}

function hostForUrl(host: string): string {
  return host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
}

export class RelayServer {
  private readonly http = createServer((_req, res) => {
    res.writeHead(426, { 'content-type': 'text/plain' }).end('interlink relay: connect with WebSocket\n');
  });
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: MAX_FRAME_BYTES, perMessageDeflate: false, clientTracking: false });
  private readonly connections = new Set<Connection>();
  private readonly subscribers = new Map<string, Set<Connection>>();
  private readonly pending = new Set<Promise<unknown>>();
  private readonly roster: Roster;
  private readonly limits: QueueLimits;
  private readonly now: () => number;
  private queues: RelayQueueState;
  private backend: QueueBackend | undefined;
  /** Ids are assigned here, before the commit that applies them. */
  private nextId = 0;
  /** Only ids below this are committed, and so deliverable. */
  private deliverableBelow = 0;
  private nextConnectionId = 1;
  private peakBufferedBytes = 0;
  private heartbeat: NodeJS.Timeout | undefined;
  private closing: Promise<void> | undefined;
  private boundPort = 0;

  private constructor(private readonly options: RelayOptions) {
    this.now = options.now ?? Date.now;
    this.limits = {
      routeMessages: options.maxRouteMessages ?? DEFAULT_QUEUE_LIMITS.routeMessages,
      messages: options.maxMessages ?? DEFAULT_QUEUE_LIMITS.messages,
      bytes: options.maxBytes ?? DEFAULT_QUEUE_LIMITS.bytes,
    };
    this.queues = new RelayQueueState(this.limits);
    this.roster = new Roster(this.now, { maxEntries: options.rosterMaxEntries ?? ROSTER_MAX_ENTRIES, retainMs: ROSTER_RETAIN_MS });
  }

  /**
   * Binds first, so that of two relays started on one address at once the second fails
   * at once with `address in use`; then opens the store; then accepts connections.
   */
  static async start(options: RelayOptions): Promise<RelayServer> {
    const relay = new RelayServer(options);
    relay.wss.on('error', (err) => log.error('relay_ws_error', { error: err.message }));
    try {
      await listen(relay.http, options.host, options.port);
      // Only after the bind: a failed bind is reported once, by the error thrown below.
      relay.http.on('error', (err) => log.error('relay_http_error', { error: err.message }));
    } catch (err) {
      if (errnoCode(err) === 'EADDRINUSE') {
        throw new InterlinkError('busy', `address in use: another relay may be running on ${hostForUrl(options.host)}:${options.port}`);
      }
      throw err;
    }
    const address = relay.http.address();
    relay.boundPort = typeof address === 'object' && address !== null ? address.port : options.port;
    try {
      relay.backend = await relay.openBackend();
    } catch (err) {
      await new Promise<void>((r) => relay.http.close(() => r()));
      throw err;
    }
    // Ids continue from the clock (in microseconds) when that is ahead of the store: a
    // relay restarted without its queues never reissues an id a client may still hold.
    relay.nextId = Math.max(relay.queues.nextId, Math.floor(relay.now()) * 1000);
    relay.deliverableBelow = relay.queues.nextId;
    relay.http.on('upgrade', (req, socket, head) => {
      socket.on('error', (err) => log.debug('relay_upgrade_error', { error: err.message }));
      if (relay.closing) {
        socket.destroy();
        return;
      }
      relay.wss.handleUpgrade(req, socket, head, (ws) => relay.accept(ws));
    });
    const heartbeatMs = options.heartbeatMs ?? DEFAULT_HEARTBEAT_MS;
    relay.heartbeat = setInterval(() => relay.beat(), heartbeatMs);
    relay.heartbeat.unref();
    log.info('relay_listening', { url: relay.url, durable: options.dbDir !== undefined, ...relay.queues.stats });
    return relay;
  }

  get port(): number {
    return this.boundPort;
  }

  get url(): string {
    return `ws://${hostForUrl(this.options.host)}:${this.boundPort}`;
  }

  stats(): RelayStats {
    let blocked = 0;
    for (const conn of this.connections) if (conn.blocked) blocked++;
    return { connections: this.connections.size, blocked, peakBufferedBytes: this.peakBufferedBytes, ...this.queues.stats };
  }

  /** Stops accepting, closes every connection, waits for commits in progress to finish. */
  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  private async shutdown(): Promise<void> {
    clearInterval(this.heartbeat);
    const httpClosed = new Promise<void>((r) => this.http.close(() => r()));
    this.http.closeAllConnections();
    const connections = [...this.connections];
    for (const conn of connections) conn.ws.close(1001, 'relay shutting down');
    const allClosed = Promise.all(connections.map((c) => c.closed));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([allClosed, new Promise<void>((r) => (timer = setTimeout(r, CLOSE_GRACE_MS)))]);
    clearTimeout(timer);
    for (const conn of connections) conn.ws.terminate();
    await allClosed;
    await Promise.allSettled([...this.pending]);
    await this.backend?.release();
    await httpClosed;
    log.info('relay_closed', { url: this.url });
  }

  private async openBackend(): Promise<QueueBackend> {
    const dir = this.options.dbDir;
    if (dir === undefined) {
      const state = this.queues;
      return { submit: async (op) => state.apply(op), release: async () => {} };
    }
    const absolute = resolve(dir);
    await makePrivateDir(absolute);
    const releaseLock = await holdDbLock(absolute);
    try {
      const format = relayQueueFormat(this.limits, (state) => (this.queues = state));
      const store = await JournalStore.open(join(absolute, 'queues.json'), format);
      for (const r of store.recoveries) log.error('relay_store_recovered', { ...r });
      return {
        submit: (op) => store.submit(op),
        release: async () => {
          await store.close();
          await releaseLock();
        },
      };
    } catch (err) {
      await releaseLock();
      throw err;
    }
  }

  private track(commit: Promise<unknown>): void {
    const work = commit.catch((err: unknown) => log.error('relay_internal_error', { error: (err as Error).stack ?? String(err) }));
    this.pending.add(work);
    void work.finally(() => this.pending.delete(work));
  }

  private accept(ws: WebSocket): void {
    if (this.closing) {
      ws.on('error', () => undefined);
      ws.terminate();
      return;
    }
    const conn = new Connection(this.nextConnectionId++, ws, new TokenBucket(this.options.frameRate ?? DEFAULT_FRAME_RATE, this.options.frameBurst ?? DEFAULT_FRAME_BURST, this.now()), (c) =>
      this.pumpAll(c),
    );
    ws.on('error', (err) => log.debug('relay_socket_error', { conn: conn.id, error: err.message }));
    ws.on('pong', () => (conn.alive = true));
    ws.on('message', (data, isBinary) => this.onMessage(conn, data, isBinary));
    ws.once('close', () => this.drop(conn));
    this.connections.add(conn);
    this.send(conn, { v: PROTOCOL_VERSION, type: 'challenge', nonce: conn.nonce });
  }

  /** Its in-flight messages stay queued: the next connection authenticated for the route gets them. */
  private drop(conn: Connection): void {
    this.connections.delete(conn);
    for (const route of conn.subscriptions.keys()) {
      const set = this.subscribers.get(route);
      set?.delete(conn);
      if (set?.size === 0) this.subscribers.delete(route);
    }
  }

  private beat(): void {
    for (const conn of this.connections) {
      if (!conn.alive) {
        log.info('relay_heartbeat_missed', { conn: conn.id });
        conn.ws.terminate();
        continue;
      }
      conn.alive = false;
      conn.ws.ping();
    }
  }

  /**
   * Every frame, even one that is refused, takes a token from the connection's bucket —
   * except an ack for a route the connection authenticated: refusing it would leave the
   * message in flight, holding a slot of the window until the connection closes.
   */
  private onMessage(conn: Connection, data: WebSocket.RawData, isBinary: boolean): void {
    const json = isBinary ? NOT_JSON : parseJson(frameText(data));
    const ref = refOf(json);
    if (!isReaderAck(conn, json) && !conn.bucket.take(this.now())) {
      const rate = this.options.frameRate ?? DEFAULT_FRAME_RATE;
      return this.refuse(conn, ref, 'rate_limited', `more than ${rate} frames per second on this connection; slow down and send it again`);
    }
    if (isBinary) return this.refuse(conn, undefined, 'bad_frame', 'frames are JSON text, not binary');
    if (json === NOT_JSON) return this.refuse(conn, undefined, 'bad_frame', 'the frame is not JSON');
    const parsed = clientFrame.safeParse(json);
    if (!parsed.success) return this.refuse(conn, ref, 'bad_frame', `invalid frame: ${describeSchemaError(parsed.error)}`);
    this.dispatch(conn, parsed.data);
  }

  private dispatch(conn: Connection, frame: ClientFrame): void {
    switch (frame.type) {
      case 'auth':
        return this.onAuth(conn, frame.route, frame.sig);
      case 'send':
        return this.onSend(conn, frame.ref, frame.to, frame.payload);
      case 'ack':
        return this.onAck(conn, frame.route, frame.ids);
      case 'announce':
        if (this.roster.announce(frame.announcement) === 'invalid') this.refuse(conn, undefined, 'bad_frame', 'the announcement is malformed or its signature does not verify');
        return;
      case 'goodbye':
        if (this.roster.goodbye(frame.goodbye) === 'invalid') this.refuse(conn, undefined, 'bad_frame', 'the goodbye is malformed or its signature does not verify');
        return;
      case 'roster':
        return this.sendRoster(conn, frame.ref);
    }
  }

  private onAuth(conn: Connection, route: string, sig: string): void {
    if (!verifyAuth(conn.nonce, route, sig)) {
      return this.refuse(conn, undefined, 'auth_failed', `the signature does not prove the key of ${route} for this connection's challenge`);
    }
    let subscription = conn.subscriptions.get(route);
    if (subscription === undefined) {
      if (conn.subscriptions.size >= MAX_ROUTES_PER_CONNECTION) {
        return this.refuse(conn, undefined, 'auth_failed', `a connection may authenticate at most ${MAX_ROUTES_PER_CONNECTION} routes`);
      }
      subscription = { route, cursor: -1, inFlight: new Set() };
      conn.subscriptions.set(route, subscription);
      let set = this.subscribers.get(route);
      if (set === undefined) this.subscribers.set(route, (set = new Set()));
      set.add(conn);
    }
    this.send(conn, { v: PROTOCOL_VERSION, type: 'auth_ok', route });
    this.pump(conn, subscription);
  }

  private onSend(conn: Connection, ref: string, to: string, payloadObject: Record<string, unknown>): void {
    const payload = JSON.stringify(payloadObject);
    const bytes = Buffer.byteLength(payload, 'utf8');
    if (bytes > MAX_PAYLOAD_BYTES) {
      return this.refuse(conn, ref, 'too_large', `the payload is ${bytes} bytes of JSON; the limit is ${MAX_PAYLOAD_BYTES} bytes (512 KiB)`);
    }
    if (conn.uncommittedBytes + bytes > MAX_UNCOMMITTED_BYTES) {
      return this.refuse(conn, ref, 'rate_limited', `the relay is still storing ${conn.uncommittedBytes} bytes from this connection; wait for their replies`);
    }
    const id = Math.max(this.nextId, this.queues.nextId);
    this.nextId = id + 1;
    conn.uncommittedBytes += bytes;
    const commit = this.backend!.submit({ op: 'enq', at: this.now(), route: to, id, payload });
    void commit.finally(() => (conn.uncommittedBytes -= bytes)).catch(() => undefined);
    this.track(
      commit.then(
        (result) => this.afterEnqueue(conn, ref, to, result),
        (err: unknown) => {
          log.error('relay_commit_failed', { error: (err as Error).message });
          this.refuse(conn, ref, 'storage', `the relay could not store the message (${(err as Error).message}); send it again`);
        },
      ),
    );
  }

  private afterEnqueue(conn: Connection, ref: string, route: string, result: QueueResult): void {
    if (result.outcome === 'enqueued') {
      this.deliverableBelow = Math.max(this.deliverableBelow, result.id + 1);
      this.send(conn, { v: PROTOCOL_VERSION, type: 'accepted', ref, id: result.id });
      for (const subscriber of this.subscribers.get(route) ?? []) this.pump(subscriber, subscriber.subscriptions.get(route)!);
    } else if (result.outcome === 'queue_full') {
      this.refuse(conn, ref, 'queue_full', queueFullMessage(route, result, this.limits));
    } else {
      log.error('relay_id_reused', { result });
      this.refuse(conn, ref, 'storage', 'the relay could not store the message (internal id conflict); send it again');
    }
  }

  private onAck(conn: Connection, route: string, ids: readonly number[]): void {
    const subscription = conn.subscriptions.get(route);
    if (subscription === undefined) {
      return this.refuse(conn, undefined, 'not_authenticated', `this connection has not authenticated ${route}; only its reader may acknowledge its messages`);
    }
    for (const id of ids) subscription.inFlight.delete(id);
    this.pump(conn, subscription);
    if (!ids.some((id) => this.queues.has(route, id))) return;
    const commit = this.backend!.submit({ op: 'ack', at: this.now(), route, ids: [...ids] });
    this.track(
      commit.then(
        () => {
          for (const subscriber of this.subscribers.get(route) ?? []) {
            const sub = subscriber.subscriptions.get(route)!;
            for (const id of ids) sub.inFlight.delete(id);
            this.pump(subscriber, sub);
          }
        },
        (err: unknown) => {
          log.error('relay_commit_failed', { error: (err as Error).message });
          this.refuse(conn, undefined, 'storage', `the relay could not record the acknowledgement (${(err as Error).message}); the messages stay queued`);
        },
      ),
    );
  }

  /** A roster frame holds the most recently heard entries that fit in one frame. */
  private sendRoster(conn: Connection, ref: string): void {
    const budget = MAX_FRAME_BYTES - 1024;
    const parts: string[] = [];
    let size = 0;
    for (const entry of this.roster.list()) {
      const text = JSON.stringify(entry);
      size += Buffer.byteLength(text, 'utf8') + 1;
      if (size > budget) break;
      parts.push(text);
    }
    this.sendText(conn, `{"v":${PROTOCOL_VERSION},"type":"roster","ref":${JSON.stringify(ref)},"entries":[${parts.join(',')}]}`);
  }

  private pumpAll(conn: Connection): void {
    for (const subscription of conn.subscriptions.values()) this.pump(conn, subscription);
  }

  /** Delivers the route's next committed messages, within the window, until the connection's buffer is full. */
  private pump(conn: Connection, sub: Subscription): void {
    const window = this.options.deliveryWindow ?? DEFAULT_DELIVERY_WINDOW;
    while (!conn.blocked && sub.inFlight.size < window && conn.ws.readyState === WebSocket.OPEN) {
      const message = this.queues.nextAfter(sub.route, sub.cursor, this.deliverableBelow);
      if (message === undefined) return;
      sub.cursor = message.id;
      sub.inFlight.add(message.id);
      this.sendText(conn, deliverText(sub.route, message.id, message.payload));
    }
  }

  private refuse(conn: Connection, ref: string | undefined, code: RefusalCode, message: string): void {
    this.send(conn, { v: PROTOCOL_VERSION, type: 'refused', ...(ref !== undefined && { ref }), code, message });
  }

  private send(conn: Connection, frame: RelayFrame): void {
    this.sendText(conn, JSON.stringify(frame));
  }

  private sendText(conn: Connection, text: string): void {
    const ws = conn.ws;
    if (ws.readyState !== WebSocket.OPEN) return;
    ws.send(text, conn.flushed);
    const buffered = ws.bufferedAmount;
    if (buffered > this.peakBufferedBytes) this.peakBufferedBytes = buffered;
    if (buffered > MAX_BUFFERED_BYTES) {
      log.warn('relay_slow_consumer', { conn: conn.id, buffered });
      ws.terminate();
    } else if (buffered > HIGH_WATER_BYTES) {
      conn.blocked = true;
    }
  }
}
