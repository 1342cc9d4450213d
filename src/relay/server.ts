/**
 * The relay: a WebSocket server that keeps each route's messages until a reader that
 * proved the route's key acknowledges them (docs/PROTOCOL.md "Relay frames", DESIGN.md
 * "The relay").
 *
 * This module binds the address (`http-server.ts`), opens the queues, roster and key
 * (`open-store.ts`) and composes the parts: connection caps (`admission.ts`), connection
 * handling (`connection.ts`: frame budget, heartbeat, backpressure), and what each client
 * frame does (`dispatch.ts`). The relay holds no key but its own (relay-key.ts), and never
 * parses payloads: it verifies only auth proofs, announcements and goodbyes.
 */
import type { Server as HttpServer } from 'node:http';
import type { Socket } from 'node:net';
import WebSocket, { WebSocketServer } from 'ws';
import { errnoCode, InterlinkError, messageOf } from '../errors.js';
import { keepPublicKeys } from '../identity/ed25519.js';
import { MAX_HOLD_MS, MAX_PAST_MS } from '../gate/decide.js';
import { log } from '../log.js';
import { connectionCaps } from './admission.js';
import { SocketAdmission } from './socket-admission.js';
import { type Connection, ConnectionSet, DEFAULT_FRAME_BURST, DEFAULT_FRAME_RATE, DEFAULT_HEARTBEAT_MS, DEFAULT_PROOF_WITHIN_MS } from './connection.js';
import { DEFAULT_DELIVERY_WINDOW } from './delivery.js';
import { Dispatcher } from './dispatch.js';
import { hostForUrl, httpServer, listen, refuseUpgrade, upgradeAsked } from './http-server.js';
import { MAX_FRAME_BYTES, PROTOCOL_REVISION, PROTOCOL_VERSION } from '../wire/frames.js';
import { DEFAULT_QUEUE_LIMITS, shareLimits } from './limits.js';
import { openFilesLimit, openFilesWarning } from './open-files.js';
import { openStore, type OpenedStore } from './open-store.js';
import { rosterLimits as rosterBounds } from './roster.js';
import { RelayMetrics } from './relay-metrics.js';
import type { ServerTls } from '../wire/tls.js';

export interface RelayOptions {
  host: string;
  port: number;
  /** Durable queues under this directory (created if missing); in memory without it. */
  dbDir?: string;
  /** Queues and roster in this PostgreSQL database (`postgres://…`, several hosts allowed), shared with other relays; not with `dbDir`. */
  store?: string;
  /** The relay's key file (relay-key.ts); default `<dbDir>/relay-key.json`, and without either a fresh key per start. */
  keyFile?: string;
  heartbeatMs?: number;
  maxRouteMessages?: number;
  maxMessages?: number;
  maxBytes?: number;
  frameRate?: number;
  frameBurst?: number;
  deliveryWindow?: number;
  /** Roster entries kept (default: ROSTER_ENTRIES_PER_CONNECTION per connection the relay may hold, roster.ts). */
  rosterMaxEntries?: number;
  /** How long a message may wait for its reader before it is dropped (at least the receivers' window). */
  maxAgeMs?: number;
  /** How often messages older than `maxAgeMs` are looked for. */
  expireEveryMs?: number;
  /** How often the `relay_summary` line is logged (when something moved since the last one). */
  summaryEveryMs?: number;
  /** Messages one source address (IPv6: its /64) may hold queued, with that fraction of `maxBytes` (shares.ts has the defaults). */
  maxPerAddress?: number;
  /** Messages one connection may hold queued, with that fraction of `maxBytes`. */
  maxPerConnection?: number;
  /** Connections held at once; more are refused at the upgrade (HTTP 503). */
  maxConnections?: number;
  /** Connections held at once from one source address (admission.ts has the defaults; a /64 holds four times as many). */
  maxConnectionsPerAddress?: number;
  /** How long a connection may take to prove a key (connection.ts). */
  proofWithinMs?: number;
  now?: () => number;
  /** Serve `wss://` with this certificate and key instead of plain `ws://`. */
  tls?: ServerTls;
  /** How long a socket may take to ask for the WebSocket upgrade, its TLS handshake included (http-server.ts). */
  upgradeWithinMs?: number;
}

/**
 * The receivers' acceptance window (7 days) plus the 10 minutes a message from the future
 * may be held: a relay that dropped messages sooner would lose mail a receiver still takes.
 */
export const MIN_MAX_AGE_MS = MAX_PAST_MS + MAX_HOLD_MS;
/** A day past the window, so a receiver's clock that is a little behind still gets it. */
export const DEFAULT_MAX_AGE_MS = MAX_PAST_MS + 24 * 60 * 60 * 1000;
const EXPIRE_EVERY_MS = 60_000;
export const DEFAULT_SUMMARY_EVERY_MS = 5 * 60_000;

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

