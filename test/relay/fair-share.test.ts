/**
 * Fair shares on a real relay (DESIGN.md "The relay": "Bounded by construction"): an
 * abuser sending to throwaway routes over four connections from one address fills its
 * own shares — first its connection's, then its address's — and is refused `queue_full`,
 * while an honest sender on another connection from another address is still accepted;
 * with `--db` the address's count survives a restart (and the files keep no address in
 * the clear); an acknowledgement or expiry gives the share back. Distinct loopback
 * addresses (127.0.0.2, 127.0.0.3) stand for distinct senders.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { RelayOptions, RelayServer } from '../../src/relay/server.js';
import { tempDir } from '../helpers/fixtures.js';
import { closedAfterEach } from '../helpers/relay-harness.js';
import { sharedStore, startTestRelay } from '../helpers/relay-store.js';
import { startRelay as startRelayProcess } from '../helpers/spawn-relay.js';
import { newReader, TestClient, until, type Accepted, type Reader, type Refused } from '../helpers/relay-test-client.js';
import { NEW_KEY_BURST } from '../../src/relay/sender-keys.js';

const ABUSER = '127.0.0.2';
const HONEST = '127.0.0.3';
const PER_ADDRESS = 40;
const PER_CONNECTION = 12;
const DAY = 86_400_000;
const CONNECTION_FULL = /the share of the key this connection proved is full/;
const ADDRESS_FULL = /your address's share of the relay is full \(it holds 40 messages/;

const { relays, clients, dirs } = closedAfterEach();

async function startRelay(options: Partial<RelayOptions> = {}): Promise<RelayServer> {
  const relay = await startTestRelay({ maxPerAddress: PER_ADDRESS, maxPerConnection: PER_CONNECTION, ...options });
  relays.push(relay);
  return relay;
}

/** A connection that proves a key (a fresh one unless `key` is given), as every session's does. */
async function connect(url: string, localAddress: string, key: Reader = newReader('sender')): Promise<TestClient> {
  const client = await TestClient.connect(url, { localAddress });
  clients.push(client);
  expect(await client.prove(key)).toMatchObject({ type: 'auth_ok' });
  return client;
}

/** `count` sends, each to a route of its own that nobody reads; the replies in order. */
async function spray(client: TestClient, count: number, readers: Reader[] = []): Promise<(Accepted | Refused)[]> {
  const routes = Array.from({ length: count }, () => {
    const reader = newReader('throwaway');
    readers.push(reader);
    return reader.route;
  });
  return Promise.all(routes.map((route, i) => client.send(route, { n: i })));
}

function accepted(replies: readonly (Accepted | Refused)[]): number {
  return replies.filter((r) => r.type === 'accepted').length;
}

/** Every refusal among `replies` is `queue_full` with a message matching `why`. */
function expectRefused(replies: readonly (Accepted | Refused)[], why: RegExp): void {
  for (const reply of replies.filter((r): r is Refused => r.type === 'refused')) {
    expect(reply.code).toBe('queue_full');
    expect(reply.message).toMatch(why);
  }
}

async function expectAccepted(client: TestClient): Promise<void> {
  expect(await client.send(newReader('honest').route, { hello: true })).toMatchObject({ type: 'accepted' });
}

/**
 * The abuser's four connections: the first fills its connection's share and is refused;
 * the others fill the rest of the address's share and are refused from then on.
 */
async function abuse(url: string, readers: Reader[] = []): Promise<TestClient[]> {
  const connections = [];
  for (let i = 0; i < 4; i++) connections.push(await connect(url, ABUSER));
  const [first, ...others] = connections as [TestClient, ...TestClient[]];
  const firstReplies = await spray(first, PER_CONNECTION + 3, readers);
  expect(accepted(firstReplies)).toBe(PER_CONNECTION);
  expect(firstReplies.at(-1)).toMatchObject({ type: 'refused', code: 'queue_full', message: expect.stringMatching(CONNECTION_FULL) });
  expectRefused(firstReplies, CONNECTION_FULL);
  let total = PER_CONNECTION;
  for (const conn of others) {
    const replies = await spray(conn, PER_CONNECTION, readers);
    total += accepted(replies);
    expectRefused(replies, ADDRESS_FULL);
  }
  expect(total).toBe(PER_ADDRESS);
  const last = await spray(others.at(-1)!, 1);
  expect(last[0]).toMatchObject({ type: 'refused', code: 'queue_full', message: expect.stringMatching(ADDRESS_FULL) });
  return connections;
}

