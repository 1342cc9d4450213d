/**
 * `interlink-mcp relay` as a real process: durable across kill -9, graceful on SIGTERM,
 * one clear line on a taken address or store, and honest about memory-only queues.
 */
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { RelayServer } from '../../src/relay/server.js';
import { tempDir } from '../helpers/fixtures.js';
import { reapAll, spawnNode, type Child } from '../helpers/process.js';
import { newReader, TestClient, type Reader } from '../helpers/relay-test-client.js';
import { queuedInSchema, sharedStore, storeFlags } from '../helpers/relay-store.js';

const MAIN = fileURLToPath(new URL('../../dist/src/cli/main.js', import.meta.url));
const LISTENING = /^interlink relay listening on (ws:\/\/127\.0\.0\.1:(\d+)) \((.*)\)$/;

let dir: { path: string; remove: () => Promise<void> };
const clients: TestClient[] = [];
beforeEach(async () => (dir = await tempDir('interlink-relay-proc-')));
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.terminate()));
  await reapAll();
  await dir.remove();
});
afterAll(reapAll);

async function relayProcess(args: string[]): Promise<{ child: Child; url: string; mode: string }> {
  const child = spawnNode(MAIN, ['relay', ...args]);
  await child.waitForLines(1);
  const match = LISTENING.exec(child.lines[0]!);
  if (!match) throw new Error(`unexpected first line ${JSON.stringify(child.lines[0])}; stderr: ${child.stderr()}`);
  return { child, url: match[1]!, mode: match[3]! };
}

