/**
 * Zero-config local mode: with no INTERLINK_URL and no relay answering on
 * ws://127.0.0.1:9440, start a detached durable relay under the state root, so sessions
 * on one machine work with no setup. Two servers starting at once both try; the port is
 * the lock — the second relay cannot bind and exits, and both servers use the first.
 * While sessions run, they start it again when it is gone (killed, crashed), by the same
 * race — unless a person stopped it with `relay stop`, which leaves a marker.
 */
import { spawn } from 'node:child_process';
import { constants, openSync } from 'node:fs';
import type { Config } from '../config/env.js';
import { makePrivateDirSync, NO_FOLLOW, PRIVATE_FILE } from '../store/private.js';
import { existsSync, rmSync } from 'node:fs';
import { localRelayDir, localRelayLogPath, relayStopMarker } from '../config/layout.js';
import type { RelayClient } from '../link/client.js';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { log } from '../log.js';
import { connectError } from '../link/reach.js';
import { trustOptions, type ClientTls } from '../wire/tls.js';
import { messageOf } from '../errors.js';

export type Probe = { url: string; answers: true } | { url: string; answers: false; error: string };

/** Whether a relay answers at `url` (it greets every connection with a challenge), and if not, why. */
export function probeRelay(url: string, timeoutMs = 1_000, tls?: ClientTls): Promise<Probe> {
  return new Promise((resolve) => {
    let socket: WebSocket;
    try {
      socket = new WebSocket(url, { handshakeTimeout: timeoutMs, ...trustOptions(tls) });
    } catch (err) {
      return resolve({ url, answers: false, error: messageOf(err) });
    }
    const timer = setTimeout(() => finish(`no answer within ${timeoutMs} ms`), timeoutMs);
    const finish = (error?: string) => {
      clearTimeout(timer);
      socket.removeAllListeners('message');
      socket.on('error', () => undefined);
      socket.terminate();
      resolve(error === undefined ? { url, answers: true } : { url, answers: false, error });
    };
    socket.on('error', (err) => finish(connectError(err)));
    socket.on('message', () => finish());
  });
}

export async function relayAnswers(url: string, timeoutMs = 1_000): Promise<boolean> {
  return (await probeRelay(url, timeoutMs)).answers;
}

type LocalRelayConfig = Pick<Config, 'relays' | 'localRelay' | 'stateDir' | 'log'>;

function startDetachedRelay(stateDir: string, addr: string, logSetting: Config['log']): void {
  const dir = localRelayDir(stateDir);
  makePrivateDirSync(dir);
  const logFd = openSync(localRelayLogPath(stateDir), constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | NO_FOLLOW, PRIVATE_FILE);
  const main = fileURLToPath(new URL('../cli/main.js', import.meta.url));
  const child = spawn(process.execPath, [main, 'relay', '--addr', addr, '--db', dir], {
    detached: true,
    stdio: ['ignore', logFd, logFd],
    // relay.log only grows: the zero-config relay keeps the quiet default of the other
    // commands (warnings) instead of the info level an operator's relay logs at.
    env: { ...process.env, INTERLINK_LOG: logSetting ?? 'warn' },
  });
  child.unref();
  log.info('local_relay_started', { pid: child.pid, db: dir });
}

/** The relays to use; starts the local one first when nothing is configured or running. */
export async function relayUrls(config: LocalRelayConfig, deadlineMs = 5_000): Promise<string[]> {
  if (config.relays !== undefined) return [...config.relays];
  const { localRelay: addr, stateDir } = config;
  const url = `ws://${addr}`;
  if (await relayAnswers(url, 500)) return [url];
  // A session that starts wants the relay, whoever stopped it before.
  rmSync(relayStopMarker(localRelayDir(stateDir)), { force: true });
  startDetachedRelay(stateDir, addr, config.log);
  const deadline = Date.now() + deadlineMs;
  while (Date.now() < deadline) {
    if (await relayAnswers(url, 500)) return [url];
    await new Promise((r) => setTimeout(r, 50));
  }
  log.warn('local_relay_not_answering', { url, hint: `see ${localRelayLogPath(stateDir)}` });
  return [url];
}

/** How often a session looks again while the zero-config relay stays gone. */
const RESTART_EVERY_MS = 10_000;

/**
 * Keeps the zero-config relay running for these relay clients: when the client of the
 * local relay finds it gone, the relay is started again (the port decides between
 * sessions that try at once), and again every RESTART_EVERY_MS while the outage lasts —
 * not when a person stopped it (`relay stop`'s marker). Nothing to do when relays are
 * configured.
 */
export function keepLocalRelay(config: LocalRelayConfig, relays: readonly RelayClient[]): void {
  if (config.relays !== undefined) return;
  const url = `ws://${config.localRelay}`;
  const client = relays.find((r) => r.url === url);
  if (client === undefined) return;
  let timer: NodeJS.Timeout | undefined;
  const attempt = async (): Promise<void> => {
    timer = undefined;
    if (client.unreachable === undefined || client.stopped) return;
    const stoppedByPerson = () => existsSync(relayStopMarker(localRelayDir(config.stateDir)));
    if (stoppedByPerson()) return;
    // Looked at again after the probe: `relay stop` may have marked and stopped it meanwhile.
    if (!(await relayAnswers(url, 500)) && !stoppedByPerson()) {
      log.warn('local_relay_restarting', { url, error: client.unreachable, message: `the local relay on ${url} is gone; starting it again` });
      startDetachedRelay(config.stateDir, config.localRelay, config.log);
    }
    timer = setTimeout(() => void attempt(), RESTART_EVERY_MS);
    timer.unref();
  };
  client.on('unreachable', () => {
    if (timer === undefined) void attempt();
  });
}
