/**
 * A TCP proxy in front of a PostgreSQL port that can stop passing bytes either way while
 * keeping every connection open: a relay's database connections that stall, as behind a
 * network that drops packets without resetting anything (test/relay/postgres-outage.test.ts,
 * test/e2e/postgres-stall.test.ts).
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';

export class StallingProxy {
  private stalled = false;
  private readonly sockets = new Set<Socket>();

  private constructor(
    private readonly server: Server,
    readonly port: number,
  ) {}

  static async start(target: number): Promise<StallingProxy> {
    const server = createServer();
    const port = await new Promise<number>((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as { port: number }).port)));
    const proxy = new StallingProxy(server, port);
    server.on('connection', (client) => proxy.pipe(client, createConnection({ host: '127.0.0.1', port: target })));
    return proxy;
  }

  private pipe(client: Socket, upstream: Socket): void {
    for (const [from, to] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      this.sockets.add(from);
      from.on('error', () => to.destroy());
      from.on('close', () => {
        this.sockets.delete(from);
        to.destroy();
      });
      from.on('data', (chunk) => to.write(chunk));
      if (this.stalled) from.pause();
    }
  }

  stall(): void {
    this.stalled = true;
    for (const socket of this.sockets) socket.pause();
  }

  flow(): void {
    this.stalled = false;
    for (const socket of this.sockets) socket.resume();
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}
