/**
 * The console's HTTP server, on `node:http`: a handful of server-rendered pages, two
 * assets, one event stream and the actions, for one person on this machine. Every request
 * passes guard.ts first; every response carries a strict Content-Security-Policy and
 * nothing is cached. Actions follow post/redirect/get: the result is a notice on the page
 * the action belongs to, so reloading never repeats an action.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { isInterlinkError, messageOf } from '../../errors.js';
import { log } from '../../log.js';
import { isActionPath, runAction } from './actions.js';
import { ASSETS } from './assets.js';
import { ChangeFeed } from './changes.js';
import { allowedHosts, cookieName, guard, newPageToken, newSecrets, parseCookies, type GuardState } from './guard.js';
import { documentText, html } from './html.js';
import { page, type Frame } from './layout.js';
import type { ConsoleContext } from './snapshot.js';
import { viewAt } from './views.js';

const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
const HEADERS = {
  'Content-Security-Policy': CSP,
  'X-Content-Type-Options': 'nosniff',
  'X-Frame-Options': 'DENY',
  // Not no-referrer: with it browsers send `Origin: null` on a form post, and guard.ts checks the Origin.
  'Referrer-Policy': 'same-origin',
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Resource-Policy': 'same-origin',
  'Cache-Control': 'no-store',
} as const;
/** A form is a few fields; anything longer is not one of ours. */
const MAX_FORM_BYTES = 16 * 1024;
/** Notices of recent actions kept for their pages (each page shows its own). */
const MAX_FLASHES = 64;

export interface ConsoleServerOptions {
  host: string;
  port: number;
  ctx: ConsoleContext;
}

type Flash = NonNullable<Frame['flash']>;

export class ConsoleServer {
  private readonly flashes = new Map<string, Flash>();
  private flashCount = 0;

  private constructor(
    private readonly server: Server,
    private readonly guardState: GuardState,
    private readonly ctx: ConsoleContext,
    private readonly changes: ChangeFeed,
  ) {}

  static async start(options: ConsoleServerOptions): Promise<ConsoleServer> {
    const server = createServer();
    // Slow or idle clients are let go: this is a local page, a request is small.
    server.headersTimeout = 10_000;
    server.requestTimeout = 15_000;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port, options.host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    const { port } = server.address() as AddressInfo;
    const state: GuardState = { port, hosts: allowedHosts(options.host, port), secrets: newSecrets(), launched: false };
    const instance = new ConsoleServer(server, state, options.ctx, new ChangeFeed(options.ctx));
    server.on('request', (req, res) => void instance.handle(req, res));
    return instance;
  }

  /** The URL a person opens: the one-time launch token in it. */
  get url(): string {
    return `http://${this.guardState.hosts[0]}/?token=${this.guardState.secrets.launch}`;
  }

  get port(): number {
    return this.guardState.port;
  }

  async close(): Promise<void> {
    this.changes.stop();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      const method = req.method ?? 'GET';
      const form = method === 'POST' ? await readForm(req) : undefined;
      const verdict = guard(
        { method, url: req.url ?? '/', host: req.headers.host, origin: req.headers.origin, cookies: parseCookies(req.headers.cookie), pageToken: form?.get('page_token') ?? undefined },
        this.guardState,
      );
      if (verdict.kind === 'refuse') return this.refuse(res, verdict.status, verdict.reason);
      if (verdict.kind === 'launch') {
        this.guardState.launched = true;
        res.writeHead(303, { ...HEADERS, Location: verdict.location, 'Set-Cookie': `${cookieName(this.port)}=${this.guardState.secrets.cookie}; HttpOnly; SameSite=Strict; Path=/` });
        return void res.end();
      }
      const url = new URL(req.url ?? '/', 'http://console');
      if (method === 'POST') return await this.act(res, url, form!);
      const asset = ASSETS.get(url.pathname);
      if (asset !== undefined) {
        res.writeHead(200, { ...HEADERS, 'Content-Type': asset.type, ETag: asset.etag });
        return void res.end(method === 'HEAD' ? undefined : asset.body);
      }
      if (url.pathname === '/events') return this.changes.subscribe(req, res, HEADERS);
      await this.render(res, url, method);
    } catch (err) {
      if (err instanceof FormError) return this.refuse(res, err.status, err.message);
      log.error('console_request_failed', { url: req.url, error: messageOf(err) });
      if (!res.headersSent) this.refuse(res, 500, `the console could not answer: ${messageOf(err)}`);
      else res.destroy();
    }
  }

  private async render(res: ServerResponse, url: URL, method: string): Promise<void> {
    const view = await viewAt(this.ctx, url);
    if (view === undefined) return this.refuse(res, 404, `nothing here: ${url.pathname}`);
    const flash = this.flashes.get(url.searchParams.get('flash') ?? '');
    const frame: Frame = { path: url.pathname, title: view.title, fingerprint: this.ctx.identity.fingerprint, pageToken: newPageToken(this.guardState.secrets), ...(flash !== undefined && { flash }) };
    res.writeHead(200, { ...HEADERS, 'Content-Type': 'text/html; charset=utf-8' });
    res.end(method === 'HEAD' ? undefined : documentText(page(frame, view.body(frame))));
  }

  private async act(res: ServerResponse, url: URL, form: URLSearchParams): Promise<void> {
    if (!isActionPath(url.pathname)) return this.refuse(res, 404, `no action ${url.pathname}`);
    let flash: Flash;
    let back = url.pathname.startsWith('/recovery') ? '/recovery' : '/pairing';
    try {
      const done = await runAction(this.ctx, url.pathname, form, { pairing: () => this.changes.flushPairing() });
      flash = { kind: done.ok ? 'done' : 'failed', text: done.text };
      back = done.back;
      log.info('console_action', { action: url.pathname, ok: done.ok });
    } catch (err) {
      if (!isInterlinkError(err)) throw err;
      flash = { kind: 'failed', text: err.message };
      log.info('console_action_refused', { action: url.pathname, code: err.code });
    }
    const id = String(++this.flashCount);
    this.flashes.set(id, flash);
    for (const old of this.flashes.keys()) if (this.flashes.size > MAX_FLASHES) this.flashes.delete(old);
    this.changes.changed();
    res.writeHead(303, { ...HEADERS, Location: `${back}?flash=${id}` });
    res.end();
  }

  private refuse(res: ServerResponse, status: number, reason: string): void {
    const body = html`<html lang="en"><head><meta charset="utf-8"><title>Interlink console</title><link rel="stylesheet" href="/assets/console.css"></head><body><main id="main"><h1>Not allowed</h1><p class="flash failed" role="alert">${reason}</p></main></body></html>`;
    res.writeHead(status, { ...HEADERS, 'Content-Type': 'text/html; charset=utf-8' });
    res.end(documentText(body));
  }
}

class FormError extends Error {
  constructor(
    readonly status: 400 | 413 | 415,
    message: string,
  ) {
    super(message);
  }
}

/** A posted form, bounded in size; anything but a URL-encoded form is refused. */
async function readForm(req: IncomingMessage): Promise<URLSearchParams> {
  const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== 'application/x-www-form-urlencoded') {
    req.resume();
    throw new FormError(415, 'an action is a form post (application/x-www-form-urlencoded)');
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_FORM_BYTES) throw new FormError(413, 'the form is larger than any console form');
    chunks.push(chunk as Buffer);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}
