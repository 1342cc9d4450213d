/**
 * The HTTP(S) server the relay's WebSocket upgrades arrive on: bound before anything else
 * opens (so a taken address fails at once), answering a request that is not an upgrade
 * with 426, and an upgrade the relay will not take with 503 and a line saying why.
 */
import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { log } from '../log.js';
import type { ServerTls } from '../wire/tls.js';

export function listen(server: HttpServer, host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error) => {
      server.off('listening', onListening);
      reject(err);
    };
    const onListening = () => {
      server.off('error', onError);
      resolve();
    };
    server.once('error', onError);
    server.once('listening', onListening);
    server.listen(port, host);
  });
}

/** The host as a URL writes it: an IPv6 address in brackets. */
export function hostForUrl(host: string): string {
  return host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
}

/** The 503 that answers an upgrade the relay will not take, with a line saying why. */
export function refusalResponse(message: string): string {
  const body = `interlink relay: ${message}\n`;
  return `HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;
}

/** Answers an upgrade the relay will not take with a 503 and a line saying why, then closes. */
export function refuseUpgrade(socket: Duplex, message: string): void {
  socket.end(refusalResponse(message), () => socket.destroy());
}

/**
 * How long a socket may take to ask for the WebSocket upgrade (its TLS handshake included):
 * a socket that never speaks is counted by no connection cap (those count upgrades), so
 * without a deadline a few thousand of them would hold the relay's open files for good.
 */
export const DEFAULT_UPGRADE_WITHIN_MS = 10_000;

/** The server the WebSocket upgrades arrive on: https with `tls` (the relay terminates TLS itself), else http. */
export function httpServer(tls: ServerTls | undefined, upgradeWithinMs = DEFAULT_UPGRADE_WITHIN_MS): HttpServer {
  const notWebSocket = (_req: IncomingMessage, res: ServerResponse) => {
    res.writeHead(426, { 'content-type': 'text/plain' }).end('interlink relay: connect with WebSocket\n');
  };
  if (tls === undefined) return closingUnupgraded(createServer(notWebSocket), 'connection', upgradeWithinMs);
  // The TLS handshake has the same deadline; the upgrade's runs from the handshake's end.
  const server = createHttpsServer({ ...tls, handshakeTimeout: upgradeWithinMs }, notWebSocket);
  // A client that does not trust the certificate breaks off the handshake: its business, not an error here.
  server.on('tlsClientError', (err) => log.debug('relay_tls_refused', { error: err.message }));
  return closingUnupgraded(server, 'secureConnection', upgradeWithinMs);
}

/** The deadline of each socket that has not asked for the upgrade yet. */
const deadlines = new WeakMap<Duplex, NodeJS.Timeout>();

/**
 * The relay's upgrade handler calls this first: the socket asked in time. Not a second
 * 'upgrade' listener here: with one registered before the relay's own (the relay binds
 * before its store opens), Node would hand an early upgrade to it, and that socket would
 * hang unanswered instead of being closed.
 */
export function upgradeAsked(socket: Duplex): void {
  clearTimeout(deadlines.get(socket));
  deadlines.delete(socket);
}

/** Destroys each socket (from `event`) that has not asked for an upgrade within `ms`. */
function closingUnupgraded(server: HttpServer, event: 'connection' | 'secureConnection', ms: number): HttpServer {
  server.on(event, (socket: Socket) => {
    const timer = setTimeout(() => {
      log.debug('relay_socket_idle', { message: `a socket did not ask for the WebSocket upgrade within ${ms} ms: closed` });
      socket.destroy();
    }, ms);
    timer.unref();
    deadlines.set(socket, timer);
    socket.once('close', () => clearTimeout(timer));
  });
  return server;
}
