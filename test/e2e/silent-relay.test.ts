/**
 * A relay that takes the connection and never answers (issue 16, faults below): beside an
 * honest relay, the servers keep working through the honest one, the log and `status`
 * name the silent one, and once a relay answers at that address it is used again, with
 * every message still stored once. Real relay processes, real serve processes, a raw TCP
 * listener for the silent relay.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runCli, userEnv } from '../helpers/cli.js';
import { eventually, pair, peerPool, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { freePort, startRelay } from '../helpers/spawn-relay.js';

let root: string;
const pool = peerPool(() => root);
let hole: { server: Server; sockets: Socket[] } | undefined;

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-silent-'));
});
afterEach(async () => {
  await pool.closeAll();
  await closeHole();
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

/** Accepts TCP connections on `port` and never writes a byte. */
async function openHole(port: number): Promise<void> {
  const sockets: Socket[] = [];
  const server = createServer((socket) => {
    sockets.push(socket);
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  hole = { server, sockets };
}

async function closeHole(): Promise<void> {
  if (hole === undefined) return;
  for (const socket of hole.sockets) socket.destroy();
  await new Promise((resolve) => hole!.server.close(resolve));
  hole = undefined;
}

async function texts(bob: Peer): Promise<string[]> {
  return (await bob.call<{ messages: { text: string }[] }>('receive_messages', { limit: 100 })).messages.map((m) => m.text);
}

async function statusLine(p: Peer, relays: string, url: string): Promise<string | undefined> {
  const run = await runCli(['status'], userEnv({ root, configDir: p.config, stateDir: p.state }, { INTERLINK_URL: relays }));
  return run.stdout.split('\n').find((line) => line.startsWith('relay') && line.includes(url));
}

describe('a relay that takes the connection and never answers', () => {
  it('does not stop the servers: the honest relay carries the mail, the log and status name the silent one, and it is used once it answers', async () => {
    const port = await freePort();
    const silentUrl = `ws://127.0.0.1:${port}`;
    await openHole(port);
    const honest = await startRelay({ db: join(root, 'honest-db') });
    const relays = `${honest.url},${silentUrl}`;
    const alice = await pool.start('alice', 'a1', relays);
    const bob = await pool.start('bob', 'b1', relays);
    await pair(alice, bob);

    const send = async (text: string) => {
      await eventually(async () => (await alice.call('send_message', { to: 'bob', session: 'b1', text }).then(() => true).catch(() => undefined)), 20_000, `send ${text}`);
    };
    for (const text of ['one', 'two', 'three']) await send(text);
    await eventually(async () => ((await texts(bob)).length === 3 ? true : undefined), 20_000, 'three messages through the honest relay');

    // Said where a person looks: the server's log, and status.
    await eventually(async () => (/relay_(unreachable|silent)/.test(alice.stderr()) && alice.stderr().includes(silentUrl) ? true : undefined), 20_000, 'the silent relay in the log');
    expect(await statusLine(alice, relays, silentUrl)).toMatch(/no answer/);

    // The fault clears: a relay answers at that address.
    await closeHole();
    await startRelay({ port, db: join(root, 'second-db') });
    await eventually(async () => (/answers$|answers,/.test((await statusLine(alice, relays, silentUrl)) ?? '') ? true : undefined), 20_000, 'status: the relay answers');
    await eventually(async () => (alice.stderr().includes('relay_reachable') ? true : undefined), 30_000, 'the log says it answers again');
    for (const text of ['four', 'five']) await send(text);
    const all = await eventually(async () => {
      const got = await texts(bob);
      return got.length >= 5 ? got : undefined;
    }, 30_000, 'five messages');
    // Offered to both relays now, stored once.
    expect(all).toEqual(['one', 'two', 'three', 'four', 'five']);
    expect(alice.pid()).not.toBeNull();
    expect(bob.pid()).not.toBeNull();
  }, 120_000);
});
