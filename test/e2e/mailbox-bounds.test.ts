/**
 * One peer cannot silence a session (DESIGN.md "The mailbox": admission and the senders'
 * shares), through the public surface: a real relay, separate `serve` processes for the
 * flooding peer, another peer and the receiver, the official MCP SDK client, and `status`
 * at the command line as a person runs it.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mapLimit, runCli, userEnv } from '../helpers/cli.js';
import { eventually, pair, peerPool, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { startRelay, type RelayProcess } from '../helpers/spawn-relay.js';

/** The measured flood: more updates for one task than the mailbox has records (4,096). */
const FLOOD = 4_200;
/** One sender's share of unread messages (mailbox/rules.ts, a quarter of 4,096). */
const SHARE = 1_024;
/** More than the relay's delivery window per route (256). */
const OVER_WINDOW = 300;

let root: string;
let relay: RelayProcess | undefined;
const peers = peerPool(() => root);

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-bounds-'));
});
afterEach(async () => {
  await peers.closeAll();
  relay?.child.kill();
  relay = undefined;
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

interface Unread {
  messages: { text: string; sender: string; status?: string; receipt: { sender: string; msg_id: string } }[];
  more: boolean;
}

/** bob, alice and carol on one relay; bob has both as peers. */
async function threePeers(): Promise<{ alice: Peer; bob: Peer; carol: Peer }> {
  relay = await startRelay();
  const [alice, bob, carol] = await Promise.all([peers.start('alice', 'a1', relay.url), peers.start('bob', 'b1', relay.url), peers.start('carol', 'c1', relay.url)]);
  await pair(alice, bob, { a: 'alice', b: 'bob' });
  await pair(carol, bob, { a: 'carol', b: 'bob' });
  return { alice, bob, carol };
}

/** Sends many messages from `from` to bob's session b1, a few calls at a time, and waits until a relay accepted them all. */
async function sendMany(from: Peer, count: number, fields: (i: number) => Record<string, unknown>): Promise<void> {
  await mapLimit([...Array(count).keys()], 16, (i) => from.call('send_message', { to: 'bob', session: 'b1', ...fields(i) }));
  await eventually(async () => ((await from.call<{ pending: unknown[] }>('list_pending')).pending.length === 0 ? true : undefined), 120_000, 'every message accepted');
}

async function unreadFrom(bob: Peer, text: string): Promise<Unread['messages'][number] | undefined> {
  return (await bob.call<Unread>('receive_messages', { limit: 100 })).messages.find((m) => m.text === text);
}

async function bobStatus(): Promise<{ text: string; json: { sessions: { session: string; refusing: { peer: string; bound: string; message: string }[] }[] } }> {
  const env = userEnv({ root: join(root, 'bob'), configDir: join(root, 'bob', 'config'), stateDir: join(root, 'bob', 'state') }, { INTERLINK_URL: relay!.url });
  const text = await runCli(['status'], env);
  const json = await runCli(['status', '--json'], env);
  expect(json.code).toBe(0);
  return { text: text.stdout, json: JSON.parse(json.stdout) as never };
}

describe('one peer cannot silence a session', () => {
  it(`${FLOOD} progress updates for one task from alice leave carol's message admitted and read`, async () => {
    const { alice, bob, carol } = await threePeers();
    await sendMany(alice, FLOOD, (i) => ({ text: `step ${i}`, task_id: 'build', status: 'update' }));
    await carol.call('send_message', { to: 'bob', session: 'b1', text: 'are you there?' });
    const question = await eventually(() => unreadFrom(bob, 'are you there?'), 120_000, "carol's message in bob's mailbox");
    // Fetch order: the question first, then alice's one unsuperseded update.
    const { messages } = await bob.call<Unread>('receive_messages', { limit: 100 });
    expect(messages.map((m) => m.text)).toEqual(['are you there?', `step ${FLOOD - 1}`]);
    expect(await bob.call('acknowledge_messages', { messages: [question.receipt] })).toMatchObject({ acknowledged: 1 });
    expect((await bobStatus()).json.sessions.find((s) => s.session === 'b1')!.refusing).toEqual([]);
  }, 400_000);

  it('refuses alice past her share and says so in status, while carol is admitted; lets her in once bob reads', async () => {
    const { alice, bob, carol } = await threePeers();
    await sendMany(alice, SHARE + 3, (i) => ({ text: `alice ${i}` }));
    await carol.call('send_message', { to: 'bob', session: 'b1', text: 'carol here' });
    // Behind alice's 1,024 in arrival order: looked for in carol's history, not the first page.
    await eventually(async () => {
      const { messages } = await bob.call<{ messages: { text: string; direction: string }[] }>('conversation_history', { peer: 'carol' });
      return messages.some((m) => m.direction === 'inbound' && m.text === 'carol here') ? true : undefined;
    }, 120_000, "carol's message in bob's mailbox");
    const refused = await eventually(async () => {
      const { text, json } = await bobStatus();
      const refusing = json.sessions.find((s) => s.session === 'b1')?.refusing ?? [];
      return refusing.length > 0 ? { text, refusing } : undefined;
    }, 60_000, 'status naming the refusal');
    expect(refused.refusing).toEqual([expect.objectContaining({ peer: 'alice', bound: 'sender_records' })]);
    expect(refused.text).toMatch(/REFUSING +mail from alice is refused since .*: alice holds its share of 1024 unread messages \(sender_records\)/);
    // bob reads and acknowledges some of alice's messages: the rest of hers come in, and the refusal is over.
    const page = await bob.call<Unread>('receive_messages', { limit: 100 });
    const hers = page.messages.filter((m) => m.text.startsWith('alice '));
    expect(hers.length).toBeGreaterThan(3);
    await bob.call('acknowledge_messages', { messages: hers.slice(0, 3).map((m) => m.receipt) });
    await eventually(async () => {
      const { json } = await bobStatus();
      return json.sessions.find((s) => s.session === 'b1')?.refusing.length === 0 ? true : undefined;
    }, 120_000, 'the refusal over');
  }, 400_000);

  it("more of alice's refused mail than the relay's delivery window never holds carol's back, and bob reads alice's in order", async () => {
    const { alice, bob, carol } = await threePeers();
    // 300 past her share: more than the 256 deliveries a relay has in flight per route.
    const count = SHARE + OVER_WINDOW;
    await sendMany(alice, count, (i) => ({ text: `alice ${i}` }));
    await carol.call('send_message', { to: 'bob', session: 'b1', text: 'carol here' });
    // Nothing of alice's is read yet: carol's message gets in past hers (it used to wait until bob read alice's).
    await eventually(async () => {
      const { messages } = await bob.call<{ messages: { text: string; direction: string }[] }>('conversation_history', { peer: 'carol' });
      return messages.some((m) => m.direction === 'inbound' && m.text === 'carol here') ? true : undefined;
    }, 120_000, "carol's message in bob's mailbox while alice's wait on the relay");
    // bob reads everything, a page at a time: alice's arrive as he makes room, in the order she sent them.
    const read: string[] = [];
    await eventually(async () => {
      const page = await bob.call<Unread>('receive_messages', { limit: 100 });
      read.push(...page.messages.map((m) => m.text).filter((t) => t.startsWith('alice ')));
      if (page.messages.length > 0) await bob.call('acknowledge_messages', { messages: page.messages.map((m) => m.receipt) });
      return read.length === count ? true : undefined;
    }, 300_000, `all ${count} of alice's messages read`);
    expect(read).toEqual(Array.from({ length: count }, (_, i) => `alice ${i}`));
  }, 600_000);
});
