/**
 * A relay that lies, scripted by the test: it speaks the documented frames (relay protocol
 * version 1, docs/PROTOCOL.md "Relay frames") well enough for real `serve` processes to use
 * it, forwards honestly by default, and keeps a copy of every payload it was given. The
 * test then replays any copy to any route, as a hostile relay (or anyone holding a copy)
 * would, and watches which deliveries the receivers acknowledge.
 *
 * It proves a key of its own as an honest relay does (lying is not impersonating), does
 * not check route proofs (a lying relay need not), answers every `auth` with `auth_ok`,
 * and keeps announcements for the roster without verifying them.
 */
import { WebSocketServer, type WebSocket } from 'ws';
import { formatRoute } from '../../src/envelope/route.js';
import { announcementSchema } from '../../src/presence/announcement.js';
import { clientFrame, parseFrame, PROTOCOL_VERSION } from '../../src/relay/frames.js';
import { until } from './relay-test-client.js';
import { greet } from './relay-greeting.js';
import { freshRelayKey } from '../../src/relay/relay-key.js';

export interface Sent {
  to: string;
  payload: Record<string, unknown>;
}

export class LyingRelay {
  /** Every payload a client sent, in order. */
  readonly sent: Sent[] = [];
  /** Every acknowledgement, as `<route> <id>`. */
  readonly acked = new Set<string>();
  private readonly routes = new Map<WebSocket, Set<string>>();
  private readonly announcements = new Map<string, unknown>();
  private nextId = 1;
  /** Its own key, proved to clients like an honest relay's: a lying relay need not be an impostor. */
  private readonly relayKey = freshRelayKey();

  private constructor(
    private readonly server: WebSocketServer,
    readonly url: string,
  ) {
    server.on('connection', (ws) => this.connected(ws));
  }

  static async start(): Promise<LyingRelay> {
    const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await new Promise<void>((resolve, reject) => {
      server.once('listening', resolve);
      server.once('error', reject);
    });
    const address = server.address();
    if (typeof address !== 'object' || address === null) throw new Error('the lying relay has no address');
    return new LyingRelay(server, `ws://127.0.0.1:${address.port}`);
  }

  /** Waits until a route has a reader (a `serve` for that session authenticated). */
  async reader(route: string): Promise<void> {
    await until(`a reader on ${route}`, () => ([...this.routes.values()].some((r) => r.has(route)) ? true : undefined), 15_000);
  }

  /** Waits for a payload sent with `match`, and returns it. */
  async sentWhere(what: string, match: (sent: Sent) => boolean): Promise<Sent> {
    return until(what, () => this.sent.find(match), 15_000);
  }

  /**
   * Delivers `payload` on `route` to every connection reading it, as a new message id, and
   * resolves with that id once a receiver acknowledged it (handled: stored or refused).
   */
  async deliver(route: string, payload: Record<string, unknown>): Promise<number> {
    const id = this.nextId++;
    const readers = [...this.routes].filter(([, routes]) => routes.has(route)).map(([ws]) => ws);
    if (readers.length === 0) throw new Error(`nobody reads ${route}`);
    for (const ws of readers) ws.send(JSON.stringify({ v: PROTOCOL_VERSION, type: 'deliver', route, id, payload }));
    await until(`acknowledgement of ${id} on ${route}`, () => (this.acked.has(`${route} ${id}`) ? true : undefined), 15_000);
    return id;
  }

  async close(): Promise<void> {
    for (const ws of this.server.clients) ws.terminate();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private connected(ws: WebSocket): void {
    this.routes.set(ws, new Set());
    ws.on('close', () => this.routes.delete(ws));
    greet(ws, this.relayKey);
    ws.on('message', (data, isBinary) => {
      if (isBinary) return;
      const frame = parseFrame(clientFrame, data.toString());
      if (frame === undefined) return;
      switch (frame.type) {
        case 'auth':
          this.routes.get(ws)?.add(frame.route);
          ws.send(JSON.stringify({ v: PROTOCOL_VERSION, type: 'auth_ok', route: frame.route }));
          return;
        case 'send': {
          this.sent.push({ to: frame.to, payload: frame.payload });
          const id = this.nextId++;
          ws.send(JSON.stringify({ v: PROTOCOL_VERSION, type: 'accepted', ref: frame.ref, id }));
          for (const [reader, routes] of this.routes) {
            if (routes.has(frame.to)) reader.send(JSON.stringify({ v: PROTOCOL_VERSION, type: 'deliver', route: frame.to, id, payload: frame.payload }));
          }
          return;
        }
        case 'ack':
          for (const id of frame.ids) this.acked.add(`${frame.route} ${id}`);
          return;
        case 'announce': {
          const parsed = announcementSchema.safeParse(frame.announcement);
          if (parsed.success) this.announcements.set(formatRoute(parsed.data), frame.announcement);
          return;
        }
        case 'roster':
          ws.send(JSON.stringify({ v: PROTOCOL_VERSION, type: 'roster', ref: frame.ref, entries: [...this.announcements.values()].map((announcement) => ({ announcement, age_ms: 0 })) }));
          return;
        case 'goodbye':
        case 'hello':
          return;
      }
    });
  }
}
