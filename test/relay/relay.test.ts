/**
 * The relay over real sockets on 127.0.0.1: challenge and auth, send → deliver → ack,
 * redelivery, authenticated reads, refusals, heartbeat, backpressure, roster, and the
 * durable store across restarts (kill -9 is in relay-process.test.ts).
 */
import { describe, expect, it } from 'vitest';
import { signAuth } from '../../src/wire/auth.js';
import { HIGH_WATER_BYTES } from '../../src/relay/connection.js';
import { MAX_PAYLOAD_BYTES } from '../../src/wire/frames.js';
import { RelayServer, type RelayOptions, type RelayStats } from '../../src/relay/server.js';
import { newNonce } from '../../src/wire/auth.js';
import { signAnnouncement, signAnnouncementV3, signGoodbye } from '../../src/presence/announcement.js';
import { nameBucket, sealDetails } from '../../src/presence/private.js';
import { fingerprintOf } from '../../src/identity/identity.js';
import { ROSTER_RETAIN_MS } from '../../src/relay/roster.js';
import { newReader, TestClient, until, type Accepted, type Deliver } from '../helpers/relay-test-client.js';
import { tempDir } from '../helpers/fixtures.js';
import { closedAfterEach } from '../helpers/relay-harness.js';
import { sharedStore, startTestRelay } from '../helpers/relay-store.js';

const DAY = 86_400_000;
const { relays, clients, dirs } = closedAfterEach();

async function startRelay(options: Partial<RelayOptions> = {}): Promise<RelayServer> {
  const relay = await startTestRelay(options);
  relays.push(relay);
  return relay;
}

async function connect(relay: RelayServer, options: { autoPong?: boolean } = {}): Promise<TestClient> {
  const client = await TestClient.connect(relay.url, options);
  clients.push(client);
  return client;
}

async function sendAll(client: TestClient, to: string, count: number, body: (i: number) => Record<string, unknown> = (i) => ({ n: i })): Promise<number[]> {
  const replies = await Promise.all(Array.from({ length: count }, (_, i) => client.send(to, body(i))));
  return replies.map((r) => {
    if (r.type !== 'accepted') throw new Error(`refused: ${r.code} ${r.message}`);
    return r.id;
  });
}

/**
 * Frames on one connection are handled in order: once a send that follows other frames is
 * accepted, the relay has handled them (on the embedded store, committed them too).
 */
async function barrier(client: TestClient): Promise<void> {
  const reply = await client.send(newReader('barrier').route, { barrier: true });
  expect(reply.type).toBe('accepted');
}

/**
 * Waits until the relay counts `expected`: on the embedded store at once after a barrier;
 * on a shared store once the acknowledgements before it committed, and its route count is
 * read again (every 2 s).
 */
async function counts(relay: RelayServer, expected: Partial<RelayStats>): Promise<void> {
  const matches = () => Object.entries(expected).every(([name, value]) => relay.stats()[name as keyof RelayStats] === value);
  await until(`the relay to count ${JSON.stringify(expected)} (it counts ${JSON.stringify(relay.stats())})`, () => (matches() ? true : undefined));
}

function isAccepted(r: Accepted | { type: string }): r is Accepted {
  return r.type === 'accepted';
}

describe('relay: connection and auth', () => {
  it('sends a fresh challenge at once on every connection', async () => {
    const relay = await startRelay();
    const a = await connect(relay);
    const b = await connect(relay);
    expect(a.nonce).not.toBe(b.nonce);
  });

  it('authenticates a route with its key, and refuses a bad signature or another key', async () => {
    const relay = await startRelay();
    const reader = newReader();
    const other = newReader();
    const client = await connect(relay);

    const wrongNonce = client.frames.length;
    client.frame({ type: 'auth', route: reader.route, relay: client.relayKey, sig: signAuth(reader.key, client.relayKey, newNonce(), reader.route) });
    const refusedNonce = await client.waitFor('refusal', (f) => f.type === 'refused', wrongNonce);
    expect(refusedNonce).toMatchObject({ code: 'auth_failed' });

    expect(await client.auth(reader, other.key)).toMatchObject({ type: 'refused', code: 'auth_failed' });
    expect(await client.auth(reader)).toEqual({ v: 1, type: 'auth_ok', route: reader.route });
    // Authenticating again is harmless.
    expect(await client.auth(reader)).toEqual({ v: 1, type: 'auth_ok', route: reader.route });
    expect(client.invalid).toEqual([]);
  });

  it('closes connections with 1001 on close()', async () => {
    const relay = await startRelay();
    const client = await connect(relay);
    await relay.close();
    expect((await client.closed).code).toBe(1001);
  });
});

