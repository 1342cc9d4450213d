/**
 * `interlink-mcp relay`: runs the WebSocket relay until SIGTERM or SIGINT. The zero-config
 * start of `serve` launches this and relies on `address in use` (exit 1, one line) to end
 * up with one relay when two start at once. `relay stop` stops a durable relay by its
 * store's pid file: by default the zero-config one under <state>/relay.
 */
import { isIP } from 'node:net';
import { closeSync, constants, openSync, writeSync } from 'node:fs';
import { resolve } from 'node:path';
import { knownRelaysPath, localRelayDir, relayStopMarker } from '../../config/layout.js';
import { parseRelayUrl } from '../../config/relay-url.js';
import { forgetRelay } from '../../relay/known-relays.js';
import { NO_FOLLOW, PRIVATE_FILE } from '../../store/private.js';
import { DEFAULT_LOCAL_RELAY as DEFAULT_RELAY_ADDR, type Config } from '../../config/env.js';
import { InterlinkError } from '../../errors.js';
import { isRelayProcess, isRunning, readRelayPid, removeRelayPid, writeRelayPid } from '../../relay/pid-file.js';
import { MIN_MAX_AGE_MS, RelayServer } from '../../relay/server.js';
import { expectPositionals, parse, print } from '../args.js';

export const relayHelp = `usage: interlink-mcp relay [--addr HOST:PORT] [--db DIR] [--max-age DURATION] [--key FILE]
       interlink-mcp relay stop [--db DIR] [--json]
       interlink-mcp relay forget URL [--json]

Runs the relay that carries signed messages between sessions: it keeps each session's
messages until that session's reader, proving its key, acknowledges them.

  --addr HOST:PORT  where to listen (default ${DEFAULT_RELAY_ADDR}; port 0 picks a free
                    port; IPv6 in brackets, e.g. [::1]:9440)
  --db DIR          keep queued messages on disk in DIR (created if missing): they survive
                    a crash or restart. Without it they live in memory only.
  --max-age D       drop a message nobody acknowledged after D (default 8d; at least
                    7 days and 10 minutes, as long as receivers accept it): a route nobody
                    reads goes with its messages, so nothing fills the relay for good
  --key FILE        the relay's own Ed25519 key, created there if missing (default
                    DIR/relay-key.json with --db; without either, a new key at every
                    start, which clients that pinned or recorded the old one refuse)

Prints two lines once it listens:
  interlink relay listening on ws://HOST:PORT (durable: DIR)
  interlink relay key KEY (clients may pin it: INTERLINK_URL=ws://HOST:PORT#key=KEY)
and stops cleanly on SIGTERM or SIGINT. Anyone who can reach the relay may send through
it (only reading is authenticated), so listen beyond loopback only on purpose. With
--db it records its pid in DIR/relay.pid while it runs.

relay stop: stops the relay whose store is DIR (default: the zero-config relay that serve
starts under <state>/relay) and waits until it has exited. Its queued messages stay in
DIR; the next serve starts it again. Nothing running is not an error.

relay forget URL: accepts a relay's new key. Sessions record the key each relay URL
presents the first time (in <state>/relays.json) and refuse to read at that URL if it
later presents another; this forgets what was recorded for URL, so the key it presents
next is recorded instead. Running sessions pick it up when they next reconnect.`;

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

const STOP_WAIT_MS = 10_000;

/** Stops the relay recorded in `db`'s pid file; resolves once it has exited. */
async function stop(argv: readonly string[], config: Config): Promise<void> {
  const args = parse(argv, { db: { type: 'string' }, json: { type: 'boolean' } });
  expectPositionals(args, 0, 'interlink-mcp relay stop [--db DIR] [--json]');
  const db = typeof args.values.db === 'string' ? resolve(args.values.db) : localRelayDir(config.stateDir);
  const record = await readRelayPid(db);
  const json = args.values.json === true;
  if (record === undefined || !isRunning(record.pid)) {
    print(json, { stopped: false, db }, () => `no relay is running on ${db}`);
    return;
  }
  if (!(await isRelayProcess(record))) {
    throw new InterlinkError('busy', `process ${record.pid} named in ${db}/relay.pid is not that relay any more (the relay died without cleaning up); nothing was stopped`);
  }
  process.kill(record.pid, 'SIGTERM');
  const deadline = Date.now() + STOP_WAIT_MS;
  while (isRunning(record.pid)) {
    if (Date.now() > deadline) throw new InterlinkError('busy', `the relay (pid ${record.pid}) did not exit within ${STOP_WAIT_MS / 1000} s of SIGTERM`);
    await new Promise((r) => setTimeout(r, 50));
  }
  // Sessions still running restart a zero-config relay they find gone, unless a person stopped it.
  const marker = openSync(relayStopMarker(db), constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | NO_FOLLOW, PRIVATE_FILE);
  writeSync(marker, `stopped by a person at ${new Date().toISOString()}\n`);
  closeSync(marker);
  print(json, { stopped: true, pid: record.pid, url: record.url, db }, () => `stopped the relay on ${record.url} (pid ${record.pid}); its queued messages stay in ${db}`);
}

