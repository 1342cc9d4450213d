/**
 * A relay that answers slowly (issue 16, faults below): a proxy between the servers and a
 * real relay holds WebSocket frames before passing them on.
 * - Every frame 2.5 s late, both ways (a slow link): messages arrive once each and in
 *   order, nothing times out, and neither the log nor message_status says anything false.
 * - The relay's `accepted` 11 s late (its commits stall), past the sender's 10 s timeout:
 *   the sender says it timed out and offers again, the relay stores copies, the mailbox
 *   keeps one of each, and the late answers are recorded, so nothing stays pending.
 */
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, it, type TestContext } from 'vitest';
import WebSocket, { WebSocketServer, type RawData } from 'ws';
import { eventually, pair, peerPool, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { startRelay } from '../helpers/spawn-relay.js';

afterAll(reapAll);

/**
 * One test's world: its temp root, its servers, its proxy and relay, closed when the test
 * ends. The two tests run at once (each mostly waits on the proxy's clock), so nothing is
 * shared between them.
 */
async function scene(test: TestContext, delay: Delay): Promise<{ proxy: SlowProxy; start: (name: string, session: string) => Promise<Peer> }> {
  const root = await mkdtemp(join(tmpdir(), 'interlink-slow-'));
  const pool = peerPool(() => root);
  const relay = await startRelay({ db: join(root, 'relay-db') });
  const proxy = await SlowProxy.start(relay.url, delay);
  test.onTestFinished(async () => {
    await pool.closeAll();
    await proxy.close();
    await relay.child.kill();
    await rm(root, { recursive: true, force: true });
  });
  return { proxy, start: (name, session) => pool.start(name, session, proxy.url) };
}

/** How long the proxy holds a frame: by direction and the frame's text. */
type Delay = (direction: 'up' | 'down', text: string) => number;

/** Passes every frame (and the relay's heartbeat pings) between clients and `upstream`, each as late as `delay` says. */
class SlowProxy {
  /** The msg_id of every message offered through the proxy, once per offer. */
  readonly offers: string[] = [];
  private readonly sockets = new Set<WebSocket>();
  private readonly timers = new Set<NodeJS.Timeout>();

  private constructor(
    private readonly server: WebSocketServer,
    readonly url: string,
    private readonly upstream: string,
    private readonly delay: Delay,
  ) {
    server.on('connection', (client) => this.connected(client));
  }

  static async start(upstream: string, delay: Delay): Promise<SlowProxy> {
    const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await once(server, 'listening');
    const address = server.address();
    if (typeof address !== 'object' || address === null) throw new Error('the proxy has no address');
    return new SlowProxy(server, `ws://127.0.0.1:${address.port}`, upstream, delay);
  }

  async close(): Promise<void> {
    for (const timer of this.timers) clearTimeout(timer);
    for (const socket of this.sockets) socket.terminate();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private later(ms: number, fn: () => void): void {
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      fn();
    }, ms);
    this.timers.add(timer);
  }

  private connected(client: WebSocket): void {
    const relay = new WebSocket(this.upstream, { perMessageDeflate: false });
    for (const socket of [client, relay]) {
      this.sockets.add(socket);
      socket.on('error', () => undefined);
      socket.on('close', () => {
        this.sockets.delete(socket);
        client.close();
        relay.close();
      });
    }
    // Frames a side sent before the relay connection opened wait for it (on top of the delay).
    const early: RawData[] = [];
    relay.on('open', () => early.splice(0).forEach((data) => relay.send(data, { binary: false })));
    client.on('message', (data) =>
      this.later(this.delay('up', data.toString()), () => {
        const frame = JSON.parse(data.toString()) as { type?: string; payload?: { msg_id?: string } };
        if (frame.type === 'send' && frame.payload?.msg_id !== undefined) this.offers.push(frame.payload.msg_id);
        if (relay.readyState === WebSocket.OPEN) relay.send(data, { binary: false });
        else if (relay.readyState === WebSocket.CONNECTING) early.push(data);
      }),
    );
    relay.on('message', (data) =>
      this.later(this.delay('down', data.toString()), () => {
        if (client.readyState === WebSocket.OPEN) client.send(data, { binary: false });
      }),
    );
    relay.on('ping', (data) => this.later(this.delay('down', ''), () => client.readyState === WebSocket.OPEN && client.ping(data)));
  }
}

