/**
 * Each sender's messages are read in the order they were sent (DESIGN.md, "The mailbox":
 * fetch order), whatever the relays did in between: 30 messages sent while the receiver
 * is offline, read in acknowledged pages of 7, through `conversation_history` and through
 * `inbox --json` — across a relay kill -9, two relays that each hold part of them, and a
 * receiver killed mid-read. Two identities paired with `peers add` at the CLI, as a person
 * would, each with its own state root.
 */
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { reapCli, runCli } from '../helpers/codex.js';
import { eventually, kill9, startPeer, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { freePort, startRelay, type RelayProcess } from '../helpers/spawn-relay.js';

const COUNT = 30;
const PAGE = 7;

let root: string;
const open: Peer[] = [];

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-order-'));
});
afterEach(async () => {
  await Promise.all(open.splice(0).map((p) => p.close().catch(() => undefined)));
  await reapAll();
  await reapCli();
  await rm(root, { recursive: true, force: true });
});

/** The same directories `startPeer` gives `name`, for the CLI. */
function cliEnv(name: string): Record<string, string> {
  return { HOME: join(root, name), INTERLINK_CONFIG_DIR: join(root, name, 'config'), INTERLINK_STATE_DIR: join(root, name, 'state') };
}

async function cli(name: string, args: string[]): Promise<string> {
  const result = await runCli(args, cliEnv(name));
  if (result.code !== 0) throw new Error(`interlink-mcp ${args.join(' ')} exited ${result.code}: ${result.stderr}`);
  return result.stdout;
}

/** keygen, whoami and `peers add` both ways, at the CLI. */
async function pairAtCli(): Promise<{ aliceKey: string }> {
  const keys: Record<string, string> = {};
  for (const name of ['alice', 'bob']) {
    await mkdir(join(root, name, 'config'), { recursive: true });
    await cli(name, ['keygen']);
    keys[name] = (JSON.parse(await cli(name, ['whoami', '--json'])) as { key: string }).key;
  }
  await cli('alice', ['peers', 'add', 'bob', keys.bob!]);
  await cli('bob', ['peers', 'add', 'alice', keys.alice!]);
  return { aliceKey: keys.alice! };
}

async function peer(name: string, session: string, relays: string): Promise<Peer> {
  const p = await startPeer({ root, name, session, relays });
  open.push(p);
  return p;
}

function crash(p: Peer): void {
  kill9(p);
  open.splice(open.indexOf(p), 1);
}

const label = (i: number) => String(i + 1).padStart(2, '0');

/** Sends `count` messages to bob's offline session b1 all at once, as an agent making parallel calls might. */
async function sendBurst(alice: Peer, from: number, count: number): Promise<void> {
  await Promise.all(
    Array.from({ length: count }, (_, j) => alice.call('send_message', { to: 'bob', session: 'b1', text: label(from + j) })),
  );
}

/** Waits until a relay has accepted everything alice sent (her outbox has nothing pending). */
async function accepted(alice: Peer): Promise<void> {
  await eventually(async () => ((await alice.call<{ pending: unknown[] }>('list_pending')).pending.length === 0 ? true : undefined), 20_000, 'all accepted');
}

interface Page {
  messages: { text: string; receipt: { sender: string; msg_id: string } }[];
  more: boolean;
}

/** Waits until all `COUNT` messages are in bob's mailbox (fetching consumes nothing). */
async function allArrived(bob: Peer): Promise<void> {
  await eventually(async () => ((await bob.call<Page>('receive_messages', { limit: 100 })).messages.length === COUNT ? true : undefined), 30_000, `${COUNT} messages in the mailbox`);
}

/** Reads `pages` pages of 7, acknowledging each, and returns their texts. */
async function readPages(bob: Peer, pages: number): Promise<string[]> {
  const texts: string[] = [];
  for (let i = 0; i < pages; i++) {
    const page = await bob.call<Page>('receive_messages', { limit: PAGE });
    texts.push(...page.messages.map((m) => m.text));
    if (page.messages.length > 0) await bob.call('acknowledge_messages', { messages: page.messages.map((m) => m.receipt) });
    if (!page.more) break;
  }
  return texts;
}

const expected = Array.from({ length: COUNT }, (_, i) => label(i));

/** Every view bob has, after the pages: history and the CLI's inbox, in the order sent. */
async function expectEveryViewInOrder(bob: Peer): Promise<void> {
  const history = await bob.call<{ messages: { direction: string; text: string }[] }>('conversation_history', { peer: 'alice', limit: 100 });
  expect(history.messages.filter((m) => m.direction === 'inbound').map((m) => m.text)).toEqual(expected);
  const inbox = JSON.parse(await cli('bob', ['inbox', '--json', '--peer', 'alice'])) as { messages: { text: string }[] };
  expect(inbox.messages.map((m) => m.text)).toEqual(expected);
}

describe('order of one sender’s messages', () => {
  it('reads 30 messages sent to an offline session in the order sent, in acknowledged pages, across a relay kill -9', async () => {
    await pairAtCli();
    const port = await freePort();
    const db = join(root, 'relay-db');
    const relay = await startRelay({ port, db });
    const alice = await peer('alice', 'a1', relay.url);
    await sendBurst(alice, 0, COUNT);
    await accepted(alice);
    await relay.child.kill('SIGKILL');
    await startRelay({ port, db });

    const bob = await peer('bob', 'b1', relay.url);
    await allArrived(bob);
    expect(await readPages(bob, 10)).toEqual(expected);
    await expectEveryViewInOrder(bob);
  });

  it('keeps the order when two relays each accepted part of the messages', async () => {
    await pairAtCli();
    const [portA, portB] = [await freePort(), await freePort()];
    const [dbA, dbB] = [join(root, 'relay-a'), join(root, 'relay-b')];
    const urls = `ws://127.0.0.1:${portA},ws://127.0.0.1:${portB}`;
    let relayA: RelayProcess = await startRelay({ port: portA, db: dbA });
    const alice = await peer('alice', 'a1', urls);
    // 01–10 reach only relay A, 11–20 only relay B, 21–30 both.
    await sendBurst(alice, 0, 10);
    await accepted(alice);
    await startRelay({ port: portB, db: dbB });
    await relayA.child.kill('SIGKILL');
    await sendBurst(alice, 10, 10);
    await accepted(alice);
    relayA = await startRelay({ port: portA, db: dbA });
    // Once alice is connected to both again, neither relay holds all of 01–20, which bob has
    // not reported: 21–30 wait for his receipts (agent/route-order.ts), so they are not
    // awaited here; they reach him after he stores the first twenty.
    await sendBurst(alice, 20, 10);

    const bob = await peer('bob', 'b1', urls);
    await allArrived(bob);
    expect(await readPages(bob, 10)).toEqual(expected);
    await expectEveryViewInOrder(bob);
  });

  it('continues in order after the receiver is killed mid-read and restarted', async () => {
    await pairAtCli();
    const relay = await startRelay({ db: join(root, 'relay-db') });
    const alice = await peer('alice', 'a1', relay.url);
    await sendBurst(alice, 0, COUNT);
    await accepted(alice);

    const bob = await peer('bob', 'b1', relay.url);
    await allArrived(bob);
    const first = await readPages(bob, 2);
    crash(bob);
    const again = await peer('bob', 'b1', relay.url);
    const rest = await readPages(again, 10);
    expect([...first, ...rest]).toEqual(expected);
    await expectEveryViewInOrder(again);
  });
});