async function untilAsync(what: string, check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function connect(url: string, options: { autoAck?: boolean } = {}): Promise<TestClient> {
  const client = await TestClient.connect(url, options);
  clients.push(client);
  return client;
}

async function read(url: string, reader: Reader, count: number): Promise<TestClient> {
  const client = await connect(url);
  expect(await client.auth(reader)).toMatchObject({ type: 'auth_ok' });
  await client.waitForDeliveries(count);
  return client;
}

describe('relay process', () => {
  it('delivers every accepted message exactly once, in order, after kill -9; acknowledged ones never again', async () => {
    const db = join(dir.path, 'db');
    const store = await storeFlags(db);
    const reader = newReader();
    let relay = await relayProcess(['--addr', '127.0.0.1:0', ...store]);
    expect(relay.mode).toEqual(sharedStore ? expect.stringMatching(/^durable: postgres:\/\/.*, shared$/) : `durable: ${db}`);
    const sender = await connect(relay.url);
    const replies = await Promise.all(Array.from({ length: 200 }, (_, i) => sender.send(reader.route, { n: i })));
    expect(replies.every((r) => r.type === 'accepted')).toBe(true);
    const ids = replies.map((r) => (r.type === 'accepted' ? r.id : -1));
    await relay.child.kill('SIGKILL');

    relay = await relayProcess(['--addr', '127.0.0.1:0', ...store]);
    const client = await read(relay.url, reader, 200);
    expect(client.deliveries().map((d) => d.payload)).toEqual(Array.from({ length: 200 }, (_, i) => ({ n: i })));
    expect(client.deliveries().map((d) => d.id)).toEqual(ids);
    // Acknowledge all, then send a marker on the same connection: once it is accepted the
    // acknowledgement is committed on the journal (on PostgreSQL, once the schema holds only
    // the marker). It arrives last, so nothing came twice before it.
    client.ack(reader.route, ids);
    const marker = await client.send(reader.route, { marker: true });
    expect(marker.type).toBe('accepted');
    await client.waitForDeliveries(201);
    expect(new Set(client.deliveries().map((d) => d.id)).size).toBe(201);
    if (sharedStore) await untilAsync('the acknowledgement committed', async () => (await queuedInSchema(db)) === 1);
    await relay.child.kill('SIGKILL');

    relay = await relayProcess(['--addr', '127.0.0.1:0', ...store]);
    const after = await read(relay.url, reader, 1);
    expect(after.deliveries().map((d) => d.payload)).toEqual([{ marker: true }]);
    await relay.child.kill('SIGTERM');
  });

  it('keeps every accepted message when killed with -9 in the middle of a burst', async () => {
    const db = join(dir.path, 'db');
    const reader = newReader();
    const store = await storeFlags(db);
    let relay = await relayProcess(['--addr', '127.0.0.1:0', ...store]);
    const sender = await connect(relay.url);
    const accepted: number[] = [];
    for (let i = 0; i < 1000; i++) {
      void sender.send(reader.route, { n: i }, `s${i}`, 30_000).then(
        (r) => r.type === 'accepted' && accepted.push(r.id),
        () => undefined,
      );
    }
    await sender.when('100 accepted', () => (accepted.length >= 100 ? true : undefined));
    await relay.child.kill('SIGKILL');
    const acceptedBeforeKill = [...accepted];

    relay = await relayProcess(['--addr', '127.0.0.1:0', ...store]);
    const client = await connect(relay.url, { autoAck: true });
    await client.auth(reader);
    const marker = await client.send(reader.route, { marker: true });
    if (marker.type !== 'accepted') throw new Error(marker.message);
    await client.when('the marker', () => client.deliveries().find((d) => d.id === marker.id));
    const delivered = client.deliveries().map((d) => d.id);
    expect(delivered).toEqual([...new Set(delivered)].sort((x, y) => x - y));
    const missing = acceptedBeforeKill.filter((id) => !delivered.includes(id));
    expect(missing).toEqual([]);
    await relay.child.kill('SIGTERM');
  });

  it('closes gracefully on SIGTERM and SIGINT, exit 0, keeping what it accepted', async () => {
    const db = join(dir.path, 'db');
    const reader = newReader();
    const store = await storeFlags(db);
    let relay = await relayProcess(['--addr', '127.0.0.1:0', ...store]);
    const sender = await connect(relay.url);
    for (let i = 0; i < 3; i++) expect((await sender.send(reader.route, { n: i })).type).toBe('accepted');
    relay.child.process.kill('SIGTERM');
    expect(await relay.child.exited).toEqual({ code: 0, signal: null });
    expect((await sender.closed).code).toBe(1001);

    relay = await relayProcess(['--addr', '127.0.0.1:0', ...store]);
    const client = await read(relay.url, reader, 3);
    expect(client.deliveries().map((d) => d.payload)).toEqual([{ n: 0 }, { n: 1 }, { n: 2 }]);
    relay.child.process.kill('SIGINT');
    expect(await relay.child.exited).toEqual({ code: 0, signal: null });
  });

  it('says so when queues live in memory only', async () => {
    const relay = await relayProcess(['--addr', '127.0.0.1:0']);
    expect(relay.mode).toBe('in memory: queued messages are lost on restart');
    expect(relay.child.stderr()).toContain('no --db or --store: queued messages live in memory');
    relay.child.process.kill('SIGTERM');
    expect(await relay.child.exited).toEqual({ code: 0, signal: null });
  });

  it('exits 1 with one clear line when the address is in use', async () => {
    const other = await RelayServer.start({ host: '127.0.0.1', port: 0 });
    try {
      const child = spawnNode(MAIN, ['relay', '--addr', `127.0.0.1:${other.port}`]);
      expect((await child.exited).code).toBe(1);
      expect(child.lines.filter((l) => l !== '')).toEqual([]);
      // One line and nothing else: no warning, no log line ahead of it.
      expect(child.stderr()).toBe(`interlink-mcp relay: address in use: another relay may be running on 127.0.0.1:${other.port}\n`);
    } finally {
      await other.close();
    }
  });

  // A shared store takes any number of relays.
  it.skipIf(sharedStore)('exits 1 when another relay holds the same --db', async () => {
    const db = join(dir.path, 'db');
    const first = await relayProcess(['--addr', '127.0.0.1:0', '--db', db]);
    const second = spawnNode(MAIN, ['relay', '--addr', '127.0.0.1:0', '--db', db]);
    expect((await second.exited).code).toBe(1);
    expect(second.stderr()).toContain(`${db} is in use by another relay`);
    await first.child.kill('SIGTERM');
  });

  it('warns when listening beyond loopback, and refuses a malformed address (exit 64)', async () => {
    const relay = spawnNode(MAIN, ['relay', '--addr', '0.0.0.0:0']);
    await relay.waitForLines(1);
    expect(relay.lines[0]).toMatch(/^interlink relay listening on ws:\/\/0\.0\.0\.0:\d+ \(in memory/);
    expect(relay.stderr()).toContain('beyond loopback');
    await relay.kill('SIGTERM');

    for (const addr of ['nonsense', '127.0.0.1:99999', '::1:9440', ':9440']) {
      const bad = spawnNode(MAIN, ['relay', '--addr', addr]);
      expect((await bad.exited).code, addr).toBe(64);
      expect(bad.stderr(), addr).toContain('--addr');
    }
  });
});
