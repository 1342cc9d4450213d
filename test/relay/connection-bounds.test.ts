/**
 * The per-connection bounds DESIGN.md lists under "Bounded by construction" that no other
 * test reaches through a real socket: the routes one connection may authenticate, the
 * payload bytes it may have waiting for their commit, and the frame size that closes it.
 */
import { join } from 'node:path';
import WebSocket from 'ws';
import { describe, expect, it } from 'vitest';
import { MAX_ROUTES_PER_CONNECTION } from '../../src/relay/dispatch.js';
import { MAX_UNCOMMITTED_BYTES } from '../../src/relay/sends.js';
import { MAX_FRAME_BYTES, MAX_PAYLOAD_BYTES } from '../../src/wire/frames.js';
import type { RelayServer } from '../../src/relay/server.js';
import { withFileLock } from '../../src/store/lock.js';
import { tempDir } from '../helpers/fixtures.js';
import { closedAfterEach } from '../helpers/relay-harness.js';
import { newReader, TestClient } from '../helpers/relay-test-client.js';
import { sharedStore, startTestRelay } from '../helpers/relay-store.js';

const { relays, clients, dirs } = closedAfterEach();

async function relayWith(dbDir?: string): Promise<RelayServer> {
  // Shares as large as the relay, so that only the bound under test can refuse.
  const relay = await startTestRelay({ maxPerConnection: 100_000, ...(dbDir !== undefined && { dbDir }) });
  relays.push(relay);
  return relay;
}

async function connect(relay: RelayServer): Promise<TestClient> {
  const client = await TestClient.connect(relay.url);
  clients.push(client);
  return client;
}

describe('relay: bounds per connection', () => {
  it(`lets one connection authenticate ${MAX_ROUTES_PER_CONNECTION} routes, not one more; another connection still can`, async () => {
    const relay = await relayWith();
    const client = await connect(relay);
    for (let i = 0; i < MAX_ROUTES_PER_CONNECTION; i++) expect(await client.auth(newReader(`s${i}`))).toMatchObject({ type: 'auth_ok' });
    const refused = await client.auth(newReader('one-more'));
    expect(refused).toMatchObject({ type: 'refused', code: 'auth_failed' });
    expect(refused.type === 'refused' && refused.message).toContain(`at most ${MAX_ROUTES_PER_CONNECTION} routes`);
    expect(await (await connect(relay)).auth(newReader('elsewhere'))).toMatchObject({ type: 'auth_ok' });
  });

  // Holds the journal's lock to stop commits (relay-postgres.test.ts holds a route's row instead).
  it.skipIf(sharedStore)(`refuses rate_limited past ${MAX_UNCOMMITTED_BYTES / 2 ** 20} MiB of payload waiting for a commit, and answers every send once the store moves`, async () => {
    const dir = await tempDir();
    dirs.push(dir);
    const db = join(dir.path, 'relay');
    const relay = await relayWith(db);
    const client = await connect(relay);
    const reader = newReader();
    const payload = { text: 'x'.repeat(MAX_PAYLOAD_BYTES - 100) };
    const bytes = Buffer.byteLength(JSON.stringify(payload));
    const fitting = Math.floor(MAX_UNCOMMITTED_BYTES / bytes);
    let pending: Promise<{ type: string }>[] = [];
    // While another process holds the store's lock, no commit can finish: the sends pile up.
    await withFileLock(join(db, 'queues.json'), async () => {
      pending = Array.from({ length: fitting }, (_, i) => client.send(reader.route, payload, `p${i}`, 30_000));
      const over = await client.send(reader.route, payload, 'over');
      expect(over).toMatchObject({ type: 'refused', code: 'rate_limited' });
      expect(over.type === 'refused' && over.message).toContain('still storing');
    });
    const replies = await Promise.all(pending);
    expect(replies.every((r) => r.type === 'accepted')).toBe(true);
    expect(await client.send(reader.route, { after: true })).toMatchObject({ type: 'accepted' });
  });

  it(`closes a connection whose frame is over ${MAX_FRAME_BYTES / 2 ** 20} MiB (1009) and serves the next`, async () => {
    const relay = await relayWith();
    const ws = new WebSocket(relay.url, { perMessageDeflate: false });
    ws.on('error', () => undefined);
    await new Promise<void>((resolve) => ws.once('message', () => resolve()));
    const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));
    ws.send(`{"v":1,"type":"roster","ref":"${'r'.repeat(MAX_FRAME_BYTES)}"}`);
    expect(await closed).toBe(1009);
    const reader = newReader();
    const client = await connect(relay);
    await client.auth(reader);
    expect(await client.send(reader.route, { still: 'here' })).toMatchObject({ type: 'accepted' });
  });
});