describe('relay: delivery', () => {
  it('delivers in order, and an acknowledged message never again', async () => {
    const relay = await startRelay();
    const reader = newReader();
    const sender = await connect(relay);
    const ids = await sendAll(sender, reader.route, 10);
    expect(ids).toEqual([...ids].sort((x, y) => x - y));

    const client = await connect(relay);
    await client.auth(reader);
    const got = await client.waitForDeliveries(10);
    expect(got.map((d) => d.id)).toEqual(ids);
    expect(got.map((d) => d.payload)).toEqual(Array.from({ length: 10 }, (_, i) => ({ n: i })));
    expect(got.every((d) => d.route === reader.route)).toBe(true);

    // Live push after auth, too.
    const [late] = await sendAll(sender, reader.route, 1, () => ({ late: true }));
    await client.waitForDeliveries(11);
    client.ack(reader.route, [...ids, late!]);
    await barrier(client);
    await counts(relay, { messages: 1 }); // only the barrier

    await client.close();
    const again = await connect(relay);
    await again.auth(reader);
    const [marker] = await sendAll(sender, reader.route, 1, () => ({ marker: true }));
    const after = await again.waitForDeliveries(1);
    expect(after.map((d) => d.id)).toEqual([marker]);
    expect(client.deliveries().map((d) => d.id)).toEqual([...ids, late]);
  });

  it('redelivers unacknowledged messages to the next connection, in order', async () => {
    const relay = await startRelay();
    const reader = newReader();
    const sender = await connect(relay);
    const ids = await sendAll(sender, reader.route, 5);

    const first = await connect(relay);
    await first.auth(reader);
    await first.waitForDeliveries(5);
    first.ack(reader.route, ids.slice(0, 2));
    await barrier(first);
    await counts(relay, { messages: 4 }); // three and the barrier
    await first.terminate();

    const second = await connect(relay);
    await second.auth(reader);
    const got = await second.waitForDeliveries(3);
    expect(got.map((d) => d.id)).toEqual(ids.slice(2));
    expect(got.map((d) => d.payload)).toEqual([{ n: 2 }, { n: 3 }, { n: 4 }]);
  });

  it('keeps at most the delivery window in flight per connection and route', async () => {
    const relay = await startRelay({ deliveryWindow: 4 });
    const reader = newReader();
    const sender = await connect(relay);
    const ids = await sendAll(sender, reader.route, 10);
    const client = await connect(relay);
    await client.auth(reader);
    await client.waitForDeliveries(4);
    await barrier(client); // everything the relay would push has been pushed by now
    expect(client.deliveries()).toHaveLength(4);
    client.ack(reader.route, ids.slice(0, 3));
    const got = await client.waitForDeliveries(7);
    expect(got.map((d) => d.id)).toEqual(ids.slice(0, 7));
  });

  it('delivers to every connection of a route; an acknowledgement from any removes the message', async () => {
    const relay = await startRelay();
    const reader = newReader();
    const a = await connect(relay);
    const b = await connect(relay);
    await a.auth(reader);
    await b.auth(reader);
    const sender = await connect(relay);
    const ids = await sendAll(sender, reader.route, 3);
    await a.waitForDeliveries(3);
    await b.waitForDeliveries(3);
    a.ack(reader.route, ids);
    await barrier(a);
    await counts(relay, { messages: 1 }); // the barrier

    const c = await connect(relay);
    await c.auth(reader);
    const [marker] = await sendAll(sender, reader.route, 1);
    expect((await c.waitForDeliveries(1)).map((d) => d.id)).toEqual([marker]);
  });

  it('lets only a connection that authenticated the route read or acknowledge it', async () => {
    const relay = await startRelay();
    const reader = newReader();
    const mallory = newReader();
    const sender = await connect(relay);
    const ids = await sendAll(sender, reader.route, 3);

    const intruder = await connect(relay);
    expect(await intruder.auth(reader, mallory.key)).toMatchObject({ code: 'auth_failed' });
    const before = intruder.frames.length;
    intruder.ack(reader.route, ids);
    const refusal = await intruder.waitFor('refusal', (f) => f.type === 'refused', before);
    expect(refusal).toMatchObject({ code: 'not_authenticated' });
    expect(refusal.type === 'refused' && refusal.message).toContain(reader.route);
    // Authenticated for its own route only: still not the reader's.
    await intruder.auth(mallory);
    const mark = intruder.frames.length;
    intruder.ack(reader.route, ids);
    await intruder.waitFor('second refusal', (f) => f.type === 'refused' && f.code === 'not_authenticated', mark);
    await barrier(intruder);
    expect(intruder.deliveries()).toEqual([]);
    expect(relay.stats().messages).toBe(4);

    const client = await connect(relay);
    await client.auth(reader);
    expect((await client.waitForDeliveries(3)).map((d) => d.id)).toEqual(ids);
  });

  it('keeps several routes of one connection apart', async () => {
    const relay = await startRelay();
    const one = newReader('one');
    const two = newReader('two');
    const client = await connect(relay);
    await client.auth(one);
    await client.auth(two);
    const sender = await connect(relay);
    const toOne = await sendAll(sender, one.route, 2);
    const toTwo = await sendAll(sender, two.route, 2);
    await client.waitForDeliveries(4);
    expect(client.deliveries(one.route).map((d) => d.id)).toEqual(toOne);
    expect(client.deliveries(two.route).map((d) => d.id)).toEqual(toTwo);
  });
});

