/**
 * The relay's memory bounds one by one (issue 13, point 3; DESIGN.md "Bounded by
 * construction"): only a pong that echoes our ping counts as life; a peer's frames wait
 * unread while its replies do; roster replies one at a time per connection, never to a
 * blocked one, sharing one Buffer, within a relay-wide budget; the roster bounded in bytes;
 * connection caps in total and per address, refused with HTTP 503 at the upgrade.
 * slow-readers.test.ts shows them together against a relay process.
 */
import type { IncomingMessage } from 'node:http';
import { once } from 'node:events';
import WebSocket, { WebSocketServer } from 'ws';
import { afterEach, describe, expect, it } from 'vitest';
import { generateSigningKey } from '../../src/identity/ed25519.js';
import { signAnnouncement } from '../../src/presence/announcement.js';
import { isLoopbackAddress, normalizeAddress } from '../../src/relay/address.js';
import { greet } from '../helpers/relay-greeting.js';
import { RelayClient } from '../../src/link/client.js';
import { HIGH_WATER_BYTES, READ_PAUSE_BYTES } from '../../src/relay/connection.js';
import { relayFrame } from '../../src/wire/frames.js';
import { DEFAULT_ROSTER_LIMITS, Roster } from '../../src/relay/roster.js';
import { RosterReplies } from '../../src/relay/roster-replies.js';
import type { RelayServer } from '../../src/relay/server.js';
import { startTestRelay } from '../helpers/relay-store.js';
import { expectOneLine, runCli, userEnv } from '../helpers/cli.js';
import { FakeSocket, fakeConnection } from '../helpers/fake-relay-socket.js';
import { tempDir } from '../helpers/fixtures.js';
import { newReader } from '../helpers/relay-test-client.js';

const key = generateSigningKey();
const announce = (session: string, summary = 'working') => signAnnouncement(key, { name: 'agent', session, cwd: '/repo', git_root: '/repo', summary, ts: 1 });

describe('heartbeat', () => {
  it('counts only a pong that echoes the last ping', () => {
    const socket = new FakeSocket();
    const { conn } = fakeConnection(socket);
    conn.beat();
    const first = socket.pingPayloads[0]!;
    expect(first.length).toBeGreaterThanOrEqual(8);
    conn.pong(Buffer.from('unsolicited'));
    conn.pong(Buffer.alloc(0));
    conn.beat();
    expect(socket.terminated).toBe(true);

    const honest = new FakeSocket();
    const { conn: answering } = fakeConnection(honest);
    answering.beat();
    answering.pong(Buffer.from(honest.pingPayloads[0]!));
    answering.beat();
    expect(honest.terminated).toBe(false);
    expect(honest.pingPayloads[1]!.equals(honest.pingPayloads[0]!)).toBe(false);
    // An echo of the ping before the last one is stale.
    answering.pong(honest.pingPayloads[0]!);
    answering.beat();
    expect(honest.terminated).toBe(true);
  });
});

describe('reading', () => {
  it("pauses while more than READ_PAUSE_BYTES of the peer's replies wait, and resumes once they drain", () => {
    const socket = new FakeSocket();
    const { conn } = fakeConnection(socket);
    conn.sendText('x'.repeat(READ_PAUSE_BYTES));
    expect(socket.paused).toBe(false);
    conn.sendText('y');
    expect([socket.paused, conn.readingPaused, conn.blocked]).toEqual([true, true, false]);
    socket.drain(READ_PAUSE_BYTES + 1);
    expect(socket.paused).toBe(true);
    conn.sendText('z');
    socket.drain(READ_PAUSE_BYTES);
    expect([socket.paused, conn.readingPaused]).toEqual([false, false]);
  });
});

describe('roster replies', () => {
  const mine = { keys: [key.publicKey.toString('base64url')] };

  function setup(budget?: number) {
    const roster = new Roster(() => 0);
    roster.announce(announce('a'));
    return { roster, replies: new RosterReplies(roster, budget) };
  }

  it('go one at a time per connection and never to a blocked one', () => {
    const { replies } = setup();
    const socket = new FakeSocket();
    const { conn } = fakeConnection(socket);
    expect(replies.reply(conn, 'q1', mine)).toBeUndefined();
    expect(replies.reply(conn, 'q2', mine)).toMatch(/previous roster reply/);
    socket.drain(0);
    expect(replies.reply(conn, 'q3', mine)).toBeUndefined();
    const frames = socket.sent.map((text) => relayFrame.parse(JSON.parse(text)));
    expect(frames.map((f) => [f.type, 'ref' in f && f.ref])).toEqual([
      ['roster', 'q1'],
      ['roster', 'q3'],
    ]);
    expect(frames[0]).toMatchObject({ entries: [{ announcement: { session: 'a' } }] });

    socket.drain(0);
    conn.sendText('x'.repeat(HIGH_WATER_BYTES + 1));
    expect(replies.reply(conn, 'q4', mine)).toMatch(/unread replies/);
  });

  it('hold only what the query found, and stay within the relay-wide budget', () => {
    const { roster, replies } = setup();
    roster.announce(signAnnouncement(generateSigningKey(), { name: 'other', session: 'x', cwd: '/', git_root: '/', summary: '', ts: 1 }));
    const socket = new FakeSocket();
    expect(replies.reply(fakeConnection(socket, 1).conn, 'q1', mine)).toBeUndefined();
    expect((JSON.parse(socket.sent[0]!) as { entries: unknown[] }).entries).toHaveLength(1);

    // Room for one reply of one entry: a second waiting reply is refused until the first leaves.
    const bytes = Buffer.byteLength(JSON.stringify([{ announcement: announce('a'), age_ms: 0 }]));
    const tight = setup(bytes);
    const [x, y] = [fakeConnection(new FakeSocket(), 1), fakeConnection(new FakeSocket(), 2)];
    expect(tight.replies.reply(x.conn, 'q1', mine)).toBeUndefined();
    expect(tight.replies.reply(y.conn, 'q2', mine)).toMatch(/busy sending rosters/);
    tight.replies.release(x.conn);
    expect(tight.replies.reply(y.conn, 'q3', mine)).toBeUndefined();
  });
});

