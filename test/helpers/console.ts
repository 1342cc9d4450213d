/**
 * `interlink-mcp console` processes and the browser that drives them: Debian's Chromium
 * through playwright-core (no browser is downloaded; `.ci/run` installs the `chromium`
 * package). Where no Chromium is installed the browser tests are skipped with a warning,
 * except in CI, where they fail.
 */
import { existsSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { MAIN } from './mcp.js';
import { spawnNode, type Child } from './process.js';

const CANDIDATES = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'];

/** The Chromium to drive, or undefined where there is none (see above). */
export function chromiumPath(): string | undefined {
  return CANDIDATES.find((p): p is string => p !== undefined && existsSync(p));
}

export interface ConsoleProcess {
  child: Child;
  /** The printed link with its one-time token. */
  url: string;
  /** `http://127.0.0.1:PORT` */
  origin: string;
  port: number;
}

/** A console for the identity whose roots are `<root>/<name>/{config,state}` (as test/helpers/mcp.ts lays out a peer). */
export async function startConsole(root: string, name: string, relays: string, env: NodeJS.ProcessEnv = {}): Promise<ConsoleProcess> {
  const child = spawnNode(MAIN, ['console', '--no-open'], {
    HOME: join(root, name),
    INTERLINK_CONFIG_DIR: join(root, name, 'config'),
    INTERLINK_STATE_DIR: join(root, name, 'state'),
    INTERLINK_URL: relays,
    INTERLINK_NAME: name,
    INTERLINK_LOG: 'warn',
    ...env,
  });
  await child.waitForLines(2, 20_000);
  const url = /http:\/\/127\.0\.0\.1:(\d+)\/\?token=[A-Za-z0-9_-]+/.exec(child.lines.join('\n'));
  if (url === null) throw new Error(`no console link in: ${child.lines.join(' | ')}; stderr: ${child.stderr()}`);
  return { child, url: url[0], origin: `http://127.0.0.1:${url[1]}`, port: Number(url[1]) };
}

export interface RawResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** One HTTP request with exactly the headers given (a browser would not let a page set Host or Origin). */
export function rawRequest(port: number, options: { method?: string; path?: string; headers?: Record<string, string>; body?: string }): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method: options.method ?? 'GET', path: options.path ?? '/', headers: options.headers ?? {}, setHost: false }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end(options.body);
  });
}
