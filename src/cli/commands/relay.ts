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
import { forgetRelay } from '../../link/known-relays.js';
import { NO_FOLLOW, PRIVATE_FILE } from '../../store/private.js';
import { DEFAULT_LOCAL_RELAY as DEFAULT_RELAY_ADDR, type Config } from '../../config/env.js';
import { InterlinkError } from '../../errors.js';
import { isLoopbackAddress } from '../../relay/address.js';
import { DEFAULT_LOOPBACK_CONNECTIONS_PER_ADDRESS, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS_PER_ADDRESS, DEFAULT_NETWORK_MULTIPLE } from '../../relay/admission.js';
import { isRelayProcess, isRunning, readRelayPid, removeRelayPid, writeRelayPid } from '../../relay/pid-file.js';
import { serveMetrics } from '../../relay/metrics-http.js';
import { MIN_MAX_AGE_MS, RelayServer } from '../../relay/server.js';
import { isLoopback } from '../../relay/address.js';
import { isPostgresUrl, redactedUrl } from '../../relay/postgres/database.js';
import { readServerTls, type ServerTls } from '../../wire/tls.js';
import { expectPositionals, parse, print } from '../args.js';
import { relayMigrate } from './relay-migrate.js';

export const relayHelp = `usage: interlink-mcp relay [--addr HOST:PORT] [--db DIR | --store URL] [--max-age DURATION] [--key FILE]
                          [--max-per-address N] [--max-per-connection N]
                          [--max-connections N] [--max-connections-per-address N]
                          [--tls-cert FILE --tls-key FILE]
                          [--metrics HOST:PORT] [--summary-every DURATION]
       interlink-mcp relay stop [--db DIR] [--json]
       interlink-mcp relay forget URL [--json]
       interlink-mcp relay migrate --db DIR --store URL [--key FILE] [--json]

Runs the relay that carries signed messages between sessions: it keeps each session's
messages until that session's reader, proving its key, acknowledges them.

  --addr HOST:PORT  where to listen (default ${DEFAULT_RELAY_ADDR}; port 0 picks a free
                    port; IPv6 in brackets, e.g. [::1]:9440)
  --db DIR          keep queued messages on disk in DIR (created if missing): they survive
                    a crash or restart. Without it they live in memory only.
  --store URL       keep queues and the presence roster in PostgreSQL instead, shared by
                    every relay started with the same URL: any of them serves any route
                    (postgres://USER@HOST:PORT/DB; list several HOST:PORT, with
                    ?target_session_attrs=primary, to follow a failover; the password
                    from PGPASSWORD keeps it out of the process list). The relay key is
                    kept there too unless --key names a file. docs/SCALING.md.
  --max-age D       drop a message nobody acknowledged after D (default 8d; at least
                    7 days and 10 minutes, as long as receivers accept it): a route nobody
                    reads goes with its messages, so nothing fills the relay for good
  --max-per-address N
                    messages one sender's address (IPv6: its /64) may have queued, and
                    N x 5 KiB of payload; beyond it its sends are refused queue_full
                    while others' are still accepted (default 10000, a tenth of the
                    relay's 100000 messages and 512 MiB; listening on loopback, where
                    every client is this machine or a proxy in front, the whole relay)
  --max-per-connection N
                    the same for one sender key (default 5000: a twentieth): the key its
                    connection proved, which reconnecting does not renew; connections
                    that proved none share one per network, and a new key gets a share
                    of its own only within its network's budget (4, then 1 an hour)
  --max-connections N
                    hold at most N connections at once (default ${DEFAULT_MAX_CONNECTIONS}), counting
                    every accepted socket; past it a socket from an address holding at
                    least two fewer than the heaviest one is still let in, and the
                    heaviest's newest connection is closed (1013, try again later)
  --max-connections-per-address N
                    at most N of them from one remote address, loopback aliases included
                    (default ${DEFAULT_MAX_CONNECTIONS_PER_ADDRESS}; ${DEFAULT_LOOPBACK_CONNECTIONS_PER_ADDRESS} listening on loopback, where every local session
                    and every client of a reverse proxy on this host is 127.0.0.1), and
                    ${DEFAULT_NETWORK_MULTIPLE} times N from one IPv6 /64; past it the socket is answered HTTP 503.
                    A socket must ask for the WebSocket upgrade within 10 s and prove a
                    key within 10 s more, or it is closed. Each connection holds an open
                    file: keep --max-connections under the hard open-files limit
                    (LimitNOFILE; the relay warns at start when it does not fit)
  --key FILE        the relay's own Ed25519 key, created there if missing (default
                    DIR/relay-key.json with --db; without either, a new key at every
                    start, which clients that pinned or recorded the old one refuse)

  --tls-cert FILE   serve wss:// (TLS) with this PEM certificate (chain) and the private
  --tls-key FILE    key in the other file; both or neither (default: plain ws://, e.g.
                    behind a reverse proxy that terminates TLS). Clients trust a
                    self-signed or private-CA certificate with INTERLINK_TLS_CA=FILE.
  --metrics HOST:PORT
                    serve Prometheus text metrics on GET http://HOST:PORT/metrics (off by
                    default; keep it on loopback, e.g. 127.0.0.1:9441; port 0 picks one)
  --summary-every D log a relay_summary line every D when something changed (default 5m):
                    connections, routes, queued messages and bytes, and what was
                    accepted, delivered, acknowledged, expired and refused since the last

Logs JSON lines on stderr at info level unless INTERLINK_LOG says otherwise. Prints two
lines once it listens (wss:// with --tls-cert):
  interlink relay listening on ws://HOST:PORT (durable: DIR)
  interlink relay key KEY (clients may pin it: INTERLINK_URL=ws://HOST:PORT#key=KEY)
and with --metrics a third one:
  metrics on http://HOST:PORT/metrics
and stops cleanly on SIGTERM or SIGINT. Anyone who can reach the relay may send through
it (only reading is authenticated), so listen beyond loopback only on purpose. With
--db it records its pid in DIR/relay.pid while it runs.

relay stop: stops the relay whose store is DIR (default: the zero-config relay that serve
and every pair command start under <state>/relay) and waits until it has exited. Its
queued messages stay in DIR; the next serve or pair command starts it again. Nothing
running is not an error. Run it before \`npm uninstall -g\`: the relay outlives it.

relay forget URL: accepts a relay's new key. Sessions record the key each relay URL
presents the first time (in <state>/relays.json) and refuse to read at that URL if it
later presents another (\`status\`, every \`pair\` command and the sessions' log then say
"answers with a NEW key", naming both); this forgets what was recorded for URL, so the
key it presents next is recorded instead. Running sessions pick it up when they next
reconnect, within seconds.

relay migrate: moves the queues of a stopped --db relay into the PostgreSQL database of
--store, in one transaction: every queued message with its id and exact bytes, the key
its sender counts are kept by, and the relay key (DIR/relay-key.json, or --key FILE), so
clients keep trusting the relay and read on with the same ids. It refuses while a relay
runs on DIR, and when the database holds other queued messages or another relay key.
Run again, it finds them already there and changes nothing (--json: "already": true).
DIR is left as it was: remove it once relays started with --store serve the queues.`;

