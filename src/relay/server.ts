/**
 * The relay: a WebSocket server that keeps each route's messages until a reader that
 * proved the route's key acknowledges them (docs/PROTOCOL.md "Relay frames", DESIGN.md
 * "The relay").
 *
 * This module binds the address, opens the queues and composes the parts: connection
 * handling (`connection.ts`: frame budget, heartbeat, backpressure), the queues and the
 * ids they issue (`storage.ts`), and what each client frame does (`dispatch.ts`). The
 * relay holds no key but its own (relay-key.ts), and never parses payloads: it verifies
 * only auth proofs, announcements and goodbyes.
 */
import { createServer, type Server as HttpServer } from 'node:http';
import WebSocket, { WebSocketServer } from 'ws';
import { errnoCode, InterlinkError, messageOf } from '../errors.js';
import { MAX_HOLD_MS, MAX_PAST_MS } from '../gate/decide.js';
import { log } from '../log.js';
import { ConnectionSet, DEFAULT_FRAME_BURST, DEFAULT_FRAME_RATE, DEFAULT_HEARTBEAT_MS } from './connection.js';
import { DEFAULT_DELIVERY_WINDOW, Dispatcher } from './dispatch.js';
import { MAX_FRAME_BYTES, PROTOCOL_VERSION } from './frames.js';
import { DEFAULT_QUEUE_LIMITS, type QueueLimits } from './queues.js';
import { Roster, ROSTER_MAX_ENTRIES, ROSTER_RETAIN_MS } from './roster.js';
import { RelayStorage } from './storage.js';
import { freshRelayKey, loadOrCreateRelayKey, type RelayKey } from './relay-key.js';
import { relayKeyFile } from '../config/layout.js';

export interface RelayOptions {
  host: string;
  port: number;
  /** Durable queues under this directory (created if missing); in memory without it. */
  dbDir?: string;
  /** The relay's key file (relay-key.ts); default `<dbDir>/relay-key.json`, and without either a fresh key per start. */
  keyFile?: string;
  heartbeatMs?: number;
  maxRouteMessages?: number;
  maxMessages?: number;
  maxBytes?: number;
  frameRate?: number;
  frameBurst?: number;
  deliveryWindow?: number;
  rosterMaxEntries?: number;
  /** How long a message may wait for its reader before it is dropped (at least the receivers' window). */
  maxAgeMs?: number;
  /** How often messages older than `maxAgeMs` are looked for. */
  expireEveryMs?: number;
  now?: () => number;
}

/**
 * The receivers' acceptance window (7 days) plus the 10 minutes a message from the future
 * may be held: a relay that dropped messages sooner would lose mail a receiver still takes.
 */
export const MIN_MAX_AGE_MS = MAX_PAST_MS + MAX_HOLD_MS;
/** A day past the window, so a receiver's clock that is a little behind still gets it. */
export const DEFAULT_MAX_AGE_MS = MAX_PAST_MS + 24 * 60 * 60 * 1000;
const EXPIRE_EVERY_MS = 60_000;

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

function plainHttpServer(): HttpServer {
  return createServer((_req, res) => {
    res.writeHead(426, { 'content-type': 'text/plain' }).end('interlink relay: connect with WebSocket\n');
  });
}

/** The queues, then the key under the store's lock (of two relays on one store, one gets that far). */
async function openStoreAndKey(options: RelayOptions, limits: QueueLimits): Promise<{ storage: RelayStorage; relayKey: RelayKey }> {
  const storage = await RelayStorage.open(options.dbDir, limits, options.now ?? Date.now);
  const keyFile = options.keyFile ?? (options.dbDir !== undefined ? relayKeyFile(options.dbDir) : undefined);
  try {
    return { storage, relayKey: keyFile !== undefined ? await loadOrCreateRelayKey(keyFile) : freshRelayKey() };
  } catch (err) {
    await storage.release();
    throw err;
  }
}

