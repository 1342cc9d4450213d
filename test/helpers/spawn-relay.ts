/** A real relay process (`interlink-mcp relay`), started on a given or free loopback port. */
import { createServer } from 'node:net';
import { spawnNode, type Child } from './process.js';
import { MAIN } from './mcp.js';
import { pgStoreUrl, sharedStore } from './relay-store.js';

export interface RelayProcess {
  child: Child;
  url: string;
  port: number;
  /** The relay's key, from its second line. */
  key: string;
}

/**
 * Ports picked for a relay that restarts on the same address lie below the ranges the OS
 * hands out for listen(0) and outgoing connections (Linux 32768-60999, macOS from 49152),
 * so a port free a moment ago is not taken meanwhile by any of the connections the other
 * test files open; only another pick from here could take it, one chance in thousands.
 */
const PICK_FROM = 20_000;
const PICK_SPAN = 12_000;
const PICK_TRIES = 50;

function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** A port that was free a moment ago (for restarting a relay on the same address). */
export async function freePort(): Promise<number> {
  for (let i = 0; i < PICK_TRIES; i++) {
    const port = PICK_FROM + Math.floor(Math.random() * PICK_SPAN);
    if (await bindable(port)) return port;
  }
  throw new Error(`no free port among ${PICK_TRIES} tries in ${PICK_FROM}-${PICK_FROM + PICK_SPAN - 1}`);
}

/**
 * `args` (or `flags`) are further relay options (e.g. `--tls-cert`, `--max-per-address 40`);
 * `env` overrides the default INTERLINK_LOG=warn and more. `keyFile` keeps an in-memory
 * relay's key across restarts (`relay --key`): a relay that restarts under running sessions
 * must present the key they recorded. The url is the one the relay prints, ws:// or wss://.
 * `startTimeoutMs` (15 s by default) bounds the wait for those lines: a load test on a
 * saturated machine gives it more.
 */
export async function startRelay(
  options: { port?: number; db?: string; keyFile?: string; args?: readonly string[]; flags?: readonly string[]; env?: NodeJS.ProcessEnv; startTimeoutMs?: number } = {},
): Promise<RelayProcess> {
  // In the relay-postgres project every relay keeps its queues in PostgreSQL, `db` naming the schema.
  const store = sharedStore ? ['--store', await pgStoreUrl(options.db)] : options.db !== undefined ? ['--db', options.db] : [];
  const args = [
    'relay',
    '--addr',
    `127.0.0.1:${options.port ?? 0}`,
    ...store,
    ...(options.keyFile !== undefined ? ['--key', options.keyFile] : []),
    ...(options.args ?? []),
    ...(options.flags ?? []),
  ];
  const child = spawnNode(MAIN, args, { INTERLINK_LOG: 'warn', ...options.env });
  await child.waitForLines(2, options.startTimeoutMs ?? 15_000);
  const match = /(wss?):\/\/127\.0\.0\.1:(\d+)/.exec(child.lines[0] ?? '');
  const key = /^interlink relay key ([A-Za-z0-9_-]{43}) /.exec(child.lines[1] ?? '')?.[1];
  if (!match || key === undefined) throw new Error(`unexpected relay output: ${child.lines.join(' | ')}; stderr: ${child.stderr()}`);
  const port = Number(match[2]);
  return { child, url: `${match[1]}://127.0.0.1:${port}`, port, key };
}
