/**
 * The `--metrics` endpoint: plain HTTP on its own address, separate from the relay's, so
 * that the operator can keep it on loopback while the relay faces the network. It
 * answers GET /metrics with the exposition and nothing else (404; 405 for another method
 * on /metrics; 503 while the relay is not ready), and reads no request body.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { errnoCode, InterlinkError, messageOf } from '../errors.js';
import { log } from '../log.js';
import { EXPOSITION_CONTENT_TYPE } from './metrics.js';

export interface MetricsEndpoint {
  /** `http://HOST:PORT/metrics`, with the port actually bound. */
  readonly url: string;
  close(): Promise<void>;
}

function urlHost(host: string): string {
  return host.includes(':') ? `[${host}]` : host;
}

/** The exposition, or undefined while there is none yet; a shared store reads its counts first. */
export type RenderMetrics = () => string | undefined | Promise<string | undefined>;

async function answer(req: IncomingMessage, res: ServerResponse, render: RenderMetrics): Promise<void> {
  const path = (req.url ?? '').split('?')[0];
  const plain = { 'content-type': 'text/plain; charset=utf-8' };
  if (path !== '/metrics') {
    res.writeHead(404, plain).end('not found: the metrics are at /metrics\n');
  } else if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.writeHead(405, { ...plain, allow: 'GET, HEAD' }).end('only GET\n');
  } else {
    let body: string | undefined;
    try {
      body = await render();
    } catch (err) {
      log.error('relay_metrics_failed', { error: messageOf(err) });
      res.writeHead(500, plain).end('the metrics could not be read\n');
      return;
    }
    if (body === undefined) {
      res.writeHead(503, plain).end('the relay is starting\n');
      return;
    }
    res.writeHead(200, { 'content-type': EXPOSITION_CONTENT_TYPE, 'content-length': Buffer.byteLength(body) });
    res.end(req.method === 'HEAD' ? undefined : body);
  }
}

/**
 * Listens on `host:port` (0: a free port); a taken address is one `busy` error naming the
 * flag. `render` gives the exposition, or undefined while there is none yet.
 */
export async function serveMetrics(host: string, port: number, render: RenderMetrics): Promise<MetricsEndpoint> {
  const server = createServer((req, res) => void answer(req, res, render));
  // Scrapers keep connections open between scrapes; a bounded header wait frees dead ones.
  server.headersTimeout = 10_000;
  server.requestTimeout = 10_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  }).catch((err: unknown) => {
    if (errnoCode(err) === 'EADDRINUSE') throw new InterlinkError('busy', `--metrics ${urlHost(host)}:${port}: address in use`);
    throw err;
  });
  server.on('error', (err) => log.error('relay_metrics_error', { error: err.message }));
  const address = server.address();
  const bound = typeof address === 'object' && address !== null ? address.port : port;
  return {
    url: `http://${urlHost(host)}:${bound}/metrics`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