/** `HOST:PORT`, with an IPv6 host in brackets; `flag` names the option in errors. */
export function parseAddr(text: string, flag = '--addr'): { host: string; port: number } {
  const bad = (why: string) => new InterlinkError('usage', `${flag} ${JSON.stringify(text)}: ${why}`);
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
  // Sessions still running restart a zero-config relay they find gone, unless a person stopped
  // it: the marker goes down before the signal, or a session could see the relay gone first
  // and start another one.
  const marker = openSync(relayStopMarker(db), constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | NO_FOLLOW, PRIVATE_FILE);
  writeSync(marker, `stopped by a person at ${new Date().toISOString()}\n`);
  closeSync(marker);
  process.kill(record.pid, 'SIGTERM');
  const deadline = Date.now() + STOP_WAIT_MS;
  while (isRunning(record.pid)) {
    if (Date.now() > deadline) throw new InterlinkError('busy', `the relay (pid ${record.pid}) did not exit within ${STOP_WAIT_MS / 1000} s of SIGTERM`);
    await new Promise((r) => setTimeout(r, 50));
  }
  print(json, { stopped: true, pid: record.pid, url: record.url, db }, () => `stopped the relay on ${record.url} (pid ${record.pid}); its queued messages stay in ${db}`);
}

const UNITS: Record<string, number> = { d: 86_400_000, h: 3_600_000, m: 60_000, s: 1_000 };