describe('relay: refusals', () => {
  it('refuses an oversized payload with too_large, naming the limit, and keeps serving', async () => {
    const relay = await startRelay();
    const reader = newReader();
    const client = await connect(relay);
    const reply = await client.send(reader.route, { text: 'x'.repeat(MAX_PAYLOAD_BYTES) }, 'big');
    expect(reply).toMatchObject({ type: 'refused', ref: 'big', code: 'too_large' });
    expect(reply.type === 'refused' && reply.message).toContain(String(MAX_PAYLOAD_BYTES));
    // Exactly at the limit is accepted.
    const fits = { text: 'x'.repeat(MAX_PAYLOAD_BYTES - JSON.stringify({ text: '' }).length) };
    expect((await client.send(reader.route, fits)).type).toBe('accepted');
    expect((await client.send(reader.route, { small: true })).type).toBe('accepted');
    const other = await connect(relay);
    expect((await other.send(reader.route, { n: 1 })).type).toBe('accepted');
  });

  it('refuses frames beyond the rate limit with rate_limited', async () => {
    const relay = await startRelay({ frameRate: 5, frameBurst: 5 });
    const reader = newReader();
    const client = await connect(relay);
    const replies = await Promise.all(Array.from({ length: 20 }, () => client.send(reader.route, { n: 1 })));
    const accepted = replies.filter((r) => r.type === 'accepted');
    const limited = replies.filter((r) => r.type === 'refused' && r.code === 'rate_limited');
    expect(accepted.length).toBeGreaterThanOrEqual(5);
    expect(accepted.length).toBeLessThanOrEqual(7);
    expect(accepted.length + limited.length).toBe(20);
    expect(limited[0]!.type === 'refused' && limited[0]!.message).toContain('5 frames per second');
    // Another connection has its own bucket.
    const other = await connect(relay);
    expect((await other.send(reader.route, { n: 2 })).type).toBe('accepted');
  });

  it('never rate-limits a reader acknowledging its own route', async () => {
    const relay = await startRelay({ frameRate: 1, frameBurst: 2 });
    const reader = newReader();
    const sender = await connect(relay);
    const accepted = await sendAll(sender, reader.route, 2);
    const client = await connect(relay);
    await client.auth(reader); // one token
    await client.waitForDeliveries(2);
    for (const id of accepted) client.ack(reader.route, [id]);
    await until('acknowledged', () => (relay.stats().messages === 0 ? true : undefined));
    expect(client.refusals()).toEqual([]);
    // An ack for a route it has not authenticated still costs a token.
    client.ack(newReader().route, [1]);
    client.ack(newReader().route, [1]);
    await client.when('a rate_limited refusal', () => client.refusals().find((r) => r.code === 'rate_limited'));
  });

  it('refuses queue_full at the bounds and never drops an accepted message', async () => {
    const relay = await startRelay({ maxRouteMessages: 3, maxMessages: 5 });
    const reader = newReader('a');
    const sender = await connect(relay);
    const replies = [];
    for (let i = 0; i < 5; i++) replies.push(await sender.send(reader.route, { n: i }));
    expect(replies.map((r) => r.type)).toEqual(['accepted', 'accepted', 'accepted', 'refused', 'refused']);
    expect(replies[3]).toMatchObject({ code: 'queue_full' });
    expect(replies[3]!.type === 'refused' && replies[3]!.message).toContain('3 messages');

    const others = [newReader('b'), newReader('c')];
    expect((await sender.send(others[0]!.route, { n: 0 })).type).toBe('accepted');
    expect((await sender.send(others[0]!.route, { n: 1 })).type).toBe('accepted');
    const total = await sender.send(others[1]!.route, { n: 0 });
    expect(total).toMatchObject({ type: 'refused', code: 'queue_full' });
    expect(total.type === 'refused' && total.message).toContain('5 messages');

    const client = await connect(relay);
    await client.auth(reader);
    const got = await client.waitForDeliveries(3);
    expect(got.map((d) => d.payload)).toEqual([{ n: 0 }, { n: 1 }, { n: 2 }]);
    client.ack(reader.route, got.map((d) => d.id));
    await until('room again', () => (relay.stats().messages === 2 ? true : undefined));
    expect((await sender.send(reader.route, { n: 3 })).type).toBe('accepted');
  });

  it('refuses queue_full at the byte bound', async () => {
    const relay = await startRelay({ maxBytes: 100 });
    const reader = newReader();
    const sender = await connect(relay);
    expect((await sender.send(reader.route, { text: 'x'.repeat(80) })).type).toBe('accepted');
    const reply = await sender.send(reader.route, { text: 'x'.repeat(10) });
    expect(reply).toMatchObject({ type: 'refused', code: 'queue_full' });
    expect(reply.type === 'refused' && reply.message).toContain('100 bytes');
  });

  it('answers malformed frames with bad_frame and keeps the connection usable', async () => {
    const relay = await startRelay();
    const reader = newReader();
    const client = await connect(relay);
    const cases: [string | Buffer, string | undefined][] = [
      ['not json', undefined],
      ['{"v":1,"type":"subscribe"}', undefined],
      ['{"v":2,"type":"roster","ref":"v2"}', 'v2'],
      [JSON.stringify({ v: 1, type: 'send', ref: 'bad-route', to: 'nobody', payload: {} }), 'bad-route'],
      [JSON.stringify({ v: 1, type: 'send', ref: 'bad-payload', to: reader.route, payload: [1] }), 'bad-payload'],
      [JSON.stringify({ v: 1, type: 'ack', route: reader.route, ids: [] }), undefined],
      [JSON.stringify({ v: 1, type: 'announce', announcement: { key: 'x' } }), undefined],
      [JSON.stringify({ v: 1, type: 'goodbye', goodbye: null }), undefined],
      [Buffer.from('{"v":1}'), undefined],
    ];
    for (const [text, ref] of cases) {
      const before = client.frames.length;
      client.raw(text);
      const refusal = await client.waitFor(`refusal of ${String(text)}`, (f) => f.type === 'refused', before);
      expect(refusal, String(text)).toMatchObject({ code: 'bad_frame', ...(ref !== undefined && { ref }) });
    }
    expect((await client.send(reader.route, { ok: true })).type).toBe('accepted');
    expect(client.isOpen).toBe(true);
  });
});