describe('the client', () => {
  it('takes a roster refused `rate_limited` as an empty roster at once, not at its request timeout', async () => {
    const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await once(server, 'listening');
    server.on('connection', (socket) => {
      greet(socket);
      socket.on('message', (data) => {
        const frame = JSON.parse(String(data)) as { type: string; ref?: string; route?: string };
        if (frame.type === 'auth') socket.send(JSON.stringify({ v: 1, type: 'auth_ok', route: frame.route }));
        if (frame.type === 'roster') socket.send(JSON.stringify({ v: 1, type: 'refused', ref: frame.ref, code: 'rate_limited', message: 'busy' }));
      });
    });
    const address = server.address();
    const port = typeof address === 'object' && address !== null ? address.port : 0;
    const reader = newReader();
    const client = new RelayClient({ url: `ws://127.0.0.1:${port}`, key: reader.key, routes: [reader.route], requestTimeoutMs: 3_600_000 });
    client.start();
    try {
      expect(await client.ready(5_000)).toBe(true);
      expect(await client.roster({ keys: [reader.key.publicKey.toString('base64url')] })).toEqual([]);
    } finally {
      client.close();
      for (const socket of server.clients) socket.terminate();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe('roster bytes', () => {
  it('evicts the stalest entries past its byte bound', () => {
    const summary = 'x'.repeat(1_000);
    const size = Buffer.byteLength(JSON.stringify(announce('s0', summary)));
    const roster = new Roster(() => 0, { ...DEFAULT_ROSTER_LIMITS, maxBytes: 3 * size });
    for (const session of ['s0', 's1', 's2', 's3']) roster.announce(announce(session, summary));
    expect(roster.list().map((e) => e.announcement.session)).toEqual(['s3', 's2', 's1']);
    expect(roster.bytes).toBe(3 * size);
    roster.announce(announce('s4'));
    expect(roster.list().map((e) => e.announcement.session)).toEqual(['s4', 's3', 's2']);
  });
});

describe('connection caps', () => {
  it('see an IPv4-mapped address as IPv4', () => {
    expect(normalizeAddress('::ffff:192.0.2.1')).toBe('192.0.2.1');
    expect(normalizeAddress('2001:DB8::1')).toBe('2001:db8::1');
    expect(normalizeAddress(undefined)).toBe('unknown');
    expect(normalizeAddress('::FFFF:127.0.0.1')).toBe('127.0.0.1');
    expect(['127.0.0.1', '127.1.2.3', '::1', '::ffff:127.0.0.1'].every(isLoopbackAddress)).toBe(true);
    expect(['192.0.2.1', '::2', 'unknown', '128.0.0.1'].some(isLoopbackAddress)).toBe(false);
  });

  it('are set by relay flags that refuse anything but a whole number from 1, in one line (exit 64)', async () => {
    const dir = await tempDir();
    try {
      const env = userEnv({ root: dir.path, configDir: `${dir.path}/config`, stateDir: `${dir.path}/state` });
      for (const [flag, value] of [['--max-connections', '0'], ['--max-connections-per-address', 'many'], ['--max-connections', '-1']] as const) {
        const line = expectOneLine(await runCli(['relay', '--addr', '127.0.0.1:0', flag, value], env), 64, `${flag} ${value}`);
        expect(line).toContain('is not a whole number of at least 1');
      }
    } finally {
      await dir.remove();
    }
  });

  let relay: RelayServer | undefined;
  afterEach(async () => {
    await relay?.close();
    relay = undefined;
  });

  it('refuse a connection past the total with HTTP 503 at the upgrade, and admit again once one closes', async () => {
    relay = await startTestRelay({ maxConnections: 1 });
    const first = new WebSocket(relay.url);
    await once(first, 'message');
    const second = new WebSocket(relay.url);
    second.on('error', () => undefined);
    const [, response] = (await once(second, 'unexpected-response')) as [unknown, IncomingMessage];
    let body = '';
    for await (const chunk of response) body += String(chunk);
    expect(response.statusCode).toBe(503);
    expect(body).toMatch(/maximum of 1 connections/);
    first.close();
    await once(first, 'close');
    const third = new WebSocket(relay.url);
    await once(third, 'message');
    third.close();
    await once(third, 'close');
  });
});
