/**
 * A relay that lies, scripted by the test: it speaks the documented frames (relay protocol
 * version 1, docs/PROTOCOL.md "Relay frames") well enough for real `serve` processes to use
 * it, forwards honestly by default, and keeps a copy of every payload it was given. The
 * test then replays any copy to any route, as a hostile relay (or anyone holding a copy)
 * would, and watches which deliveries the receivers acknowledge.
 *
 * The lies a test can script: withhold a send (accept it, deliver nothing: a drop, or a
 * delay until the test delivers the copy itself, in any order and as often as it likes);
 * deliver any payload, changed or not, under any id (`push`, `deliver`) or any text as a
 * frame (`pushText`); rewrite the roster it answers (`rewriteRoster`); and pass another
 * relay's challenge on as its own (`forwardChallengeOf`).
 *
 * It proves a key of its own as an honest relay does (lying is not impersonating), unless
 * it forwards a challenge; it does not check route proofs (a lying relay need not),
 * answers every `auth` with `auth_ok`, and keeps announcements for the roster without
 * verifying them.
 */
import WebSocket, { WebSocketServer } from 'ws';
import { formatRoute } from '../../src/envelope/route.js';
import { announcementSchema } from '../../src/presence/announcement.js';
import { signWelcome } from '../../src/wire/auth.js';
import { challengeFrame, clientFrame, helloFrame, parseFrame, PROTOCOL_VERSION, type RosterEntry } from '../../src/wire/frames.js';
import { until } from './relay-test-client.js';
import { greet } from './relay-greeting.js';
import { freshRelayKey } from '../../src/relay/relay-key.js';

export interface Sent {
  to: string;
  payload: Record<string, unknown>;
}

export interface LyingRelayOptions {
  /**
   * Opens each connection with the challenge of the relay at this URL (its nonce and key)
   * instead of its own, and answers the client's hello with a welcome signed by its own
   * key, since it cannot sign for the key it passed on.
   */
  forwardChallengeOf?: string;
}

export class LyingRelay {
  /** Every payload a client sent, in order. */
  readonly sent: Sent[] = [];
  /** Every acknowledgement, as `<route> <id>`. */
  readonly acked = new Set<string>();
  /** The type of every frame a client sent, in order. */
  readonly heard: string[] = [];
  /**
   * Whether to withhold a send: accepted (the sender sees `accepted`), kept in `sent`, and
   * delivered to nobody. Default: deliver every send to the readers of its route.
   */
  withhold: (sent: Sent) => boolean = () => false;
  /** Rewrites each roster answer (hides, replays or substitutes announcements). Default: the truth. */
  rewriteRoster: (entries: RosterEntry[]) => RosterEntry[] = (entries) => entries;
  private readonly routes = new Map<WebSocket, Set<string>>();
  private readonly announcements = new Map<string, unknown>();
  private readonly upstreams = new Set<WebSocket>();
  private nextId = 1;
  /** Its own key, proved to clients like an honest relay's: a lying relay need not be an impostor. */
  private readonly relayKey = freshRelayKey();

  private constructor(
    private readonly server: WebSocketServer,
    readonly url: string,
    private readonly options: LyingRelayOptions,
  ) {
    server.on('connection', (ws) => this.connected(ws));
  }

  static async start(options: LyingRelayOptions = {}): Promise<LyingRelay> {
    const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await new Promise<void>((resolve, reject) => {
      server.once('listening', resolve);
      server.once('error', reject);
    });
    const address = server.address();
    if (typeof address !== 'object' || address === null) throw new Error('the lying relay has no address');
    return new LyingRelay(server, `ws://127.0.0.1:${address.port}`, options);
  }

  /** Waits until a route has a reader (a `serve` for that session authenticated). */
  async reader(route: string): Promise<void> {
    await until(`a reader on ${route}`, () => (this.readersOf(route).length > 0 ? true : undefined), 15_000);
  }

  /** Waits for a payload sent with `match`, and returns it. */
  async sentWhere(what: string, match: (sent: Sent) => boolean): Promise<Sent> {
    return until(what, () => this.sent.find(match), 15_000);
  }