export class RelayServer {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: MAX_FRAME_BYTES, perMessageDeflate: false, clientTracking: false });
  private readonly connections: ConnectionSet;
  private readonly dispatcher: Dispatcher;
  private readonly heartbeat: NodeJS.Timeout;
  private readonly expiry: NodeJS.Timeout;
  /** The expiry pass under way, which shutdown waits for before releasing the store. */
  private expiring: Promise<void> = Promise.resolve();
  private closing: Promise<void> | undefined;

  private constructor(
    private readonly options: RelayOptions,
    private readonly http: HttpServer,
    private readonly storage: RelayStorage,
    readonly port: number,
    private readonly relayKey: RelayKey,
  ) {
    const now = options.now ?? Date.now;
    const frameRate = options.frameRate ?? DEFAULT_FRAME_RATE;
    const roster = new Roster(now, { maxEntries: options.rosterMaxEntries ?? ROSTER_MAX_ENTRIES, retainMs: ROSTER_RETAIN_MS });
    this.dispatcher = new Dispatcher(storage, roster, { frameRate, deliveryWindow: options.deliveryWindow ?? DEFAULT_DELIVERY_WINDOW, key: relayKey }, now);
    this.connections = new ConnectionSet({ frameRate, frameBurst: options.frameBurst ?? DEFAULT_FRAME_BURST }, now, {
      frame: (conn, data, isBinary) => this.dispatcher.onFrame(conn, data, isBinary),
      drained: (conn) => this.dispatcher.onDrained(conn),
      closed: (conn) => this.dispatcher.onClosed(conn),
    });
    this.wss.on('error', (err) => log.error('relay_ws_error', { error: err.message }));
    http.on('upgrade', (req, socket, head) => {
      socket.on('error', (err) => log.debug('relay_upgrade_error', { error: err.message }));
      if (this.closing) {
        socket.destroy();
        return;
      }
      this.wss.handleUpgrade(req, socket, head, (ws) => this.accept(ws));
    });
    this.heartbeat = setInterval(() => this.connections.beat(), options.heartbeatMs ?? DEFAULT_HEARTBEAT_MS);
    this.heartbeat.unref();
    this.expiry = setInterval(() => (this.expiring = this.expireOld()), options.expireEveryMs ?? EXPIRE_EVERY_MS);
    this.expiry.unref();
    this.expiring = this.expireOld();
  }

  /**
   * Binds first, so that of two relays started on one address at once the second fails
   * at once with `address in use`; then opens the store; then accepts connections.
   */
  static async start(options: RelayOptions): Promise<RelayServer> {
    const http = plainHttpServer();
    try {
      await listen(http, options.host, options.port);
      // Only after the bind: a failed bind is reported once, by the error thrown below.
      http.on('error', (err) => log.error('relay_http_error', { error: err.message }));
    } catch (err) {
      if (errnoCode(err) === 'EADDRINUSE') {
        throw new InterlinkError('busy', `address in use: another relay may be running on ${hostForUrl(options.host)}:${options.port}`);
      }
      throw err;
    }
    const address = http.address();
    const port = typeof address === 'object' && address !== null ? address.port : options.port;
    const limits = {
      routeMessages: options.maxRouteMessages ?? DEFAULT_QUEUE_LIMITS.routeMessages,
      messages: options.maxMessages ?? DEFAULT_QUEUE_LIMITS.messages,
      bytes: options.maxBytes ?? DEFAULT_QUEUE_LIMITS.bytes,
    };
    let opened: { storage: RelayStorage; relayKey: RelayKey };
    try {
      opened = await openStoreAndKey(options, limits);
    } catch (err) {
      await new Promise<void>((r) => http.close(() => r()));
      throw err;
    }
    const { storage, relayKey } = opened;
    const relay = new RelayServer(options, http, storage, port, relayKey);
    log.info('relay_listening', { url: relay.url, durable: options.dbDir !== undefined, key: relayKey.key, ...storage.stats });
    return relay;
  }

  /** The relay's public key (base64url): what clients pin. */
  get key(): string {
    return this.relayKey.key;
  }

  get url(): string {
    return `ws://${hostForUrl(this.options.host)}:${this.port}`;
  }

  stats(): RelayStats {
    return { ...this.connections.stats(), ...this.storage.stats };
  }

  /** Stops accepting, closes every connection, waits for commits in progress to finish. */
  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  /** Drops what waited longer than the maximum age: a route nobody reads goes with its messages. */
  private async expireOld(): Promise<void> {
    if (this.closing) return;
    try {
      const removed = await this.storage.expire(this.options.maxAgeMs ?? DEFAULT_MAX_AGE_MS);
      if (removed > 0) log.info('relay_expired', { removed, max_age_ms: this.options.maxAgeMs ?? DEFAULT_MAX_AGE_MS, ...this.storage.stats });
    } catch (err) {
      log.error('relay_commit_failed', { error: messageOf(err) });
    }
  }

  private async shutdown(): Promise<void> {
    clearInterval(this.heartbeat);
    clearInterval(this.expiry);
    await this.expiring;
    const httpClosed = new Promise<void>((r) => this.http.close(() => r()));
    this.http.closeAllConnections();
    await this.connections.closeAll();
    await this.dispatcher.settled();
    await this.storage.release();
    await httpClosed;
    log.info('relay_closed', { url: this.url });
  }

  private accept(ws: WebSocket): void {
    if (this.closing) {
      ws.on('error', () => undefined);
      ws.terminate();
      return;
    }
    const conn = this.connections.add(ws);
    conn.send({ v: PROTOCOL_VERSION, type: 'challenge', nonce: conn.nonce, key: this.relayKey.key });
  }
}