const UNITS: Record<string, number> = { d: 86_400_000, h: 3_600_000, m: 60_000, s: 1_000 };

/** `8d`, `200h`: how long a message may wait; never less than the receivers' window. */
function parseMaxAge(text: string): number {
  const match = /^([1-9][0-9]{0,6})([dhms])$/.exec(text);
  if (match === null) throw new InterlinkError('usage', `--max-age ${JSON.stringify(text)} is not a duration: a number and a unit, d, h, m or s (e.g. 8d)`);
  const ms = Number(match[1]) * UNITS[match[2]!]!;
  if (ms < MIN_MAX_AGE_MS) {
    throw new InterlinkError('usage', `--max-age ${text} is shorter than receivers accept messages (7 days and 10 minutes): a relay must keep mail at least that long`);
  }
  return ms;
}

/** Forgets the key recorded for a relay URL: the person accepts whatever key it presents next. */
async function forget(argv: readonly string[], config: Config): Promise<void> {
  const args = parse(argv, { json: { type: 'boolean' } });
  const [text] = expectPositionals(args, 1, 'interlink-mcp relay forget URL [--json]');
  const parsed = parseRelayUrl(text!.trim());
  if ('error' in parsed) throw new InterlinkError('usage', parsed.error);
  const { url } = parsed.endpoint;
  const forgotten = await forgetRelay(knownRelaysPath(config.stateDir), url);
  print(args.values.json === true, { forgotten, url }, () =>
    forgotten ? `forgot the key recorded for ${url}: the key it presents next is recorded` : `no key was recorded for ${url}`,
  );
}

export async function relay(argv: readonly string[], config: Config): Promise<void> {
  if (argv[0] === 'stop') return stop(argv.slice(1), config);
  if (argv[0] === 'forget') return forget(argv.slice(1), config);
  const args = parse(argv, { addr: { type: 'string' }, db: { type: 'string' }, 'max-age': { type: 'string' }, key: { type: 'string' } });
  expectPositionals(args, 0, 'interlink-mcp relay [--addr HOST:PORT] [--db DIR] [--max-age DURATION] [--key FILE]');
  const { host, port } = parseAddr(typeof args.values.addr === 'string' ? args.values.addr : DEFAULT_RELAY_ADDR);
  const db = typeof args.values.db === 'string' ? resolve(args.values.db) : undefined;

  const stopped = stopSignal();
  const maxAge = args.values['max-age'];
  const maxAgeMs = typeof maxAge === 'string' ? parseMaxAge(maxAge) : undefined;
  const keyFile = typeof args.values.key === 'string' ? resolve(args.values.key) : undefined;
  const server = await RelayServer.start({ host, port, ...(db !== undefined && { dbDir: db }), ...(maxAgeMs !== undefined && { maxAgeMs }), ...(keyFile !== undefined && { keyFile }) });
  // Warnings only once it listens: a relay that cannot start says one line, why.
  if (!isLoopback(host)) {
    warn(`listening on ${host}, beyond loopback: anyone who can reach it can send messages through it and fill its queues (only readers are authenticated)`);
  }
  if (db === undefined) warn('no --db: queued messages live in memory and are lost when the relay stops');
  if (db === undefined && keyFile === undefined) warn('no --db or --key: this relay has a new key at every start, and clients that pinned or recorded it refuse the next one');
  if (db !== undefined) await writeRelayPid({ pid: process.pid, url: server.url, db, started_at: Date.now() });
  const mode = db !== undefined ? `durable: ${db}` : 'in memory: queued messages are lost on restart';
  process.stdout.write(`interlink relay listening on ${server.url} (${mode})\n`);
  process.stdout.write(`interlink relay key ${server.key} (clients may pin it: INTERLINK_URL=${server.url}#key=${server.key})\n`);
  await stopped;
  await server.close();
  if (db !== undefined) await removeRelayPid(db, process.pid);
}
