/**
 * `interlink-mcp relay`: runs the WebSocket relay until SIGTERM or SIGINT. The zero-config
 * start of `serve` launches this and relies on `address in use` (exit 1) to end up with one
 * relay when two start at once.
 */
import { isIP } from 'node:net';
import { resolve } from 'node:path';
import { InterlinkError } from '../../errors.js';
import { RelayServer } from '../../relay/server.js';
import { expectPositionals, parse } from '../args.js';

export const DEFAULT_RELAY_ADDR = '127.0.0.1:9440';

export const relayHelp = `usage: interlink-mcp relay [--addr HOST:PORT] [--db DIR]

Runs the relay that carries signed messages between sessions: it keeps each session's
messages until that session's reader, proving its key, acknowledges them.

  --addr HOST:PORT  where to listen (default ${DEFAULT_RELAY_ADDR}; port 0 picks a free
                    port; IPv6 in brackets, e.g. [::1]:9440)
  --db DIR          keep queued messages on disk in DIR (created if missing): they survive
                    a crash or restart. Without it they live in memory only.

Prints one line once it listens:
  interlink relay listening on ws://HOST:PORT (durable: DIR)
and stops cleanly on SIGTERM or SIGINT. Anyone who can reach the relay may send through
it (only reading is authenticated), so listen beyond loopback only on purpose.`;

/** `HOST:PORT`, with an IPv6 host in brackets. */
export function parseAddr(text: string): { host: string; port: number } {
  const bad = (why: string) => new InterlinkError('usage', `--addr ${JSON.stringify(text)}: ${why}`);
  let host: string;
  let portText: string;
  if (text.startsWith('[')) {
    const close = text.indexOf(']:');
    if (close < 0) throw bad('expected [IPv6]:PORT');
    host = text.slice(1, close);
    portText = text.slice(close + 2);
    if (isIP(host) !== 6) throw bad('not an IPv6 address in the brackets');
  } else {
    const colon = text.lastIndexOf(':');
    if (colon < 0) throw bad('expected HOST:PORT');
    host = text.slice(0, colon);
    portText = text.slice(colon + 1);
    if (host.includes(':')) throw bad('write an IPv6 address in brackets, e.g. [::1]:9440');
  }
  if (host === '') throw bad('the host is empty');
  if (!/^\d{1,5}$/.test(portText) || Number(portText) > 65535) throw bad('the port must be a number from 0 to 65535');
  return { host, port: Number(portText) };
}

export function isLoopback(host: string): boolean {
  if (host === 'localhost' || host === '::1') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  return isIP(host) === 6 && host.toLowerCase().startsWith('::ffff:127.');
}

function warn(text: string): void {
  process.stderr.write(`interlink-mcp relay: warning: ${text}\n`);
}

function stopSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const stop = (signal: NodeJS.Signals) => {
      process.off('SIGTERM', stop);
      process.off('SIGINT', stop);
      resolve(signal);
    };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
  });
}

export async function relay(argv: readonly string[]): Promise<void> {
  const args = parse(argv, { addr: { type: 'string' }, db: { type: 'string' } });
  expectPositionals(args, 0, 'interlink-mcp relay [--addr HOST:PORT] [--db DIR]');
  const { host, port } = parseAddr(typeof args.values.addr === 'string' ? args.values.addr : DEFAULT_RELAY_ADDR);
  const db = typeof args.values.db === 'string' ? resolve(args.values.db) : undefined;
  if (!isLoopback(host)) {
    warn(`listening on ${host}, beyond loopback: anyone who can reach it can send messages through it and fill its queues (only readers are authenticated)`);
  }
  if (db === undefined) warn('no --db: queued messages live in memory and are lost when the relay stops');

  const stopped = stopSignal();
  const server = await RelayServer.start({ host, port, ...(db !== undefined && { dbDir: db }) });
  const mode = db !== undefined ? `durable: ${db}` : 'in memory: queued messages are lost on restart';
  process.stdout.write(`interlink relay listening on ${server.url} (${mode})\n`);
  await stopped;
  await server.close();
}