/** WebSocket close code 1013, "try again later": the relay's store does not commit. */
const STORE_DOWN_CLOSE_CODE = 1013;
/** The same code for a connection evicted at the total cap (admission.ts). */
const EVICTED_CLOSE_CODE = 1013;

export class RelayServer {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: MAX_FRAME_BYTES, perMessageDeflate: false, clientTracking: false });
  private readonly connections: ConnectionSet;
  private readonly admission: SocketAdmission;
  private readonly dispatcher: Dispatcher;
  private readonly heartbeat: NodeJS.Timeout;
  private readonly expiry: NodeJS.Timeout;
  private readonly summary: NodeJS.Timeout;
  /** The expiry pass under way, which shutdown waits for before releasing the store. */
  private expiring: Promise<void> = Promise.resolve();
  private closing: Promise<void> | undefined;
  /** Why the store cannot commit, while it cannot: connections are closed and upgrades refused meanwhile. */
  private storeDown: string | undefined;

  private constructor(
    private readonly options: RelayOptions,
    private readonly http: HttpServer,
    private readonly store: OpenedStore,
    readonly port: number,
    private readonly metrics: RelayMetrics,
  ) {
    const { storage, roster, relayKey } = store;
    const now = options.now ?? Date.now;
    const frameRate = options.frameRate ?? DEFAULT_FRAME_RATE;
    this.dispatcher = new Dispatcher(storage, roster, { frameRate, deliveryWindow: options.deliveryWindow ?? DEFAULT_DELIVERY_WINDOW, metrics, key: relayKey }, now);
    const proofWithinMs = options.proofWithinMs ?? DEFAULT_PROOF_WITHIN_MS;
    this.connections = new ConnectionSet({ frameRate, frameBurst: options.frameBurst ?? DEFAULT_FRAME_BURST, proofWithinMs }, now, {
      frame: (conn, data, isBinary) => this.dispatcher.onFrame(conn, data, isBinary),
      drained: (conn) => this.dispatcher.onDrained(conn),
      closed: (conn) => this.dispatcher.onClosed(conn),
      refused: (code) => metrics.refused(code),
    });
    this.admission = new SocketAdmission(connectionCaps(options.host, options), options.tls !== undefined);
    // Every accepted socket is counted from here on (a TLS one before its handshake).
    http.on('connection', (socket: Socket) => this.admission.accepted(socket));
    storage.onOutage?.(
      (why) => this.onStoreDown(why),
      () => this.onStoreBack(),
    );
    this.wss.on('error', (err) => log.error('relay_ws_error', { error: err.message }));
    http.on('upgrade', (req, socket, head) => {
      upgradeAsked(socket);
      socket.on('error', (err) => log.debug('relay_upgrade_error', { error: err.message }));
      if (this.closing) {
        socket.destroy();
        return;
      }
      if (this.storeDown !== undefined) {
        refuseUpgrade(socket, `${this.storeDown}; try another address of this relay, or again shortly`);
        return;
      }
      const held = this.admission.upgrading(socket);
      if (held === undefined) return;
      this.wss.handleUpgrade(req, socket, head, (ws) => {
        const conn = this.accept(ws, req.socket.remoteAddress);
        if (conn !== undefined) held.evict = () => conn.closeSoon(EVICTED_CLOSE_CODE, 'the relay is full and your network holds the most connections; try again later');
      });
    });
    this.heartbeat = setInterval(() => this.connections.beat(), options.heartbeatMs ?? DEFAULT_HEARTBEAT_MS);
    this.heartbeat.unref();
    this.expiry = setInterval(() => (this.expiring = this.expireOld()), options.expireEveryMs ?? EXPIRE_EVERY_MS);
    this.expiry.unref();
    this.expiring = this.expireOld();
    this.summary = setInterval(() => this.logSummary(), options.summaryEveryMs ?? DEFAULT_SUMMARY_EVERY_MS);
    this.summary.unref();
  }

  /**
   * Binds first, so that of two relays started on one address at once the second fails
   * at once with `address in use`; then opens the store; then accepts connections.
   */
  static async start(options: RelayOptions): Promise<RelayServer> {
    const http = httpServer(options.tls, options.upgradeWithinMs);
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
    const total = { messages: options.maxMessages ?? DEFAULT_QUEUE_LIMITS.messages, bytes: options.maxBytes ?? DEFAULT_QUEUE_LIMITS.bytes };
    const limits = {
      routeMessages: options.maxRouteMessages ?? DEFAULT_QUEUE_LIMITS.routeMessages,
      ...total,
      ...shareLimits(total, options.host, { perAddress: options.maxPerAddress, perConnection: options.maxPerConnection }),
    };
    const metrics = new RelayMetrics();
    // The roster grows with the connections the relay may hold: no ceiling below them.
    const maxConnections = connectionCaps(options.host, options).maxConnections;
    const rosterLimits = rosterBounds(maxConnections, options.rosterMaxEntries);
    // Each connection's key is verified again with every renewed announcement: one imported key kept per connection.
    keepPublicKeys(maxConnections);
    let opened: OpenedStore;
    try {
      opened = await openStore(options, limits, rosterLimits, (seconds) => metrics.committed(seconds));
    } catch (err) {
      await new Promise<void>((r) => http.close(() => r()));
      throw err;
    }
    const relay = new RelayServer(options, http, opened, port, metrics);
    const files = openFilesLimit();
    const caps = relay.admission.caps;
    log.info('relay_listening', {
      url: relay.url,
      store: opened.storage.kind,
      durable: opened.storage.kind !== 'memory',
      key: opened.relayKey.key,
      ...opened.storage.stats(),
      max_connections: caps.maxConnections,
      max_connections_per_address: caps.maxConnectionsPerAddress,
      ...(files !== undefined && { open_files: Number.isFinite(files.soft) ? files.soft : 'unlimited' }),
    });
    const tooFew = openFilesWarning(files, caps.maxConnections);
    if (tooFew !== undefined) log.warn('relay_open_files_low', { open_files: files?.soft, message: tooFew });
    return relay;
  }

  /** The relay's public key (base64url): what clients pin. */
  get key(): string {
    return this.store.relayKey.key;
  }

  get url(): string {
    return `${this.options.tls === undefined ? 'ws' : 'wss'}://${hostForUrl(this.options.host)}:${this.port}`;
  }

  stats(): RelayStats {
    return { ...this.connections.stats(), ...this.store.storage.stats() };
  }

  /** The Prometheus text exposition of the relay's counters and state. */
  renderMetrics(): string {
    return this.metrics.render(this.stats());
  }

  /** What `--metrics` serves: the exposition, once a shared store has counted its queues again. */
  async scrapeMetrics(): Promise<string> {
    await this.store.storage.refresh().catch((err: unknown) => log.warn('relay_metrics_stale', { error: messageOf(err) }));
    return this.renderMetrics();
  }

  /** Stops accepting, closes every connection, waits for commits in progress to finish. */
  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  /**
   * The store cannot commit: every connection is closed and new ones are refused until it
   * commits again. A session that lists several addresses of this relay then reads and
   * sends through another (link/relay-groups.ts elects among the connected ones), instead of
   * being held here with every send refused; one that lists only this relay keeps its
   * messages in its outbox, as for any relay that does not answer. The refusals of the
   * sends under way go out first.
   */
  private onStoreDown(why: string): void {
    this.storeDown = why;
    this.metrics.storeUp(false);
    setImmediate(() => {
      if (this.storeDown === undefined || this.closing) return;
      log.warn('relay_connections_closed', { connections: this.connections.stats().connections, message: `${why}: every connection is closed, and new ones are refused until it commits again` });
      void this.connections.closeAll(STORE_DOWN_CLOSE_CODE, "the relay's database does not commit");
    });
  }

  private onStoreBack(): void {
    this.storeDown = undefined;
    this.dispatcher.failures.summarize();
    this.metrics.storeUp(true);
  }

  /** Drops what waited longer than the maximum age: a route nobody reads goes with its messages. */
  private async expireOld(): Promise<void> {
    if (this.closing) return;
    try {
      const removed = await this.store.storage.expire(this.options.maxAgeMs ?? DEFAULT_MAX_AGE_MS);
      this.metrics.expired(removed);
      if (removed > 0) log.info('relay_expired', { removed, max_age_ms: this.options.maxAgeMs ?? DEFAULT_MAX_AGE_MS, ...this.store.storage.stats() });
    } catch (err) {
      log.error('relay_commit_failed', { error: messageOf(err) });
    }
  }

  /** One line for the operator every few minutes, at info: the relay's default level. */
  private logSummary(): void {
    const summary = this.metrics.summary(this.stats());
    if (summary !== undefined) log.info('relay_summary', { ...summary });
  }

  private async shutdown(): Promise<void> {
    clearInterval(this.heartbeat);
    clearInterval(this.expiry);
    clearInterval(this.summary);
    this.dispatcher.failures.stop();
    await this.expiring;
    const httpClosed = new Promise<void>((r) => this.http.close(() => r()));
    this.http.closeAllConnections();
    await this.connections.closeAll();
    await this.dispatcher.settled();
    await this.store.close();
    await httpClosed;
    log.info('relay_closed', { url: this.url });
  }

  private accept(ws: WebSocket, address: string | undefined): Connection | undefined {
    if (this.closing) {
      ws.on('error', () => undefined);
      ws.terminate();
      return undefined;
    }
    const conn = this.connections.add(ws, address);
    conn.send({ v: PROTOCOL_VERSION, type: 'challenge', nonce: conn.nonce, key: this.store.relayKey.key, revision: PROTOCOL_REVISION });
    return conn;
  }
}
