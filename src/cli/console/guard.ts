/**
 * Who may use the console: the pure decision for every request. The console acts as this
 * machine's identity (it accepts pairings and revokes peers), so a page that anything else
 * can reach — another site in the same browser, a DNS-rebound name, another local user's
 * process — must get nothing from it:
 * - the Host header names the console's own loopback address (a rebound name does not);
 * - the browser holds the console's cookie, given once for the one-time launch token in
 *   the URL the command printed (HttpOnly, SameSite=Strict, named per port because
 *   cookies do not tell ports apart);
 * - an action (POST) comes from the console's own Origin and carries a page token that
 *   only a page the console rendered holds (an HMAC of a per-page nonce under the
 *   console's secret, so any number of pages stay valid without server state).
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

export interface Secrets {
  /** The launch token in the printed URL; good for one exchange. */
  launch: string;
  /** The cookie's value, the browser's standing credential. */
  cookie: string;
  /** The key of page tokens. */
  pages: Buffer;
}

export function newSecrets(): Secrets {
  return { launch: randomBytes(24).toString('base64url'), cookie: randomBytes(32).toString('base64url'), pages: randomBytes(32) };
}

export function cookieName(port: number): string {
  return `interlink_console_${port}`;
}

/** The Host header values that name this console: its loopback address (first: the printed link's) and `localhost`, with its port. */
export function allowedHosts(host: string, port: number): string[] {
  return [host === '::1' ? '[::1]' : host, 'localhost'].map((n) => `${n}:${port}`);
}

export interface ConsoleRequest {
  method: string;
  /** The path with its query. */
  url: string;
  host: string | undefined;
  origin: string | undefined;
  cookies: Readonly<Record<string, string>>;
  /** The page token sent with an action (form field or header). */
  pageToken?: string | undefined;
}

export interface GuardState {
  port: number;
  hosts: readonly string[];
  secrets: Secrets;
  /** Whether the launch token was exchanged already. */
  launched: boolean;
}

export type Verdict =
  | { kind: 'allow' }
  /** The launch token: set the cookie and send the browser to the same page without it. */
  | { kind: 'launch'; location: string }
  | { kind: 'refuse'; status: 400 | 401 | 403 | 405 | 421; reason: string };

function same(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** A page token: a fresh nonce and its HMAC under the console's key. */
export function newPageToken(secrets: Secrets): string {
  const nonce = randomBytes(12).toString('base64url');
  return `${nonce}.${createHmac('sha256', secrets.pages).update(nonce).digest('base64url')}`;
}

export function validPageToken(secrets: Secrets, token: string | undefined): boolean {
  if (token === undefined) return false;
  const [nonce, mac, ...rest] = token.split('.');
  if (nonce === undefined || mac === undefined || rest.length > 0 || nonce.length === 0) return false;
  return same(mac, createHmac('sha256', secrets.pages).update(nonce).digest('base64url'));
}

/** The decision for one request. Pure but for the HMAC. */
export function guard(request: ConsoleRequest, state: GuardState): Verdict {
  if (request.host === undefined || !state.hosts.includes(request.host.toLowerCase())) {
    return { kind: 'refuse', status: 421, reason: `this console answers only to ${state.hosts.join(' or ')}` };
  }
  const method = request.method.toUpperCase();
  if (method !== 'GET' && method !== 'HEAD' && method !== 'POST') return { kind: 'refuse', status: 405, reason: `${method} is not a console request` };
  const url = new URL(request.url, `http://${request.host}`);
  const token = url.searchParams.get('token');
  if (token !== null && method === 'GET') {
    if (state.launched || !same(token, state.secrets.launch)) {
      return { kind: 'refuse', status: 401, reason: 'this link was used already (it works once): run `interlink-mcp console` again for a new one' };
    }
    url.searchParams.delete('token');
    return { kind: 'launch', location: `${url.pathname}${url.search}` };
  }
  const cookie = request.cookies[cookieName(state.port)];
  if (cookie === undefined || !same(cookie, state.secrets.cookie)) {
    return { kind: 'refuse', status: 401, reason: 'open the link `interlink-mcp console` printed (it carries a one-time token) in this browser' };
  }
  if (method === 'POST') {
    // A form POST from a page always carries Origin in the browsers the console supports; none means not a page of ours.
    if (request.origin === undefined || !state.hosts.some((h) => request.origin === `http://${h}`)) {
      return { kind: 'refuse', status: 403, reason: 'an action must come from a console page (the Origin header is missing or another site)' };
    }
    if (!validPageToken(state.secrets, request.pageToken)) {
      return { kind: 'refuse', status: 403, reason: 'the page token is missing or wrong: reload the page and try again' };
    }
  }
  return { kind: 'allow' };
}

/** Cookies from a Cookie header; a malformed pair is skipped. */
export function parseCookies(header: string | undefined): Record<string, string> {
  const cookies = Object.create(null) as Record<string, string>;
  for (const pair of (header ?? '').split(';')) {
    const eq = pair.indexOf('=');
    if (eq <= 0) continue;
    const name = pair.slice(0, eq).trim();
    if (name.length > 0 && !Object.hasOwn(cookies, name)) cookies[name] = pair.slice(eq + 1).trim();
  }
  return cookies;
}