describe('relay: liveness and backpressure', () => {
  it('terminates a peer that does not answer pings, and keeps one that does', async () => {
    const relay = await startRelay({ heartbeatMs: 50 });
    const healthy = await connect(relay);
    const silent = await connect(relay, { autoPong: false });
    const closed = await silent.closed;
    expect(closed.code).toBe(1006);
    await healthy.when('three pings', () => (healthy.pings >= 3 ? true : undefined));
    expect(healthy.isOpen).toBe(true);
    await until('one connection left', () => (relay.stats().connections === 1 ? true : undefined));
  });

  it('stops pushing to a reader that does not read, and resumes when it drains', async () => {
    const relay = await startRelay({ deliveryWindow: 10_000, frameRate: 100_000, frameBurst: 100_000 });
    const reader = newReader();
    const client = await connect(relay);
    await client.auth(reader);
    client.ws.pause();
    const sender = await connect(relay);
    const count = 5_000;
    const padding = 'p'.repeat(4096);
    const ids = await sendAll(sender, reader.route, count, (i) => ({ n: i, padding }));
    await until('deliveries paused', () => (relay.stats().blocked === 1 ? true : undefined));
    // ~20 MiB queued for this reader; the relay buffers no more than the high-water mark and one frame.
    expect(relay.stats().peakBufferedBytes).toBeLessThan(HIGH_WATER_BYTES + 64 * 1024);
    client.ws.resume();
    const got = await client.waitForDeliveries(count, reader.route, 20_000);
    expect(got.map((d: Deliver) => d.id)).toEqual(ids);
    expect(relay.stats().peakBufferedBytes).toBeLessThan(HIGH_WATER_BYTES + 64 * 1024);
  });
});

