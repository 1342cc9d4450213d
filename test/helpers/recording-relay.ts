/**
 * A relay that records every frame: a transparent proxy in front of an honest relay. Each
 * client connection gets its own upstream connection, every text frame passes unchanged
 * both ways (so clients see the honest relay's key and its welcome verifies), and the
 * text of each frame is kept: what a relay operator who logs everything would have.
 */
import { once } from 'node:events';
import WebSocket, { WebSocketServer } from 'ws';

export class RecordingRelay {
  /** Every frame's text, in both directions, in the order the proxy saw them. */
  readonly frames: string[] = [];
  private readonly sockets = new Set<WebSocket>();

  private constructor(
    private readonly server: WebSocketServer,
    readonly url: string,
    private readonly honestUrl: string,
  ) {
    server.on('connection', (client) => this.connected(client));
  }

  static async start(honestUrl: string): Promise<RecordingRelay> {
    const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await once(server, 'listening');
    const address = server.address();
    if (typeof address !== 'object' || address === null) throw new Error('the recording relay has no address');
    return new RecordingRelay(server, `ws://127.0.0.1:${address.port}`, honestUrl);
  }

  /** Everything recorded, as one text to search. */
  all(): string {
    return this.frames.join('\n');
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.terminate();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private connected(client: WebSocket): void {
    const upstream = new WebSocket(this.honestUrl);
    const early: string[] = [];
    for (const socket of [client, upstream]) {
      this.sockets.add(socket);
      socket.on('error', () => undefined);
      socket.on('close', () => {
        this.sockets.delete(socket);
        client.terminate();
        upstream.terminate();
      });
    }
    client.on('message', (data) => {
      const text = data.toString('utf8');
      this.frames.push(text);
      if (upstream.readyState === WebSocket.OPEN) upstream.send(text);
      else early.push(text);
    });
    upstream.on('open', () => {
      for (const text of early.splice(0)) upstream.send(text);
    });
    upstream.on('message', (data) => {
      const text = data.toString('utf8');
      this.frames.push(text);
      if (client.readyState === WebSocket.OPEN) client.send(text);
    });
  }
}
