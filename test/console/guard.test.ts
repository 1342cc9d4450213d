/**
 * Who may use the console (src/cli/console/guard.ts), decided for every combination of
 * what a request carries: only a request to the console's own Host, with its cookie, and
 * for an action its Origin and a page token it rendered, is allowed; the one-time link
 * works once.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { allowedHosts, cookieName, guard, newPageToken, newSecrets, parseCookies, validPageToken, type ConsoleRequest, type GuardState } from '../../src/cli/console/guard.js';

const PORT = 41234;

function state(launched = true): GuardState {
  return { port: PORT, hosts: allowedHosts('127.0.0.1', PORT), secrets: newSecrets(), launched };
}

describe('guard, every combination', () => {
  const s = state();
  const other = newSecrets();
  const hosts = { own: `127.0.0.1:${PORT}`, localhost: `localhost:${PORT}`, upper: `LOCALHOST:${PORT}`, otherPort: `127.0.0.1:${PORT + 1}`, rebound: `evil.example:${PORT}`, missing: undefined };
  const cookies = { own: s.secrets.cookie, other: other.cookie, missing: undefined };
  const origins = { own: `http://127.0.0.1:${PORT}`, localhost: `http://localhost:${PORT}`, other: 'http://evil.example', null: 'null', https: `https://127.0.0.1:${PORT}`, missing: undefined };
  const tokens = { own: newPageToken(s.secrets), forged: newPageToken(other), garbled: 'x.y', missing: undefined };
  const methods = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE'];

  it('allows exactly the requests with the Host, the cookie and, for an action, the Origin and a page token', () => {
    let allowed = 0;
    for (const [hostKind, host] of Object.entries(hosts))
      for (const [cookieKind, cookie] of Object.entries(cookies))
        for (const [originKind, origin] of Object.entries(origins))
          for (const [tokenKind, pageToken] of Object.entries(tokens))
            for (const method of methods) {
              const request: ConsoleRequest = { method, url: '/pairing', host, origin, cookies: cookie === undefined ? {} : { [cookieName(PORT)]: cookie }, pageToken };
              const verdict = guard(request, s);
              const hostOk = ['own', 'localhost', 'upper'].includes(hostKind);
              const actionOk = method !== 'POST' || (['own', 'localhost'].includes(originKind) && tokenKind === 'own');
              const expected = hostOk && ['GET', 'HEAD', 'POST'].includes(method) && cookieKind === 'own' && actionOk;
              expect(verdict.kind, JSON.stringify({ hostKind, cookieKind, originKind, tokenKind, method })).toBe(expected ? 'allow' : 'refuse');
              if (!hostOk) expect(verdict).toMatchObject({ status: 421 });
              if (expected) allowed++;
            }
    expect(allowed).toBeGreaterThan(0);
  });

  it('refuses with the status that says why', () => {
    const base = { method: 'GET', url: '/', host: `127.0.0.1:${PORT}`, origin: undefined, cookies: { [cookieName(PORT)]: s.secrets.cookie } };
    expect(guard({ ...base, cookies: {} }, s)).toMatchObject({ kind: 'refuse', status: 401 });
    expect(guard({ ...base, method: 'PUT' }, s)).toMatchObject({ kind: 'refuse', status: 405 });
    expect(guard({ ...base, method: 'POST', origin: 'http://evil.example', pageToken: tokens.own }, s)).toMatchObject({ kind: 'refuse', status: 403 });
    expect(guard({ ...base, method: 'POST', origin: origins.own, pageToken: tokens.forged }, s)).toMatchObject({ kind: 'refuse', status: 403 });
  });

  it("does not take another port's cookie: cookies do not tell ports apart, their names do", () => {
    const request = { method: 'GET', url: '/', host: `127.0.0.1:${PORT}`, origin: undefined, cookies: { [cookieName(PORT + 1)]: s.secrets.cookie } };
    expect(guard(request, s)).toMatchObject({ kind: 'refuse', status: 401 });
  });
});

describe('the one-time link', () => {
  it('is exchanged once, keeping the rest of the address, and refused after', () => {
    const s = state(false);
    const request = { method: 'GET', url: `/conversations/bob?token=${s.secrets.launch}&x=1`, host: `127.0.0.1:${PORT}`, origin: undefined, cookies: {} };
    expect(guard(request, s)).toEqual({ kind: 'launch', location: '/conversations/bob?x=1' });
    s.launched = true;
    expect(guard(request, s)).toMatchObject({ kind: 'refuse', status: 401 });
  });

  it('refuses a wrong token, and a token on an action', () => {
    const s = state(false);
    expect(guard({ method: 'GET', url: '/?token=nope', host: `127.0.0.1:${PORT}`, origin: undefined, cookies: {} }, s)).toMatchObject({ kind: 'refuse', status: 401 });
    expect(guard({ method: 'POST', url: `/pairing/reject?token=${s.secrets.launch}`, host: `127.0.0.1:${PORT}`, origin: `http://127.0.0.1:${PORT}`, cookies: {} }, s)).toMatchObject({ kind: 'refuse', status: 401 });
    expect(s.launched).toBe(false);
  });
});

describe('page tokens', () => {
  it('are accepted only as the console made them', () => {
    const secrets = newSecrets();
    const token = newPageToken(secrets);
    expect(validPageToken(secrets, token)).toBe(true);
    expect(newPageToken(secrets)).not.toBe(token);
    fc.assert(
      fc.property(fc.string({ maxLength: 120 }), (text) => {
        expect(validPageToken(secrets, text)).toBe(false);
        expect(validPageToken(secrets, `${text}.${token.split('.')[1]}`)).toBe(text === token.split('.')[0]);
      }),
    );
  });
});

describe('parseCookies', () => {
  it('reads pairs, keeps the first of a name, and makes no prototype key', () => {
    const cookies = parseCookies('a=1; __proto__=x; b = 2 ; a=3; junk; =v; constructor=y');
    expect(Object.entries(cookies)).toEqual([['a', '1'], ['__proto__', 'x'], ['b', '2'], ['constructor', 'y']]);
    expect(Object.getPrototypeOf(cookies)).toBe(null);
    fc.assert(
      fc.property(fc.string(), (header) => {
        expect(Object.getPrototypeOf(parseCookies(header))).toBe(null);
      }),
    );
  });
});

describe('allowedHosts', () => {
  it('names the address and localhost with the port', () => {
    expect(allowedHosts('127.0.0.1', 80)).toEqual(['127.0.0.1:80', 'localhost:80']);
    expect(allowedHosts('::1', 80)).toEqual(['[::1]:80', 'localhost:80']);
  });
});