async function texts(p: Peer): Promise<string[]> {
  return (await p.call<{ messages: { text: string }[] }>('receive_messages', { limit: 100 })).messages.map((m) => m.text);
}

/** The events of the structured log lines a server wrote on stderr. */
function events(stderr: string): string[] {
  return stderr
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => (JSON.parse(line) as { event: string }).event);
}

/** The texts bob has once there are `count`. */
async function arrived(bob: Peer, count: number): Promise<string[]> {
  return eventually(
    async () => {
      const got = await texts(bob);
      return got.length >= count ? got : undefined;
    },
    60_000,
    `${count} messages at bob`,
  );
}

async function stateOf(alice: Peer, msg_id: string): Promise<string> {
  return (await alice.call<{ state: string }>('message_status', { msg_id })).state;
}

describe.concurrent('a relay that answers slowly', () => {
  it('delivers every message once and in order when every frame is 2.5 s late both ways, and says nothing false while it waits', async (test) => {
    const { expect } = test;
    const { start } = await scene(test, () => 2_500);
    const alice = await start('alice', 'a1');
    const bob = await start('bob', 'b1');
    await pair(alice, bob);

    const sent = ['one', 'two', 'three', 'four', 'five', 'six'];
    const ids: string[] = [];
    for (const text of sent) {
      const { msg_id } = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text });
      // Nothing is claimed before the relay said it: pending until its answer, 5 s away.
      expect(await stateOf(alice, msg_id)).toBe('pending');
      ids.push(msg_id);
    }

    const all = await arrived(bob, sent.length);
    expect(all).toEqual(sent);
    for (const msg_id of ids) {
      await eventually(async () => ((await stateOf(alice, msg_id)) === 'receiver_stored' ? true : undefined), 30_000, 'receipts');
    }
    expect(await texts(bob)).toEqual(sent);
    // Slow is not down, and not a refusal: no outage, silence or refused send was logged.
    for (const p of [alice, bob]) {
      expect(events(p.stderr()).filter((e) => /relay_(unreachable|silent|refused_send)|inbound_/.test(e)), p.stderr()).toEqual([]);
    }
  }, 120_000);

  it("keeps no message pending for ever when the relay's answers to sends come after the 10 s timeout: offered again, stored once, recorded accepted by the late answer", async (test) => {
    const { expect } = test;
    // A relay whose commits stall: its `accepted` comes 11 s late, everything else at once.
    const { proxy, start } = await scene(test, (direction, text) => (direction === 'down' && text.includes('"type":"accepted"') ? 11_000 : 200));
    const alice = await start('alice', 'a1');
    const bob = await start('bob', 'b1');
    await pair(alice, bob);

    const sent = ['one', 'two', 'three'];
    const ids: string[] = [];
    for (const text of sent) ids.push((await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text })).msg_id);
    expect(await arrived(bob, sent.length)).toEqual(sent);

    // The log says what happened, once per episode (agent/refusal-log.ts): the relay did not answer in time.
    const timeouts = await eventually(
      async () => {
        const lines = alice.stderr().split('\n').filter((line) => line.includes('"event":"relay_refused_send"'));
        return lines.length >= 1 ? lines : undefined;
      },
      20_000,
      'the timeouts in the log',
    );
    for (const line of timeouts) expect(JSON.parse(line)).toMatchObject({ code: 'timeout' });
    // Its late answers still count: nothing stays pending, each was offered a bounded number of times.
    await eventually(async () => ((await alice.call<{ pending: unknown[] }>('list_pending')).pending.length === 0 ? true : undefined), 30_000, 'nothing pending');
    for (const msg_id of ids) {
      expect(['bus_accepted', 'receiver_stored']).toContain(await stateOf(alice, msg_id));
      expect(proxy.offers.filter((id) => id === msg_id).length).toBeLessThanOrEqual(3);
    }
    // The copies the relay stored meanwhile reach bob's mailbox once each.
    expect(await texts(bob)).toEqual(sent);
  }, 90_000);
});