  /**
   * Delivers `payload` on `route` to every connection reading it, as a new message id (or
   * as `id`, one it used before), and returns the id without waiting for an answer.
   */
  push(route: string, payload: Record<string, unknown>, id = this.nextId++): number {
    this.pushText(route, JSON.stringify({ v: PROTOCOL_VERSION, type: 'deliver', route, id, payload }));
    return id;
  }

  /** Sends `text` as one frame to every connection reading `route`, whatever it holds. */
  pushText(route: string, text: string): void {
    const readers = this.readersOf(route);
    if (readers.length === 0) throw new Error(`nobody reads ${route}`);
    for (const ws of readers) ws.send(text);
  }

  /** Whether a reader of `route` acknowledged `id` (handled it: stored or refused). */
  acknowledged(route: string, id: number): boolean {
    return this.acked.has(`${route} ${id}`);
  }

  /** `push`, then waits until a receiver acknowledged the delivery, and resolves with its id. */
  async deliver(route: string, payload: Record<string, unknown>, id?: number): Promise<number> {
    const pushed = this.push(route, payload, id);
    await until(`acknowledgement of ${pushed} on ${route}`, () => (this.acknowledged(route, pushed) ? true : undefined), 15_000);
    return pushed;
  }

  async close(): Promise<void> {
    for (const ws of [...this.server.clients, ...this.upstreams]) ws.terminate();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private readersOf(route: string): WebSocket[] {
    return [...this.routes].filter(([, routes]) => routes.has(route)).map(([ws]) => ws);
  }

  private connected(ws: WebSocket): void {
    this.routes.set(ws, new Set());
    ws.on('close', () => this.routes.delete(ws));
    if (this.options.forwardChallengeOf === undefined) greet(ws, this.relayKey);
    else this.forwardChallenge(ws, this.options.forwardChallengeOf);
    ws.on('message', (data, isBinary) => {
      if (isBinary) return;
      const frame = parseFrame(clientFrame, data.toString());
      if (frame === undefined) return;
      this.heard.push(frame.type);
      switch (frame.type) {
        case 'auth':
          this.routes.get(ws)?.add(frame.route);
          ws.send(JSON.stringify({ v: PROTOCOL_VERSION, type: 'auth_ok', route: frame.route }));
          return;
        case 'send': {
          const sent = { to: frame.to, payload: frame.payload };
          this.sent.push(sent);
          const id = this.nextId++;
          ws.send(JSON.stringify({ v: PROTOCOL_VERSION, type: 'accepted', ref: frame.ref, id }));
          if (!this.withhold(sent)) {
            for (const reader of this.readersOf(frame.to)) reader.send(JSON.stringify({ v: PROTOCOL_VERSION, type: 'deliver', route: frame.to, id, payload: frame.payload }));
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
        case 'roster': {
          const entries = this.rewriteRoster([...this.announcements.values()].map((announcement) => ({ announcement, age_ms: 0 })));
          ws.send(JSON.stringify({ v: PROTOCOL_VERSION, type: 'roster', ref: frame.ref, entries }));
          return;
        }
        case 'goodbye':
        case 'hello':
          return;
      }
    });
  }

  /**
   * Passes the challenge of the relay at `url` on to the client, then answers its hello
   * with a welcome of its own: the client must find that the welcome does not prove the
   * key the challenge named, and tell this relay nothing.
   */
  private forwardChallenge(ws: WebSocket, url: string): void {
    const upstream = new WebSocket(url);
    this.upstreams.add(upstream);
    upstream.on('error', () => undefined);
    upstream.on('close', () => this.upstreams.delete(upstream));
    ws.on('close', () => upstream.close());
    let nonce: string | undefined;
    let helloNonce: string | undefined;
    const welcome = () => {
      if (nonce !== undefined && helloNonce !== undefined) ws.send(JSON.stringify({ v: PROTOCOL_VERSION, type: 'welcome', sig: signWelcome(this.relayKey.signingKey, nonce, helloNonce) }));
    };
    upstream.on('message', (data) => {
      const challenge = parseFrame(challengeFrame, data.toString());
      if (challenge === undefined || nonce !== undefined) return;
      nonce = challenge.nonce;
      ws.send(data.toString());
      welcome();
    });
    ws.on('message', (data, isBinary) => {
      const hello = isBinary ? undefined : parseFrame(helloFrame, data.toString());
      if (hello === undefined || helloNonce !== undefined) return;
      helloNonce = hello.nonce;
      welcome();
    });
  }
}
