/** A real relay process (`interlink-mcp relay`), started on a given or free loopback port. */
import { createServer } from 'node:net';
import { spawnNode, type Child } from './process.js';
import { MAIN } from './mcp.js';

export interface RelayProcess {
  child: Child;
  url: string;
  port: number;
}

/** A port that was free a moment ago (for restarting a relay on the same address). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** `flags`: more `relay` flags, e.g. `['--max-per-address', '40']`. */
export async function startRelay(options: { port?: number; db?: string; flags?: readonly string[] } = {}): Promise<RelayProcess> {
  const args = ['relay', '--addr', `127.0.0.1:${options.port ?? 0}`, ...(options.db !== undefined ? ['--db', options.db] : []), ...(options.flags ?? [])];
  const child = spawnNode(MAIN, args, { INTERLINK_LOG: 'warn' });
  await child.waitForLines(1, 15_000);
  const match = /ws:\/\/127\.0\.0\.1:(\d+)/.exec(child.lines[0] ?? '');
  if (!match) throw new Error(`unexpected relay output: ${child.lines[0]}; stderr: ${child.stderr()}`);
  const port = Number(match[1]);
  return { child, url: `ws://127.0.0.1:${port}`, port };
}