/** `8d`, `5m`: a number and a unit; `flag` and `example` name the option in errors. */
function parseDuration(flag: string, text: string, example: string): number {
  const match = /^([1-9][0-9]{0,6})([dhms])$/.exec(text);
  if (match === null) throw new InterlinkError('usage', `${flag} ${JSON.stringify(text)} is not a duration: a number and a unit, d, h, m or s (e.g. ${example})`);
  return Number(match[1]) * UNITS[match[2]!]!;
}

/** `8d`, `200h`: how long a message may wait; never less than the receivers' window. */
function parseMaxAge(text: string): number {
  const ms = parseDuration('--max-age', text, '8d');
  if (ms < MIN_MAX_AGE_MS) {
    throw new InterlinkError('usage', `--max-age ${text} is shorter than receivers accept messages (7 days and 10 minutes): a relay must keep mail at least that long`);
  }
  return ms;
}

/** `--tls-cert` and `--tls-key`: both, read and checked now, or neither. */
function serverTls(cert: unknown, key: unknown): ServerTls | undefined {
  if (typeof cert !== 'string' && typeof key !== 'string') return undefined;
  if (typeof cert !== 'string') throw new InterlinkError('usage', '--tls-key needs --tls-cert: the certificate that goes with the key');
  if (typeof key !== 'string') throw new InterlinkError('usage', '--tls-cert needs --tls-key: the private key of the certificate');
  return readServerTls(cert, key);
}

