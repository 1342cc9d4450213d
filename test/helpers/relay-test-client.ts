/**
 * A minimal raw WebSocket client for relay tests: it speaks the frames by hand, records
 * every frame the relay sends (validated by the relay frame schema) and waits on
 * conditions with deadlines, never on sleeps.
 */
import { randomBytes } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import WebSocket from 'ws';
import { formatRoute } from '../../src/envelope/route.js';
import { newNonce, signAuth, verifyWelcome } from '../../src/wire/auth.js';
import { MAX_FRAME_BYTES, PROTOCOL_VERSION, relayFrame, type RelayFrame } from '../../src/wire/frames.js';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { generateSigningKey, type SigningKey } from '../../src/identity/ed25519.js';

export type Deliver = Extract<RelayFrame, { type: 'deliver' }>;
export type Refused = Extract<RelayFrame, { type: 'refused' }>;
export type Accepted = Extract<RelayFrame, { type: 'accepted' }>;

export interface Reader {
  key: SigningKey;
  route: string;
}

export function newReader(session = 'main'): Reader {
  const key = generateSigningKey();
  return { key, route: formatRoute({ key: encodeBase64url(key.publicKey), session }) };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** Waits until `check` returns a value other than undefined, or fails at the deadline. */
export async function until<T>(what: string, check: () => T | undefined, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

export class TestClient {
  readonly frames: RelayFrame[] = [];
  /** Text frames that did not parse as relay frames (must stay empty). */
  readonly invalid: string[] = [];
  pings = 0;
  readonly closed: Promise<{ code: number; reason: string }>;
  private readonly delivered = new Map<string | undefined, Deliver[]>();
  private readonly replies = new Map<string, Accepted | Refused>();
  private readonly replyWaiters = new Map<string, (frame: Accepted | Refused) => void>();
  private readonly waiters = new Set<() => void>();
  private refs = 0;

  private constructor(
    readonly ws: WebSocket,
    readonly nonce: string,
    /** The relay's key, as its challenge names it (and its welcome proved). */
    readonly relayKey: string,
    private readonly autoAck: boolean,
  ) {
    this.closed = new Promise((resolve) => ws.once('close', (code, reason) => resolve({ code, reason: reason.toString() })));
    ws.on('message', (data) => {
      const text = data.toString();
      const parsed = relayFrame.safeParse(parseJson(text));
      if (parsed.success) this.record(parsed.data);
      else this.invalid.push(text);
      this.notify();
    });
    ws.on('ping', () => {
      this.pings++;
      this.notify();
    });
    ws.on('close', () => this.notify());
  }

  private record(frame: RelayFrame): void {
    this.frames.push(frame);
    if (frame.type === 'deliver') {
      if (this.autoAck) this.ack(frame.route, [frame.id]);
      for (const key of [undefined, frame.route]) {
        const list = this.delivered.get(key) ?? [];
        list.push(frame);
        this.delivered.set(key, list);
      }
    } else if ((frame.type === 'accepted' || frame.type === 'refused') && frame.ref !== undefined && !this.replies.has(frame.ref)) {
      this.replies.set(frame.ref, frame);
      this.replyWaiters.get(frame.ref)?.(frame);
    }
  }

  /**
   * Connects, says hello and waits for the challenge and the welcome, whose signature it
   * checks. With `autoAck`, every delivery is acknowledged on arrival; `localAddress` (e.g. 127.0.0.2) makes the relay see another source address.
   */
  static async connect(url: string, options: { autoPong?: boolean; autoAck?: boolean; localAddress?: string } = {}): Promise<TestClient> {
    const ws = new WebSocket(url, {
      maxPayload: MAX_FRAME_BYTES,
      perMessageDeflate: false,
      autoPong: options.autoPong ?? true,
      ...(options.localAddress !== undefined && { localAddress: options.localAddress }),
    });
    ws.on('error', () => undefined);
    const clientNonce = newNonce();
    ws.once('open', () => ws.send(JSON.stringify({ v: PROTOCOL_VERSION, type: 'hello', nonce: clientNonce })));
    const frames = await new Promise<RelayFrame[]>((resolve, reject) => {
      const received: RelayFrame[] = [];
      const timer = setTimeout(() => reject(new Error('no challenge and welcome within 5 s')), 5_000);
      const onMessage = (data: WebSocket.RawData) => {
        const parsed = relayFrame.safeParse(parseJson(data.toString()));
        if (!parsed.success) return reject(new Error(`expected a challenge and a welcome, got ${data.toString()}`));
        received.push(parsed.data);
        if (received.length < 2) return;
        clearTimeout(timer);
        ws.off('message', onMessage);
        resolve(received);
      };
      ws.on('message', onMessage);
      ws.once('close', () => reject(new Error('closed before the challenge and the welcome')));
      // A refused upgrade: the error says the status and the relay's line (`503: interlink relay: …`).
      ws.once('unexpected-response', (_req, res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        const refused = () => {
          reject(new Error(`${res.statusCode ?? '?'}: ${body.trim()}`));
          ws.terminate();
        };
        res.once('end', refused);
        res.once('error', refused);
      });
    });
    const [challenge, welcome] = frames;
    if (challenge?.type !== 'challenge' || welcome?.type !== 'welcome') throw new Error(`expected a challenge, then a welcome: ${JSON.stringify(frames)}`);
    if (!verifyWelcome(challenge.key, challenge.nonce, clientNonce, welcome.sig)) throw new Error('the welcome does not prove the key the challenge names');
    return new TestClient(ws, challenge.nonce, challenge.key, options.autoAck ?? false);
  }

  get isOpen(): boolean {
    return this.ws.readyState === WebSocket.OPEN;
  }

  raw(text: string | Buffer): void {
    this.ws.send(text);
  }

  frame(frame: Record<string, unknown>): void {
    this.raw(JSON.stringify({ v: PROTOCOL_VERSION, ...frame }));
  }

  /** The first frame from index `from` on that matches, once it arrives. */
  waitFor(what: string, match: (f: RelayFrame) => boolean, from = 0, timeoutMs = 10_000): Promise<RelayFrame> {
    return this.when(what, () => this.frames.slice(from).find(match), timeoutMs);
  }

  when<T>(what: string, check: () => T | undefined, timeoutMs = 10_000): Promise<T> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => finish(new Error(`timed out waiting for ${what}; frames: ${JSON.stringify(this.frames.slice(-5))}`)), timeoutMs);
      const finish = (error?: Error, value?: T) => {
        clearTimeout(timer);
        this.waiters.delete(test);
        if (error) reject(error);
        else resolve(value as T);
      };
      const test = () => {
        const value = check();
        if (value !== undefined) finish(undefined, value);
      };
      this.waiters.add(test);
      test();
    });
  }

  /**
   * auth with `reader`'s key (or `signer`'s, to test a wrong key), naming this relay's key
   * (or `relayKey`, to test a proof made for another relay); resolves with auth_ok or the refusal.
   */
  async auth(reader: Reader, signer: SigningKey = reader.key, relayKey = this.relayKey): Promise<RelayFrame> {
    const from = this.frames.length;
    this.frame({ type: 'auth', route: reader.route, relay: relayKey, sig: signAuth(signer, relayKey, this.nonce, reader.route) });
    return this.waitFor('auth reply', (f) => f.type === 'auth_ok' || (f.type === 'refused' && f.ref === undefined), from);
  }

  /** Proves `reader`'s key (a fresh one by default) without reading its route: `auth` with `read: false`. */
  async prove(reader: Reader = newReader()): Promise<RelayFrame> {
    const from = this.frames.length;
    this.frame({ type: 'auth', route: reader.route, relay: this.relayKey, sig: signAuth(reader.key, this.relayKey, this.nonce, reader.route), read: false });
    return this.waitFor('auth reply', (f) => f.type === 'auth_ok' || (f.type === 'refused' && f.ref === undefined), from);
  }

  /** Sends and resolves with the `accepted` or `refused` frame that carries its ref. */
  send(to: string, payload: Record<string, unknown>, ref = `r${this.refs++}`, timeoutMs = 10_000): Promise<Accepted | Refused> {
    this.frame({ type: 'send', ref, to, payload });
    return this.reply(ref, timeoutMs);
  }

  /** The first `accepted` or `refused` frame that carries `ref`. */
  reply(ref: string, timeoutMs = 10_000): Promise<Accepted | Refused> {
    const known = this.replies.get(ref);
    if (known !== undefined) return Promise.resolve(known);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.replyWaiters.delete(ref);
        reject(new Error(`timed out waiting for the reply to ${ref}`));
      }, timeoutMs);
      this.replyWaiters.set(ref, (frame) => {
        clearTimeout(timer);
        this.replyWaiters.delete(ref);
        resolve(frame);
      });
    });
  }

  ack(route: string, ids: number[]): void {
    this.frame({ type: 'ack', route, ids });
  }

  deliveries(route?: string): Deliver[] {
    return [...(this.delivered.get(route) ?? [])];
  }

  refusals(): Refused[] {
    return this.frames.filter((f): f is Refused => f.type === 'refused');
  }

  waitForDeliveries(count: number, route?: string, timeoutMs = 10_000): Promise<Deliver[]> {
    return this.when(`${count} deliveries`, () => ((this.delivered.get(route)?.length ?? 0) >= count ? this.deliveries(route) : undefined), timeoutMs);
  }

  async close(): Promise<void> {
    if (this.ws.readyState === WebSocket.OPEN || this.ws.readyState === WebSocket.CONNECTING) this.ws.close();
    await this.closed;
  }

  /** Cuts the connection without a closing handshake. */
  async terminate(): Promise<void> {
    this.ws.terminate();
    await this.closed;
  }

  private notify(): void {
    for (const waiter of [...this.waiters]) waiter();
  }
}

/**
 * Asks `url` for a WebSocket upgrade and says how it was refused (`503: <body>`), or
 * undefined when the relay let the connection in (it is closed again at once).
 */
export function upgradeRefusal(url: string): Promise<string | undefined> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const req = httpRequest({
      host: hostname,
      port: Number(port),
      path: '/',
      headers: { Connection: 'Upgrade', Upgrade: 'websocket', 'Sec-WebSocket-Version': '13', 'Sec-WebSocket-Key': randomBytes(16).toString('base64') },
      timeout: 10_000,
    });
    req.once('upgrade', (_res, socket) => {
      socket.destroy();
      resolve(undefined);
    });
    req.once('response', (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.once('end', () => resolve(`${res.statusCode ?? '?'}: ${body.trim()}`));
    });
    req.once('timeout', () => req.destroy(new Error(`no answer to an upgrade from ${url} within 10 s`)));
    req.once('error', reject);
    req.end();
  });
}
