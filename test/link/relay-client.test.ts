/** The agent's relay client against relays that misbehave. */
import { once } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocketServer, type WebSocket } from 'ws';
import { RelayClient } from '../../src/link/client.js';
import type { SendOutcome } from '../../src/link/sends.js';
import { PROTOCOL_VERSION } from '../../src/wire/frames.js';
import { generateSigningKey } from '../../src/identity/ed25519.js';
import { eventually } from '../helpers/mcp.js';
import { greet } from '../helpers/relay-greeting.js';

const servers: WebSocketServer[] = [];
const clients: RelayClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  await Promise.all(servers.splice(0).map((s) => new Promise<void>((resolve) => {
    for (const socket of s.clients) socket.terminate();
    s.close(() => resolve());
  })));
});

async function silentRelay(): Promise<{ url: string; connections: WebSocket[] }> {
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  servers.push(server);
  await once(server, 'listening');
  const connections: WebSocket[] = [];
  server.on('connection', (socket) => {
    socket.on('error', () => undefined);
    connections.push(socket);
    // Greets like a relay, then never says anything again (no pings).
    greet(socket);
  });
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  return { url: `ws://127.0.0.1:${port}`, connections };
}

/** Greets, then answers each send `accepted` after `delayMs` (twice, the second a stray repeat). */
async function slowRelay(delayMs: number): Promise<{ url: string }> {
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  servers.push(server);
  await once(server, 'listening');
  server.on('connection', (socket) => {
    socket.on('error', () => undefined);
    greet(socket);
    let id = 0;
    socket.on('message', (data) => {
      const frame = JSON.parse(data.toString()) as { type: string; ref?: string };
      if (frame.type !== 'send') return;
      const answer = JSON.stringify({ v: PROTOCOL_VERSION, type: 'accepted', ref: frame.ref, id: ++id });
      setTimeout(() => {
        socket.send(answer);
        socket.send(answer);
      }, delayMs);
    });
  });
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  return { url: `ws://127.0.0.1:${port}` };
}

/** Greets, then answers each roster request with an empty roster, or refuses it `rate_limited`. */
async function rosterRelay(answer: 'empty' | 'refuse'): Promise<{ url: string }> {
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  servers.push(server);
  await once(server, 'listening');
  server.on('connection', (socket) => {
    socket.on('error', () => undefined);
    greet(socket);
    socket.on('message', (data) => {
      const frame = JSON.parse(data.toString()) as { type: string; ref?: string };
      if (frame.type !== 'roster') return;
      const reply = answer === 'empty' ? { type: 'roster', ref: frame.ref, entries: [] } : { type: 'refused', ref: frame.ref, code: 'rate_limited', message: 'busy' };
      socket.send(JSON.stringify({ v: PROTOCOL_VERSION, ...reply }));
    });
  });
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  return { url: `ws://127.0.0.1:${port}` };
}

describe('relay client', () => {
  it('tells an empty roster from none: a refused or unsent roster request is no answer', async () => {
    const offlineSigning = generateSigningKey();
    const offlineKey = offlineSigning.publicKey.toString('base64url');
    const offline = new RelayClient({ url: 'ws://127.0.0.1:9', key: offlineSigning, routes: [] });
    expect(await offline.rosterAnswer({ keys: [offlineKey] })).toBeUndefined();
    expect(await offline.roster({ keys: [offlineKey] })).toEqual([]);
    for (const [answer, expected] of [['empty', []], ['refuse', undefined]] as const) {
      // A connection that reads no route is ready once the relay is trusted.
      const client = new RelayClient({ url: (await rosterRelay(answer)).url, key: generateSigningKey(), routes: [], readOnConnect: false });
      clients.push(client);
      client.start();
      expect(await client.ready(10_000)).toBe(true);
      expect(await client.rosterAnswer({ keys: [offlineKey] })).toEqual(expected);
    }
  });

  it("times a send out, and passes the relay's answer that came after to `late`, once", async () => {
    const relay = await slowRelay(300);
    const client = new RelayClient({ url: relay.url, key: generateSigningKey(), routes: [], requestTimeoutMs: 100 });
    clients.push(client);
    client.start();
    await once(client, 'connected');
    const first: SendOutcome[] = [];
    const outcome = await client.send('k#s', { v: 3 }, { late: (answer) => first.push(answer) });
    expect(outcome).toMatchObject({ accepted: false, code: 'timeout' });
    // The second send's answers come after the first's, on the same connection.
    const second: SendOutcome[] = [];
    await client.send('k#s', { v: 3 }, { late: (answer) => second.push(answer) });
    await eventually(async () => (second.length > 0 ? true : undefined), 5_000, 'the late answer to the second send');
    expect(first).toEqual([{ accepted: true, id: 1 }]);
    expect(second).toEqual([{ accepted: true, id: 2 }]);
  });


  it('replaces a connection that has gone silent', async () => {
    const relay = await silentRelay();
    const client = new RelayClient({ url: relay.url, key: generateSigningKey(), routes: [], silenceMs: 300 });
    clients.push(client);
    const reconnected = new Promise<void>((resolve) => {
      let opens = 0;
      client.on('connected', () => {
        if (++opens === 2) resolve();
      });
    });
    client.start();
    await reconnected;
    expect(relay.connections.length).toBeGreaterThanOrEqual(2);
  });

  it('keeps a connection that the relay pings', async () => {
    const relay = await silentRelay();
    // A silence period well above a loaded machine's event-loop stalls: pings 100 ms apart always land within it.
    const client = new RelayClient({ url: relay.url, key: generateSigningKey(), routes: [], silenceMs: 1_000 });
    clients.push(client);
    client.start();
    await once(client, 'connected');
    // Ping every 100 ms for 3 s (three silence periods): the client must stay.
    for (let i = 0; i < 30; i++) {
      relay.connections[0]!.ping();
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(relay.connections).toHaveLength(1);
    expect(client.connected).toBe(true);
  });
});
