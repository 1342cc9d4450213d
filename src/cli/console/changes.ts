/**
 * Live updates: while a page listens on /events (server-sent events), the console looks
 * at what its pages read twice a second — the names, sizes and times of this identity's
 * store files, peers.json, and its relays' connection states — and sends `changed` when
 * any of it moved; the page then fetches itself again (assets.ts). Polling and not
 * fs.watch: it behaves the same on every filesystem and platform, costs a few stat calls
 * per tick, and stops when no page listens.
 *
 * It also sends the pairing messages other sessions of this identity queued (a request
 * made by a session that has since ended), as `pair list` does, and closes requests to
 * identities that became peers meanwhile.
 */
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { identityDir, knownRelaysPath, SESSION_STORES, sessionsPath } from '../../config/layout.js';
import { errnoCode, messageOf } from '../../errors.js';
import { log } from '../../log.js';
import type { ConsoleContext } from './snapshot.js';

const TICK_MS = 500;
const KEEPALIVE_MS = 15_000;
/** Pages listening at once; one person rarely has more than a few tabs. */
const MAX_LISTENERS = 32;
const PAIRING_EVERY_MS = 15_000;
const FLUSH_MS = 5_000;

async function fileMarks(path: string): Promise<string> {
  try {
    const s = await stat(path);
    if (!s.isDirectory()) return `${path}:${s.size}:${s.mtimeMs}`;
    const names = (await readdir(path)).sort();
    const marks = await Promise.all(names.map((n) => stat(join(path, n)).then((e) => `${n}:${e.size}:${e.mtimeMs}`, () => n)));
    return `${path}[${marks.join(',')}]`;
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return `${path}:none`;
    throw err;
  }
}

export class ChangeFeed {
  private readonly listeners = new Set<ServerResponse>();
  private timer: NodeJS.Timeout | undefined;
  private keepalive: NodeJS.Timeout | undefined;
  private readonly pairingTimer: NodeJS.Timeout;
  private last = '';
  private ticking = false;
  private flushing = false;

  constructor(private readonly ctx: ConsoleContext) {
    this.pairingTimer = setInterval(() => this.flushPairing(), PAIRING_EVERY_MS);
    this.pairingTimer.unref();
  }

  /** A page listening for changes; refused past MAX_LISTENERS. */
  subscribe(req: IncomingMessage, res: ServerResponse, headers: Readonly<Record<string, string>>): void {
    if (this.listeners.size >= MAX_LISTENERS) {
      res.writeHead(503, { ...headers, 'Content-Type': 'text/plain; charset=utf-8' });
      return void res.end(`too many console pages listen at once (${MAX_LISTENERS}); close some tabs`);
    }
    res.writeHead(200, { ...headers, 'Content-Type': 'text/event-stream; charset=utf-8', Connection: 'keep-alive' });
    // A change between this page's rendering and its subscription would otherwise wait for the next one.
    res.write(`retry: 2000\n\nevent: changed\ndata: ${Date.now()}\n\n`);
    this.listeners.add(res);
    req.on('close', () => {
      this.listeners.delete(res);
      if (this.listeners.size === 0) this.idle();
    });
    this.timer ??= setInterval(() => void this.tick(), TICK_MS);
    this.keepalive ??= setInterval(() => this.send(': keepalive\n\n'), KEEPALIVE_MS);
  }

  /** Something changed that the files may not show yet (an action ran): tell the pages now. */
  changed(): void {
    this.send(`event: changed\ndata: ${Date.now()}\n\n`);
  }

  /** Sends what every session of this identity queued for the relays (bounded), in the background. */
  flushPairing(): void {
    if (this.flushing) return;
    this.flushing = true;
    const pairing = this.ctx.agent.pairing;
    void (async () => {
      const holders = [pairing, ...(await pairing.otherSessions())];
      await Promise.all(holders.map((p) => p.flush(FLUSH_MS)));
      await Promise.all(holders.map((p) => p.closeMoot()));
    })()
      .catch((err: unknown) => log.warn('console_pairing_flush_failed', { error: messageOf(err) }))
      .finally(() => (this.flushing = false));
  }

  stop(): void {
    clearInterval(this.pairingTimer);
    for (const res of this.listeners) res.end();
    this.listeners.clear();
    this.idle();
  }

  private idle(): void {
    clearInterval(this.timer);
    clearInterval(this.keepalive);
    this.timer = undefined;
    this.keepalive = undefined;
  }

  private send(text: string): void {
    for (const res of this.listeners) res.write(text);
  }

  private async signature(): Promise<string> {
    const { stateDir, peersPath } = this.ctx.config;
    const me = this.ctx.identity.key;
    const paths = [...SESSION_STORES.map((store) => identityDir(stateDir, store, me)), peersPath, sessionsPath(stateDir, me), knownRelaysPath(stateDir)];
    const files = await Promise.all(paths.map(fileMarks));
    const relays = this.ctx.agent.relays.map((r) => `${r.url}:${r.connected}:${r.unreachableSince ?? ''}`);
    return [...files, ...relays].join('\n');
  }

  private async tick(): Promise<void> {
    if (this.ticking) return;
    this.ticking = true;
    try {
      const now = await this.signature();
      if (this.last !== '' && now !== this.last) this.changed();
      this.last = now;
    } catch (err) {
      log.warn('console_watch_failed', { error: messageOf(err) });
    } finally {
      this.ticking = false;
    }
  }
}
