/**
 * The relay's own key (issue 13, point 4): kept under --db across restarts, named by every
 * auth proof, pinned in a relay URL or recorded on first use, with a changed key refused
 * until a person forgets the old one. Real relays and the real client, on loopback.
 */
import { readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { knownRelaysPath, relayKeyFile } from '../../src/config/layout.js';
import { parseRelayUrl } from '../../src/config/relay-url.js';
import { loadConfig } from '../../src/config/env.js';
import { RelayClient } from '../../src/link/client.js';
import { keyRefusalSentence } from '../../src/link/key-refusal.js';
import { decideRelayKey, forgetRelay, KnownRelays, readKnownRelays } from '../../src/link/known-relays.js';
import { freshRelayKey, loadOrCreateRelayKey } from '../../src/relay/relay-key.js';
import type { RelayServer } from '../../src/relay/server.js';
import { sharedStore, startTestRelay } from '../helpers/relay-store.js';
import { signAuth } from '../../src/wire/auth.js';
import { captureStderr, throwsWith } from '../helpers/assert.js';
import { tempDir } from '../helpers/fixtures.js';
import { freePort } from '../helpers/spawn-relay.js';
import { newReader, TestClient, until } from '../helpers/relay-test-client.js';

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  vi.restoreAllMocks();
  for (const step of cleanup.splice(0).reverse()) await step();
});

async function relay(options: { port?: number; dbDir?: string } = {}): Promise<RelayServer> {
  const server = await startTestRelay({ port: options.port ?? 0, ...(options.dbDir !== undefined && { dbDir: options.dbDir }) });
  cleanup.push(() => server.close());
  return server;
}

async function dir(): Promise<string> {
  const d = await tempDir('interlink-relay-key-');
  cleanup.push(d.remove);
  return d.path;
}

function client(url: string, trust?: KnownRelays): RelayClient {
  const reader = newReader();
  const c = new RelayClient({ url, key: reader.key, routes: [reader.route], ...(trust !== undefined && { trust }) });
  cleanup.push(() => c.close());
  c.start();
  return c;
}

describe("the relay's key", () => {
  // The key file of --db (on PostgreSQL the key is kept in the database: relay-postgres.test.ts).
  it.skipIf(sharedStore)('persists across a restart with --db, in a private file; in memory it is new at every start', async () => {
    const db = await dir();
    const first = await relay({ dbDir: db });
    const key = first.key;
    await first.close();
    expect((await relay({ dbDir: db })).key).toBe(key);
    expect((await stat(relayKeyFile(db))).mode & 0o777).toBe(0o600);
    expect(JSON.parse(await readFile(relayKeyFile(db), 'utf8'))).toMatchObject({ format: 'interlink-relay-key', version: 1, key });
    expect((await relay()).key).not.toBe((await relay()).key);
  });

  it('refuses to start on a damaged key file rather than make a new key', async () => {
    const path = join(await dir(), 'relay-key.json');
    const { key } = await loadOrCreateRelayKey(path);
    expect((await loadOrCreateRelayKey(path)).key).toBe(key);
    await writeFile(path, JSON.stringify({ format: 'interlink-relay-key', version: 1, seed: 'x', key }));
    await expect(loadOrCreateRelayKey(path)).rejects.toThrow(/is not replaced/);
  });

  it('challenges with its key, and refuses a proof made for another relay and the old proof', async () => {
    const server = await relay();
    const conn = await TestClient.connect(server.url);
    cleanup.push(() => conn.close());
    expect(conn.relayKey).toBe(server.key);
    const reader = newReader();
    const forOther = await conn.auth(reader, reader.key, freshRelayKey().key);
    expect(forOther).toMatchObject({ type: 'refused', code: 'auth_failed' });
    expect(JSON.stringify(forOther)).toContain('made for another relay');
    // An auth without `relay` is the old proof, which named no relay: refused, saying so.
    const from = conn.frames.length;
    conn.frame({ type: 'auth', route: reader.route, sig: signAuth(reader.key, server.key, conn.nonce, reader.route) });
    const old = await conn.waitFor('refusal', (f) => f.type === 'refused', from);
    expect(JSON.stringify(old)).toContain('interlink-relay-auth-v1');
    expect(await conn.auth(reader)).toMatchObject({ type: 'auth_ok', route: reader.route });
  });

  it('answers one hello per connection', async () => {
    const server = await relay();
    const conn = await TestClient.connect(server.url);
    cleanup.push(() => conn.close());
    conn.frame({ type: 'hello', nonce: freshRelayKey().key });
    expect(await conn.waitFor('refusal', (f) => f.type === 'refused')).toMatchObject({ code: 'bad_frame' });
  });
});