describe('fair shares', () => {
  for (const store of ['in memory', '--db'] as const) {
    it(`an abuser on four connections fills only its own shares; an honest sender from another address is still accepted; an acknowledgement gives a share back (${store})`, async () => {
      const dir = store === '--db' ? await tempDir() : undefined;
      if (dir !== undefined) dirs.push(dir);
      const relay = await startRelay(dir !== undefined ? { dbDir: dir.path } : {});
      const readers: Reader[] = [];
      const [first, , , last] = await abuse(relay.url, readers);
      await expectAccepted(await connect(relay.url, HONEST));
      // Another connection from the abuser's address: the address's share is full.
      expect((await spray(await connect(relay.url, ABUSER), 1))[0]).toMatchObject({ code: 'queue_full', message: expect.stringMatching(ADDRESS_FULL) });

      // The reader of one of the first connection's routes acknowledges it: both shares get one back.
      const reader = await connect(relay.url, HONEST);
      await reader.auth(readers[0]!);
      const [delivery] = await reader.waitForDeliveries(1);
      reader.ack(delivery!.route, [delivery!.id]);
      await until('the acknowledgement is committed', () => (relay.stats().messages === PER_ADDRESS ? true : undefined));
      expect((await spray(first!, 1))[0]).toMatchObject({ type: 'accepted' });
      expect((await spray(last!, 1))[0]).toMatchObject({ code: 'queue_full', message: expect.stringMatching(ADDRESS_FULL) });
    });
  }

  it('expiry gives the share back', async () => {
    let now = 1_900_000_000_000;
    const relay = await startRelay({ now: () => now, maxAgeMs: 8 * DAY, expireEveryMs: 20 });
    await abuse(relay.url);
    now += 8 * DAY + 1;
    await until('the abuser’s messages expired', () => (relay.stats().messages === 0 ? true : undefined));
    await expectAccepted(await connect(relay.url, ABUSER));
  });

  it('on a relay listening on loopback one address may use more than a tenth of the relay by default (one machine, many sessions)', async () => {
    // 80 messages in all: a tenth would be 8; each connection's share is a twentieth, 4.
    const relay = await startTestRelay({ maxMessages: 80 });
    relays.push(relay);
    let total = 0;
    for (let session = 0; session < 5; session++) total += accepted(await spray(await connect(relay.url, '127.0.0.1'), 4));
    expect(total).toBe(20);
  });

  it('a sender that reconnects cannot escape its share: its key keeps it, and new keys get shares only within their network\'s budget', async () => {
    // The zero-config relay's case: one address, whose share is the whole relay; a key's share is a twentieth, 10.
    const relay = await startTestRelay({ maxMessages: 200, maxPerConnection: 10 });
    relays.push(relay);
    const honestKey = newReader('honest');
    // The honest identity was given its share before the attack.
    expect(accepted(await spray(await connect(relay.url, '127.0.0.1', honestKey), 1))).toBe(1);
    // Reconnecting with the same key: one share.
    const sameKey = newReader('abuser');
    let total = 0;
    for (let i = 0; i < 5; i++) total += accepted(await spray(await connect(relay.url, '127.0.0.1', sameKey), 10));
    expect(total).toBe(10);
    // Reconnecting with a new key each time, 25 times: a share for each new key the network's budget
    // still allows (the honest key and the one above took two), then one pool for all the others.
    let fresh = 0;
    for (let i = 0; i < 25; i++) fresh += accepted(await spray(await connect(relay.url, '127.0.0.1'), 10));
    expect(fresh).toBe((NEW_KEY_BURST - 2) * 10 + 10);
    expect(relay.stats().messages).toBeLessThan(200);
    // The honest identity, reconnecting, still sends.
    expect(accepted(await spray(await connect(relay.url, '127.0.0.1', honestKey), 5))).toBe(5);
  });

  it('a relay process on loopback: 25 reconnections with new keys hold the budget\'s shares and one pool, not the relay', async () => {
    const relay = await startRelayProcess({ flags: ['--max-per-connection', '10'] });
    let total = 0;
    for (let i = 0; i < 25; i++) total += accepted(await spray(await connect(relay.url, '127.0.0.1'), 10));
    expect(total).toBe(NEW_KEY_BURST * 10 + 10);
    await Promise.all(clients.splice(0).map((c) => c.terminate()));
    await relay.child.kill('SIGTERM');
  });

  // Reads the journal's files: the embedded store's case.
  it.skipIf(sharedStore)('a relay process with --db keeps the abuser’s share full across a restart, and keeps no address in its files', async () => {
    const dir = await tempDir();
    dirs.push(dir);
    const flags = ['--max-per-address', String(PER_ADDRESS), '--max-per-connection', String(PER_CONNECTION)];
    const first = await startRelayProcess({ db: dir.path, flags });
    await abuse(first.url);
    await expectAccepted(await connect(first.url, HONEST));
    await Promise.all(clients.splice(0).map((c) => c.terminate()));
    await first.child.kill('SIGTERM');

    const again = await startRelayProcess({ db: dir.path, flags });
    expect((await spray(await connect(again.url, ABUSER), 1))[0]).toMatchObject({ code: 'queue_full', message: expect.stringMatching(ADDRESS_FULL) });
    await expectAccepted(await connect(again.url, HONEST));
    const files = ['queues.json', 'queues.journal'].map((name) => {
      try {
        return readFileSync(join(dir.path, name), 'utf8');
      } catch {
        return '';
      }
    });
    expect(files.join('')).toContain('"src":');
    expect(files.join('')).not.toContain(ABUSER);
    expect(readFileSync(join(dir.path, 'sources.key')).length).toBe(32);
  });
});
