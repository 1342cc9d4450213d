/** The agent's relay client against relays that misbehave. */
import { once } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocketServer, type WebSocket } from 'ws';
import { RelayClient } from '../../src/relay/client.js';
import { generateSigningKey } from '../../src/identity/ed25519.js';
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

describe('relay client', () => {
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
    const client = new RelayClient({ url: relay.url, key: generateSigningKey(), routes: [], silenceMs: 300 });
    clients.push(client);
    client.start();
    await once(client, 'connected');
    // Ping every 100 ms for 1 s (three silence periods): the client must stay.
    for (let i = 0; i < 10; i++) {
      relay.connections[0]!.ping();
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(relay.connections).toHaveLength(1);
    expect(client.connected).toBe(true);
  });
});
