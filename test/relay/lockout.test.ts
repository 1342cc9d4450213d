/**
 * No address locks the others out of a relay process (issue 38, point 1), with the
 * relay's default caps on loopback (1,024 in all, 256 per address there): WebSockets that
 * answer pings and prove keys from 127.0.0.2 fill only that address's cap; with 127.0.0.3
 * to 127.0.0.5 the relay is full, and an honest client on 127.0.0.1 still gets in, in
 * place of the newest connection of the heaviest address; raw sockets that never speak
 * count against their address too, and are closed at the upgrade deadline.
 */
import { connect as tcpConnect, type Socket } from 'node:net';
import { once } from 'node:events';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { messageOf } from '../../src/errors.js';
import { startRelay, type RelayProcess } from '../helpers/spawn-relay.js';
import { newReader, TestClient } from '../helpers/relay-test-client.js';

const PER_ADDRESS = 256;
const TOTAL = 1024;
const BATCH = 32;

let relay: RelayProcess;
const clients: TestClient[] = [];
const sockets: Socket[] = [];

beforeAll(async () => {
  relay = await startRelay();
});

afterAll(async () => {
  for (const s of sockets) s.destroy();
  await Promise.all(clients.map((c) => c.terminate().catch(() => undefined)));
  await relay?.child.kill();
});

/** A WebSocket from `localAddress` that proves a fresh key; or the line the relay refused it with. */
async function join(localAddress: string): Promise<TestClient | string> {
  try {
    const client = await TestClient.connect(relay.url, { localAddress });
    clients.push(client);
    expect(await client.prove()).toMatchObject({ type: 'auth_ok', read: false });
    return client;
  } catch (err) {
    return messageOf(err);
  }
}

/** `count` attempts from `localAddress`, BATCH at a time: the clients let in and the refusals. */
async function flood(localAddress: string, count: number): Promise<{ joined: TestClient[]; refused: string[] }> {
  const joined: TestClient[] = [];
  const refused: string[] = [];
  for (let done = 0; done < count; done += BATCH) {
    const results = await Promise.all(Array.from({ length: Math.min(BATCH, count - done) }, () => join(localAddress)));
    for (const r of results) typeof r === 'string' ? refused.push(r) : joined.push(r);
  }
  return { joined, refused };
}

async function honestRoundTrip(): Promise<void> {
  const honest = await join('127.0.0.1');
  if (typeof honest === 'string') throw new Error(`the honest client was refused: ${honest}`);
  const reader = newReader();
  expect(await honest.auth(reader)).toMatchObject({ type: 'auth_ok', route: reader.route });
  expect(await honest.send(reader.route, { hello: 'still served' })).toMatchObject({ type: 'accepted' });
  expect(await honest.waitForDeliveries(1, reader.route)).toHaveLength(1);
}

describe('a relay process with its default caps', () => {
  it('lets one address fill only its own cap, and an honest client in beside it', async () => {
    const { joined, refused } = await flood('127.0.0.2', PER_ADDRESS + 20);
    expect(joined).toHaveLength(PER_ADDRESS);
    expect(refused).toHaveLength(20);
    expect(refused[0]).toBe(`503: interlink relay: the relay holds its maximum of ${PER_ADDRESS} connections from 127.0.0.2; close one or try again later`);
    await honestRoundTrip();
  });

  it('when full, admits an address holding few connections in place of the newest of the heaviest', async () => {
    // 127.0.0.2 holds 256, the honest address 1: three more addresses fill the rest.
    const third = await flood('127.0.0.3', PER_ADDRESS);
    const fourth = await flood('127.0.0.4', PER_ADDRESS);
    const fifth = await flood('127.0.0.5', TOTAL - 1 - 3 * PER_ADDRESS);
    expect([third.joined.length, fourth.joined.length, fifth.joined.length]).toEqual([PER_ADDRESS, PER_ADDRESS, TOTAL - 1 - 3 * PER_ADDRESS]);
    // Full, and 127.0.0.5 holds one fewer than the heaviest: moving one would only swap who holds more.
    expect(await join('127.0.0.5')).toMatch(/^503: interlink relay: the relay holds its maximum of 1024 connections/);
    expect(clients.filter((c) => c.isOpen)).toHaveLength(TOTAL);
    // The honest address holds one: it gets in, and the newest connection of one of the heaviest addresses is closed, "try again later".
    await honestRoundTrip();
    await expect.poll(() => clients.filter((c) => !c.isOpen).length, { timeout: 10_000 }).toBe(1);
    const gone = clients.find((c) => !c.isOpen)!;
    // One of the heaviest addresses' (127.0.0.2 to .4 hold 256 each; which is newest is the relay's accept order, not the order the handshakes ended here).
    expect([...clients.slice(0, PER_ADDRESS), ...third.joined, ...fourth.joined]).toContain(gone);
    expect(await gone.closed).toMatchObject({ code: 1013, reason: expect.stringContaining('the relay is full') });
  });

  it('counts raw sockets that never speak against their address, and closes them at the deadline', async () => {
    for (const c of clients.splice(0)) await c.terminate();
    const opened = await Promise.all(
      Array.from({ length: PER_ADDRESS + 10 }, async () => {
        const socket = tcpConnect({ host: '127.0.0.1', port: relay.port, localAddress: '127.0.0.6' });
        sockets.push(socket);
        socket.on('error', () => undefined);
        await once(socket, 'connect');
        let answer = '';
        socket.on('data', (d: Buffer) => (answer += d.toString()));
        return { socket, answer: () => answer, gone: once(socket, 'close') };
      }),
    );
    // Past the address's cap the socket is answered at once, before it says anything.
    await expect.poll(() => opened.filter((o) => o.answer().startsWith('HTTP/1.1 503')).length, { timeout: 10_000 }).toBe(10);
    expect(opened.find((o) => o.answer() !== '')!.answer()).toContain(`maximum of ${PER_ADDRESS} connections from 127.0.0.6`);
    await honestRoundTrip();
    // The rest are closed at the relay's 10 s upgrade deadline.
    await Promise.all(opened.map((o) => o.gone));
  }, 30_000);
});