describe('relay: roster', () => {
  it('keeps verified announcements, answers roster requests, honours goodbyes and expires silence', async () => {
    let clock = 1_000_000;
    const relay = await startRelay({ now: () => clock });
    const reader = newReader('s1');
    const client = await connect(relay);
    const announcement = signAnnouncement(reader.key, { name: 'alice', session: 's1', cwd: '/w', git_root: '/w', summary: 'testing', ts: 5 });
    const roster = async (ref: string) => {
      const before = client.frames.length;
      client.frame({ type: 'roster', ref, keys: [announcement.key] });
      const frame = await client.waitFor('roster', (f) => f.type === 'roster' && f.ref === ref, before);
      return frame.type === 'roster' ? frame.entries : [];
    };

    client.frame({ type: 'announce', announcement });
    const before = client.frames.length;
    client.frame({ type: 'announce', announcement: { ...announcement, summary: 'forged' } });
    expect(await client.waitFor('refusal', (f) => f.type === 'refused', before)).toMatchObject({ code: 'bad_frame' });
    clock += 250;
    expect(await roster('r1')).toEqual([{ announcement, age_ms: 250 }]);

    client.frame({ type: 'goodbye', goodbye: signGoodbye(reader.key, 's1', 4) });
    expect(await roster('r2')).toHaveLength(1); // older than the announcement: no effect
    client.frame({ type: 'goodbye', goodbye: signGoodbye(reader.key, 's1', 5) });
    expect(await roster('r3')).toEqual([]);
    client.frame({ type: 'announce', announcement });
    expect(await roster('r4')).toEqual([]); // a replay cannot bring it back

    const fresh = signAnnouncement(reader.key, { name: 'alice', session: 's1', cwd: '/w', git_root: '/w', summary: 'back', ts: 6 });
    client.frame({ type: 'announce', announcement: fresh });
    expect(await roster('r5')).toEqual([{ announcement: fresh, age_ms: 0 }]);
    clock += ROSTER_RETAIN_MS;
    expect(await roster('r6')).toEqual([]);
  });
});

