/**
 * The HTTP(S) server the relay's WebSocket upgrades arrive on: bound before anything else
 * opens (so a taken address fails at once), answering a request that is not an upgrade
 * with 426, and an upgrade the relay will not take with 503 and a line saying why.
 */
import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
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

/** Answers an upgrade the relay will not take with a 503 and a line saying why, then closes. */
export function refuseUpgrade(socket: Duplex, message: string): void {
  const body = `interlink relay: ${message}\n`;
  const head = `HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n`;
  socket.end(head + body, () => socket.destroy());
}

/** The server the WebSocket upgrades arrive on: https with `tls` (the relay terminates TLS itself), else http. */
export function httpServer(tls: ServerTls | undefined): HttpServer {
  const notWebSocket = (_req: IncomingMessage, res: ServerResponse) => {
    res.writeHead(426, { 'content-type': 'text/plain' }).end('interlink relay: connect with WebSocket\n');
  };
  if (tls === undefined) return createServer(notWebSocket);
  const server = createHttpsServer(tls, notWebSocket);
  // A client that does not trust the certificate breaks off the handshake: its business, not an error here.
  server.on('tlsClientError', (err) => log.debug('relay_tls_refused', { error: err.message }));
  return server;
}
