/**
 * A hostile relay that forwards to an honest one (issue 13, point 4): for every client it
 * opens its own connection to the honest relay, passes the honest relay's challenge on as
 * its own and the client's frames back, hoping the client's route proofs open the
 * client's queue on the honest relay. Whatever the honest relay then delivers on its
 * connection it acknowledges at once and never passes on: read and deleted.
 *
 * `honest-key` passes everything on, welcome included, so it presents the honest relay's
 * key; `own-key` presents a key of its own (with the honest relay's nonce) and signs its
 * own welcome, so the client's proofs name the forwarder's key.
 */
import { once } from 'node:events';
import WebSocket, { WebSocketServer } from 'ws';
import { signWelcome } from '../../src/wire/auth.js';
import { helloFrame, parseFrame, PROTOCOL_VERSION, relayFrame, type RelayFrame } from '../../src/wire/frames.js';
import { freshRelayKey } from '../../src/relay/relay-key.js';

export type ForwardingMode = 'honest-key' | 'own-key';

export class ForwardingRelay {
  /** Every frame the honest relay sent on the forwarder's connections. */
  readonly upstream: RelayFrame[] = [];
  /** Deliveries of the honest relay that the forwarder acknowledged itself. */
  readonly stolen: RelayFrame[] = [];
  private readonly own = freshRelayKey();
  private readonly sockets = new Set<WebSocket>();

  private constructor(
    private readonly server: WebSocketServer,
    readonly url: string,
    private readonly honestUrl: string,
    private readonly mode: ForwardingMode,
  ) {
    server.on('connection', (client) => this.connected(client));
  }

  static async start(honestUrl: string, mode: ForwardingMode): Promise<ForwardingRelay> {
    const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await once(server, 'listening');
    const address = server.address();
    if (typeof address !== 'object' || address === null) throw new Error('the forwarding relay has no address');
    return new ForwardingRelay(server, `ws://127.0.0.1:${address.port}`, honestUrl, mode);
  }

  /** Frames the honest relay sent to the forwarder of one type. */
  frames(type: RelayFrame['type']): RelayFrame[] {
    return this.upstream.filter((f) => f.type === type);
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.terminate();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private connected(client: WebSocket): void {
    const upstream = new WebSocket(this.honestUrl);
    for (const socket of [client, upstream]) {
      this.sockets.add(socket);
      socket.on('error', () => undefined);
      socket.on('close', () => {
        this.sockets.delete(socket);
        client.close();
        upstream.close();
      });
    }
    const early: string[] = [];
    upstream.on('open', () => early.splice(0).forEach((text) => upstream.send(text)));
    let nonce: string | undefined;
    let helloNonce: string | undefined;
    const welcomeOwn = () => {
      if (nonce !== undefined && helloNonce !== undefined) client.send(JSON.stringify({ v: PROTOCOL_VERSION, type: 'welcome', sig: signWelcome(this.own.signingKey, nonce, helloNonce) }));
    };
    upstream.on('message', (data) => {
      const text = data.toString();
      const frame = parseFrame(relayFrame, text);
      if (frame === undefined) return;
      this.upstream.push(frame);
      if (frame.type === 'deliver') {
        this.stolen.push(frame);
        upstream.send(JSON.stringify({ v: PROTOCOL_VERSION, type: 'ack', route: frame.route, ids: [frame.id] }));
        return;
      }
      if (this.mode === 'own-key' && frame.type === 'challenge') {
        nonce = frame.nonce;
        client.send(JSON.stringify({ ...frame, key: this.own.key }));
        return welcomeOwn();
      }
      if (this.mode === 'own-key' && frame.type === 'welcome') return;
      client.send(text);
    });
    client.on('message', (data) => {
      const text = data.toString();
      if (this.mode === 'own-key') {
        const hello = parseFrame(helloFrame, text);
        if (hello !== undefined) {
          helloNonce = hello.nonce;
          welcomeOwn();
        }
      }
      if (upstream.readyState === WebSocket.OPEN) upstream.send(text);
      else early.push(text);
    });
  }
}