/** A count for a share or connection-cap flag: a whole number from 1 up. */
function parseCount(flag: string, text: string | boolean | undefined): number | undefined {
  if (typeof text !== 'string') return undefined;
  if (!/^[1-9][0-9]{0,8}$/.test(text)) throw new InterlinkError('usage', `--${flag} ${JSON.stringify(text)} is not a whole number of at least 1`);
  return Number(text);
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
  if (argv[0] === 'migrate') return relayMigrate(argv.slice(1));
  const args = parse(argv, {
    addr: { type: 'string' },
    db: { type: 'string' },
    store: { type: 'string' },
    'max-age': { type: 'string' },
    key: { type: 'string' },
    'max-per-address': { type: 'string' },
    'max-per-connection': { type: 'string' },
    'max-connections': { type: 'string' },
    'max-connections-per-address': { type: 'string' },
    'tls-cert': { type: 'string' },
    'tls-key': { type: 'string' },
    metrics: { type: 'string' },
    'summary-every': { type: 'string' },
  });
  expectPositionals(args, 0, 'interlink-mcp relay [--addr HOST:PORT] [--db DIR | --store postgres://...] [--max-age DURATION] [--key FILE] [--max-per-address N] [--max-per-connection N] [--max-connections N] [--max-connections-per-address N] [--tls-cert FILE --tls-key FILE] [--metrics HOST:PORT] [--summary-every DURATION]');
  const { host, port } = parseAddr(typeof args.values.addr === 'string' ? args.values.addr : DEFAULT_RELAY_ADDR);
  const db = typeof args.values.db === 'string' ? resolve(args.values.db) : undefined;
  const store = typeof args.values.store === 'string' ? args.values.store : undefined;
  if (db !== undefined && store !== undefined) throw new InterlinkError('usage', '--db and --store name two places for the queues: give one (relay migrate moves a --db store into PostgreSQL)');
  if (store !== undefined && !isPostgresUrl(store)) throw new InterlinkError('usage', `--store ${JSON.stringify(redactedUrl(store))} is not a postgres:// connection string`);
  const metricsAddr = typeof args.values.metrics === 'string' ? parseAddr(args.values.metrics, '--metrics') : undefined;
  const summaryEvery = args.values['summary-every'];
  const summaryEveryMs = typeof summaryEvery === 'string' ? parseDuration('--summary-every', summaryEvery, '5m') : undefined;

  const stopped = stopSignal();
  const maxAge = args.values['max-age'];
  const maxAgeMs = typeof maxAge === 'string' ? parseMaxAge(maxAge) : undefined;
  const keyFile = typeof args.values.key === 'string' ? resolve(args.values.key) : undefined;
  const maxPerAddress = parseCount('max-per-address', args.values['max-per-address']);
  const maxPerConnection = parseCount('max-per-connection', args.values['max-per-connection']);
  const maxConnections = parseCount('max-connections', args.values['max-connections']);
  const maxConnectionsPerAddress = parseCount('max-connections-per-address', args.values['max-connections-per-address']);
  const tls = serverTls(args.values['tls-cert'], args.values['tls-key']);
  // The metrics address is bound before the relay starts, so that a taken one fails in one line.
  let server: RelayServer | undefined;
  const metrics = metricsAddr !== undefined ? await serveMetrics(metricsAddr.host, metricsAddr.port, () => server?.scrapeMetrics()) : undefined;
  try {
    server = await RelayServer.start({
      host,
      port,
      ...(db !== undefined && { dbDir: db }),
      ...(store !== undefined && { store }),
      ...(maxAgeMs !== undefined && { maxAgeMs }),
      ...(keyFile !== undefined && { keyFile }),
      ...(summaryEveryMs !== undefined && { summaryEveryMs }),
      ...(tls !== undefined && { tls }),
      ...(maxPerAddress !== undefined && { maxPerAddress }),
      ...(maxPerConnection !== undefined && { maxPerConnection }),
      ...(maxConnections !== undefined && { maxConnections }),
      ...(maxConnectionsPerAddress !== undefined && { maxConnectionsPerAddress }),
    });
  } catch (err) {
    await metrics?.close();
    throw err;
  }
  // Warnings only once it listens: a relay that cannot start says one line, why.
  if (!isLoopback(host)) {
    warn(`listening on ${host}, beyond loopback: anyone who can reach it can send messages through it and fill its queues (only readers are authenticated)`);
  }
  if (metricsAddr !== undefined && !isLoopback(metricsAddr.host)) {
    warn(`metrics on ${metricsAddr.host}, beyond loopback: anyone who can reach it sees the relay's traffic counts`);
  }
  if (db === undefined && store === undefined) warn('no --db or --store: queued messages live in memory and are lost when the relay stops');
  if (db === undefined && store === undefined && keyFile === undefined) {
    warn('no --db, --store or --key: this relay has a new key at every start, and clients that pinned or recorded it refuse the next one');
  }
  if (db !== undefined) await writeRelayPid({ pid: process.pid, url: server.url, db, started_at: Date.now() });
  const mode = db !== undefined ? `durable: ${db}` : store !== undefined ? `durable: ${redactedUrl(store)}, shared` : 'in memory: queued messages are lost on restart';
  process.stdout.write(`interlink relay listening on ${server.url} (${mode})\n`);
  process.stdout.write(`interlink relay key ${server.key} (clients may pin it: INTERLINK_URL=${server.url}#key=${server.key})\n`);
  if (metrics !== undefined) process.stdout.write(`metrics on ${metrics.url}\n`);
  await stopped;
  await metrics?.close();
  await server.close();
  if (db !== undefined) await removeRelayPid(db, process.pid);
}