describe('relay: roster queries', () => {
  it("answers the keys, fingerprints and name bucket asked for, refuses a request for the whole roster, and hands a stranger only an announcement's public fields", async () => {
    const relay = await startRelay();
    const client = await connect(relay);
    const [alice, bob] = [newReader('a1'), newReader('b1')];
    const ts = Date.now();
    const sealed = sealDetails(alice.key, 'a1', ts, { name: 'alice', cwd: '/secret/work', git_root: '/secret', summary: 'private plans' }, []);
    const announcement = signAnnouncementV3(alice.key, { session: 'a1', ts, ...sealed, name_bucket: nameBucket('alice') });
    // A field the protocol does not have is not kept, nor served.
    client.frame({ type: 'announce', announcement: { ...announcement, cwd: '/secret/work' } });
    client.frame({ type: 'announce', announcement: signAnnouncement(bob.key, { name: 'bob', session: 'b1', cwd: '/b', git_root: '/b', summary: '', ts }) });
    const ask = async (ref: string, query: Record<string, unknown>) => {
      const before = client.frames.length;
      client.frame({ type: 'roster', ref, ...query });
      return client.waitFor(`roster ${ref}`, (f) => 'ref' in f && f.ref === ref, before);
    };
    const sessionsOf = (frame: Awaited<ReturnType<typeof ask>>) => (frame.type === 'roster' ? frame.entries.map((e) => (e.announcement as { session: string }).session).sort() : frame);
    const aliceKey = announcement.key;
    // Frames of one connection are handled in order: once this is answered, both announcements are in.
    expect(sessionsOf(await ask('k0', { keys: [aliceKey] }))).toEqual(['a1']);
    const stranger = await connect(relay);
    stranger.frame({ type: 'roster', ref: 's1', keys: [aliceKey] });
    const seen = await stranger.waitFor('roster s1', (f) => 'ref' in f && f.ref === 's1');
    expect(seen).toMatchObject({ type: 'roster' });
    const entries = seen.type === 'roster' ? seen.entries : [];
    expect(entries).toHaveLength(1);
    expect(Object.keys(entries[0]!).sort()).toEqual(['age_ms', 'announcement']);
    expect(Object.keys(entries[0]!.announcement as object).sort()).toEqual(['details', 'key', 'name_bucket', 'name_tag', 'session', 'sig', 'slots', 'ts', 'v']);
    expect(JSON.stringify(seen)).not.toMatch(/secret|private plans|alice/);

    expect(sessionsOf(await ask('k', { keys: [aliceKey, bob.route.split('#')[0]] }))).toEqual(['a1', 'b1']);
    expect(sessionsOf(await ask('f', { fingerprints: [fingerprintOf(bob.key.publicKey)] }))).toEqual(['b1']);
    // A name bucket finds the version 3 announcements that name it; bob's version 1 names none.
    expect(sessionsOf(await ask('n', { name_bucket: nameBucket('alice') }))).toEqual(['a1']);
    expect(sessionsOf(await ask('n2', { name_bucket: nameBucket('bob') }))).toEqual([]);
    expect(sessionsOf(await ask('none', { keys: [newReader().route.split('#')[0]] }))).toEqual([]);
    expect(await ask('all', {})).toMatchObject({ type: 'refused', code: 'bad_frame', message: expect.stringContaining('never the whole roster') });
  });
});

