/** A real relay process (`interlink-mcp relay`), started on a given or free loopback port. */
import { createServer } from 'node:net';
import { spawnNode, type Child } from './process.js';
import { MAIN } from './mcp.js';

export interface RelayProcess {
  child: Child;
  url: string;
  port: number;
  /** The relay's key, from its second line. */
  key: string;
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

/**
 * `args` (or `flags`) are further relay options (e.g. `--tls-cert`, `--max-per-address 40`);
 * `env` overrides the default INTERLINK_LOG=warn and more. `keyFile` keeps an in-memory
 * relay's key across restarts (`relay --key`): a relay that restarts under running sessions
 * must present the key they recorded. The url is the one the relay prints, ws:// or wss://.
 */
export async function startRelay(
  options: { port?: number; db?: string; keyFile?: string; args?: readonly string[]; flags?: readonly string[]; env?: NodeJS.ProcessEnv } = {},
): Promise<RelayProcess> {
  const args = [
    'relay',
    '--addr',
    `127.0.0.1:${options.port ?? 0}`,
    ...(options.db !== undefined ? ['--db', options.db] : []),
    ...(options.keyFile !== undefined ? ['--key', options.keyFile] : []),
    ...(options.args ?? []),
    ...(options.flags ?? []),
  ];
  const child = spawnNode(MAIN, args, { INTERLINK_LOG: 'warn', ...options.env });
  await child.waitForLines(2, 15_000);
  const match = /(wss?):\/\/127\.0\.0\.1:(\d+)/.exec(child.lines[0] ?? '');
  const key = /^interlink relay key ([A-Za-z0-9_-]{43}) /.exec(child.lines[1] ?? '')?.[1];
  if (!match || key === undefined) throw new Error(`unexpected relay output: ${child.lines.join(' | ')}; stderr: ${child.stderr()}`);
  const port = Number(match[2]);
  return { child, url: `${match[1]}://127.0.0.1:${port}`, port, key };
}
