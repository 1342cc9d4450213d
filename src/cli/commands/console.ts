/**
 * `interlink-mcp console`: the person's web page for this identity (cli/console/). It
 * runs this identity's `cli` session for as long as it is open (as `pair` does for one
 * command), so pairing works from the page and the relays' state is the session's own,
 * and serves the page on a loopback address until Ctrl-C.
 */
import { spawn } from 'node:child_process';
import { isIP } from 'node:net';
import { Agent } from '../../agent/agent.js';
import { keepLocalRelay, relayUrls } from '../../agent/local-relay.js';
import type { Config } from '../../config/env.js';
import { errnoCode, InterlinkError } from '../../errors.js';
import { loadOrCreateIdentity } from '../../identity/identity.js';
import { readClientTls } from '../../wire/tls.js';
import { expectPositionals, parse } from '../args.js';
import { ConsoleServer } from '../console/server.js';
import { presenceInfo } from '../presence-info.js';
import { CLI_SESSION } from './pair.js';
import { parseAddr } from './relay.js';

export const consoleHelp = `usage: interlink-mcp console [--addr HOST:PORT] [--no-open]

A web page for the person behind this identity: its sessions and relays, conversations
with each peer with every message's delivery state updating live, pairing (compare the
code, accept, reject, confirm, revoke) and recovery (failed Codex notices, refused
messages, unsent messages). Serves on 127.0.0.1 (a free port unless --addr names one;
only loopback addresses are taken) and prints a link with a one-time token: the browser
that opens it first gets a cookie, and nothing else can use the page. Opens the link in
a browser when one is there and stdout is a terminal, unless --no-open.
Runs this identity's "cli" session while it is open (as \`pair\` does), so it starts
the zero-config local relay when no INTERLINK_URL is set and none answers. Ctrl-C stops it.`;

function isLoopback(host: string): boolean {
  if (host === 'localhost') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  return isIP(host) === 6 && host === '::1';
}

/** Opens `url` in the person's browser, if there is one to open; never fails the command. */
function openBrowser(url: string): void {
  const command = process.env.BROWSER ?? (process.platform === 'darwin' ? 'open' : process.env.DISPLAY !== undefined || process.env.WAYLAND_DISPLAY !== undefined ? 'xdg-open' : undefined);
  if (command === undefined) return;
  const child = spawn(command, [url], { stdio: 'ignore', detached: true });
  child.on('error', () => undefined);
  child.unref();
}

function stopSignal(): Promise<void> {
  return new Promise((resolve) => {
    process.once('SIGINT', () => resolve());
    process.once('SIGTERM', () => resolve());
  });
}

export async function consoleCommand(argv: readonly string[], config: Config): Promise<void> {
  const args = parse(argv, { addr: { type: 'string' }, 'no-open': { type: 'boolean' } });
  expectPositionals(args, 0, 'interlink-mcp console [--addr HOST:PORT] [--no-open]');
  const { host, port } = parseAddr(typeof args.values.addr === 'string' ? args.values.addr : '127.0.0.1:0');
  if (!isLoopback(host)) throw new InterlinkError('usage', `--addr ${host}: the console serves only on a loopback address (127.0.0.1, ::1, localhost): it acts as this identity`);
  const tls = readClientTls(config.tlsCa);
  const identity = await loadOrCreateIdentity(config.keyPath);
  const agent = await Agent.start({ identity, session: CLI_SESSION, stateDir: config.stateDir, peersPath: config.peersPath, relayUrls: await relayUrls(config), presence: presenceInfo(config.name), ...(tls !== undefined && { tls }) });
  keepLocalRelay(config, agent.relays);
  let server: ConsoleServer;
  try {
    server = await ConsoleServer.start({ host: host === 'localhost' ? '127.0.0.1' : host, port, ctx: { config, identity, agent } });
  } catch (err) {
    await agent.close({ goodbye: false });
    if (errnoCode(err) === 'EADDRINUSE') throw new InterlinkError('busy', `--addr ${host}:${port} is in use; pick another port or leave --addr out for a free one`);
    throw err;
  }
  process.stdout.write(`Interlink console for ${identity.fingerprint}: open\n  ${server.url}\nThe link works once, in one browser. Ctrl-C stops the console.\n`);
  if (args.values['no-open'] !== true && process.stdout.isTTY === true) openBrowser(server.url);
  await stopSignal();
  await server.close();
  await agent.close({ goodbye: false });
}