describe('relay: durable store', () => {
  it('keeps queued messages across a restart on the same --db, and not acknowledged ones', async () => {
    const dir = await tempDir('interlink-relay-');
    dirs.push(dir);
    const reader = newReader();
    let relay = await startRelay({ dbDir: `${dir.path}/db` });
    const sender = await connect(relay);
    const ids = await sendAll(sender, reader.route, 20);
    const client = await connect(relay);
    await client.auth(reader);
    await client.waitForDeliveries(20);
    client.ack(reader.route, ids.slice(0, 5));
    await barrier(client);
    await relay.close();

    relay = await startRelay({ dbDir: `${dir.path}/db` });
    const again = await connect(relay);
    await again.auth(reader);
    const got = await again.waitForDeliveries(15);
    expect(got.map((d) => d.id)).toEqual(ids.slice(5));
    const more = await connect(relay);
    const [next] = await sendAll(more, reader.route, 1);
    expect(next).toBeGreaterThan(Math.max(...ids) + 1); // the barrier took one id; none is reused
  });

  // A shared store takes any number of relays: that is what it is for.
  it.skipIf(sharedStore)('refuses a second relay on the same --db while the first runs', async () => {
    const dir = await tempDir('interlink-relay-');
    dirs.push(dir);
    await startRelay({ dbDir: dir.path });
    await expect(RelayServer.start({ host: '127.0.0.1', port: 0, dbDir: dir.path })).rejects.toThrow(/in use by another relay/);
  });
});

describe('relay: accepted replies', () => {
  it('answers each send with its ref and an increasing id', async () => {
    const relay = await startRelay();
    const client = await connect(relay);
    const reader = newReader();
    const replies = await Promise.all(['a', 'b', 'c'].map((ref) => client.send(reader.route, { ref }, ref)));
    expect(replies.map((r) => (isAccepted(r) ? r.ref : r.type))).toEqual(['a', 'b', 'c']);
    const ids = replies.filter(isAccepted).map((r) => r.id);
    expect(ids[0]! < ids[1]! && ids[1]! < ids[2]!).toBe(true);
  });

  it('never reissues an id after a restart that lost the queues', async () => {
    const reader = newReader();
    const first = await startRelay();
    const before = await (await connect(first)).send(reader.route, { n: 1 });
    await first.close();
    const second = await startRelay();
    const after = await (await connect(second)).send(reader.route, { n: 2 });
    if (before.type !== 'accepted' || after.type !== 'accepted') throw new Error('refused');
    expect(after.id).toBeGreaterThan(before.id);
  });

  it('answers a plain HTTP request with 426', async () => {
    const relay = await startRelay();
    const response = await fetch(relay.url.replace('ws:', 'http:'));
    expect(response.status).toBe(426);
  });
});

describe('relay: expiry', () => {
  for (const store of ['in memory', '--db'] as const) {
    it(`drops messages older than --max-age, and a route nobody read goes with them; a fresh one stays (${store}); it survives a restart`, async () => {
      let now = 1_900_000_000_000;
      const dir = store === '--db' ? await tempDir() : undefined;
      if (dir !== undefined) dirs.push(dir);
      const options = { now: () => now, maxAgeMs: 8 * DAY, expireEveryMs: 20, ...(dir !== undefined && { dbDir: dir.path }) };
      const relay = await startRelay(options);
      const sender = await connect(relay);
      const [abandoned, fresh] = [newReader('gone'), newReader('fresh')];
      await sendAll(sender, abandoned.route, 3);
      now += 7 * DAY;
      const [kept] = await sendAll(sender, fresh.route, 1);
      await counts(relay, { routes: 2, messages: 4 });
      // A day later the first three are 8 days old and one millisecond: they go, route and all.
      now += DAY + 1;
      await counts(relay, { routes: 1, messages: 1 });
      if (dir !== undefined) {
        await relay.close();
        relays.splice(relays.indexOf(relay), 1);
        const again = await startRelay(options);
        expect(again.stats()).toMatchObject({ routes: 1, messages: 1 });
      }
      const reader = await connect(relays.at(-1)!);
      await reader.auth(fresh);
      expect((await reader.waitForDeliveries(1, fresh.route)).map((d) => d.id)).toEqual([kept]);
      await reader.auth(abandoned);
      // Frames come in order: whatever the relay had for the route came before this reply.
      await barrier(reader);
      expect(reader.deliveries(abandoned.route)).toEqual([]);
    });
  }
});