describe('pins in INTERLINK_URL', () => {
  it('parses #key= and refuses any other fragment or a key that is not one', () => {
    const key = freshRelayKey().key;
    expect(parseRelayUrl(`wss://relay.example:9440#key=${key}`)).toEqual({ endpoint: { url: 'wss://relay.example:9440', pin: key } });
    expect(parseRelayUrl('ws://127.0.0.1:9440')).toEqual({ endpoint: { url: 'ws://127.0.0.1:9440', pin: undefined } });
    expect(parseRelayUrl('ws://h:1#fp=abc')).toMatchObject({ error: expect.stringContaining('#key=') });
    expect(parseRelayUrl('ws://h:1#key=abc')).toMatchObject({ error: expect.stringContaining('43 characters') });
    throwsWith(() => loadConfig({ INTERLINK_URL: `ws://a:1#key=${key}, ws://b:2#key=nope` }), 'bad_config');
    expect(loadConfig({ INTERLINK_URL: `ws://a:1#key=${key}` }).relays).toEqual([`ws://a:1#key=${key}`]);
  });

  it('a relay that is not the pinned one is never authenticated, and is told nothing', async () => {
    const server = await relay();
    const stderr = captureStderr();
    const c = client(`${server.url}#key=${freshRelayKey().key}`);
    expect(await c.ready(10_000, { failFast: true })).toBe(false);
    await until('the refusal', () => c.untrusted);
    expect(c.untrusted).toMatchObject({ reason: 'not_pinned_key', url: server.url, key: server.key });
    expect(c.connected).toBe(false);
    expect(stderr.join('')).toContain('relay_key_refused');
    expect((await c.send('x#y', {})).accepted).toBe(false);

    const pinned = client(`${server.url}#key=${server.key}`);
    expect(await pinned.ready(10_000)).toBe(true);
    expect(pinned.url).toBe(server.url);
  });
});

describe('trust on first use', () => {
  it('records the key per URL, refuses and warns when it changes, and trusts the new key once a person forgets the old', async () => {
    const state = await dir();
    const port = await freePort();
    const first = await relay({ port });
    const url = first.url;
    const trust = new KnownRelays(knownRelaysPath(state), [url]);
    const stderr = captureStderr();
    const c = client(url, trust);
    expect(await c.ready(10_000)).toBe(true);
    expect((await readKnownRelays(knownRelaysPath(state))).relays[url]).toMatchObject({ key: first.key });

    // The relay restarts without its key: a new one on the same URL.
    await first.close();
    const second = await relay({ port });
    await until('the refusal', () => c.untrusted, 15_000);
    expect(c.untrusted).toEqual({ reason: 'key_changed', url, key: second.key, recorded: first.key, since: expect.any(Number) });
    expect(c.trouble).toEqual({ kind: 'untrusted', refusal: c.untrusted });
    expect(stderr.join('')).toContain('relay_key_refused');
    const known = await readKnownRelays(knownRelaysPath(state));
    expect(known.relays[url]?.key).toBe(first.key);
    expect(known.refused[url]).toMatchObject({ key: second.key, message: keyRefusalSentence(c.untrusted!) });

    expect(await forgetRelay(knownRelaysPath(state), url)).toBe(true);
    expect(await c.ready(20_000)).toBe(true);
    const after = await readKnownRelays(knownRelaysPath(state));
    expect(after.relays[url]?.key).toBe(second.key);
    expect(after.refused[url]).toBeUndefined();
  });

  it('refuses a key that another listed URL pins or has recorded, and keeps it for that URL', () => {
    const honest = freshRelayKey().key;
    const a = { url: 'ws://a:1', pin: undefined };
    const b = { url: 'ws://b:2', pin: undefined };
    const recorded = { 'ws://a:1': { key: honest, first_seen: 0 } };
    expect(decideRelayKey(b, honest, [a, b], recorded)).toEqual({ trusted: false, refusal: { reason: 'other_relays_key', url: 'ws://b:2', key: honest, claimant: 'ws://a:1' } });
    expect(decideRelayKey(a, honest, [a, b], recorded)).toEqual({ trusted: true, firstUse: false });
    const pinned = { url: 'ws://a:1', pin: honest };
    expect(decideRelayKey(b, honest, [pinned, b], {})).toMatchObject({ trusted: false });
    expect(decideRelayKey(pinned, honest, [pinned, b], { 'ws://b:2': { key: honest, first_seen: 0 } })).toEqual({ trusted: true, firstUse: false });
    expect(decideRelayKey(b, freshRelayKey().key, [a, b], recorded)).toEqual({ trusted: true, firstUse: true });
  });

  it('trusts one key on several URLs that a person pinned it on (one relay at several addresses), and refuses it on an unpinned one beside them', () => {
    const shared = freshRelayKey().key;
    const a = { url: 'ws://a:1', pin: shared };
    const b = { url: 'ws://b:2', pin: shared };
    const c = { url: 'ws://c:3', pin: undefined };
    expect(decideRelayKey(a, shared, [a, b, c], {})).toEqual({ trusted: true, firstUse: false });
    expect(decideRelayKey(b, shared, [a, b, c], { 'ws://a:1': { key: shared, first_seen: 0 } })).toEqual({ trusted: true, firstUse: false });
    const refused = decideRelayKey(c, shared, [a, b, c], {});
    expect(refused).toMatchObject({ trusted: false, refusal: { reason: 'other_relays_key' } });
    expect(refused.trusted ? '' : keyRefusalSentence(refused.refusal)).toContain(`pin that key on both URLs in INTERLINK_URL (#key=${shared})`);
    // A pin still holds a URL to its key.
    expect(decideRelayKey(b, freshRelayKey().key, [a, b, c], {})).toMatchObject({ trusted: false, refusal: { reason: 'not_pinned_key', pinned: shared } });
  });
});
