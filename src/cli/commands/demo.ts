/**
 * `interlink-mcp demo`: a relay and two paired peers on loopback, in a temporary
 * directory. Each peer is a real `serve` process driven over MCP, as Claude Code or Codex
 * would drive it; the demo prints every delivery state as it happens. Leaves nothing
 * behind.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { InterlinkError } from '../../errors.js';
import { RelayServer } from '../../relay/server.js';
import { expectPositionals, parse } from '../args.js';

export const demoHelp = `usage: interlink-mcp demo

Starts a relay and two peers (alice and bob, each an MCP server with its own identity)
on 127.0.0.1 in a temporary directory, pairs them, and prints each delivery state of a
question and its answer: pending, bus_accepted, receiver_stored, receiver_acknowledged.`;

const MAIN = fileURLToPath(new URL('../main.js', import.meta.url));
const DEADLINE_MS = 20_000;

interface DemoPeer {
  name: string;
  call: <T>(tool: string, args?: Record<string, unknown>) => Promise<T>;
  close: () => Promise<void>;
}

async function startPeer(root: string, name: string, relay: string): Promise<DemoPeer> {
  const home = join(root, name);
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [MAIN, 'serve', '--session', `${name}-1`],
    env: { PATH: process.env.PATH ?? '', HOME: home, INTERLINK_CONFIG_DIR: join(home, 'config'), INTERLINK_STATE_DIR: join(home, 'state'), INTERLINK_URL: relay },
    stderr: 'inherit',
  });
  const client = new Client({ name: `demo-${name}`, version: '1' });
  await client.connect(transport);
  return {
    name,
    call: async <T>(tool: string, args: Record<string, unknown> = {}) => {
      const result = await client.callTool({ name: tool, arguments: args });
      if (result.isError) throw new InterlinkError('storage', `${name}: ${tool} failed: ${JSON.stringify(result.structuredContent)}`);
      return result.structuredContent as T;
    },
    close: () => client.close(),
  };
}

/** Polls until `check` gives a value; the demo's only waiting. */
async function until<T>(what: string, check: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + DEADLINE_MS;
  for (let delay = 5; ; delay = Math.min(delay * 2, 100)) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new InterlinkError('relay_unreachable', `demo: gave up waiting for ${what}`);
    await new Promise((r) => setTimeout(r, delay));
  }
}

function say(text: string): void {
  process.stdout.write(text + '\n');
}

interface Inbox {
  messages: { msg_id: string; text: string; peer?: string; task_id?: string; status?: string; receipt: { sender: string; msg_id: string } }[];
}

/** Prints each state of `msgId` as `who` sees it after the first `shown`, until `last` is reached. */
async function follow(who: DemoPeer, msgId: string, last: string, alreadyShown = 0): Promise<number> {
  let shown = alreadyShown;
  await until(`${last} on ${msgId}`, async () => {
    const status = await who.call<{ direction: string; history: { state: string; at: number }[] }>('message_status', { msg_id: msgId });
    for (const entry of status.history.slice(shown)) say(`    ${who.name} sees ${msgId.slice(0, 8)} (${status.direction}): ${entry.state}`);
    shown = status.history.length;
    return status.history.some((h) => h.state === last) ? true : undefined;
  });
  return shown;
}

async function deliver(from: DemoPeer, to: DemoPeer, args: Record<string, unknown>): Promise<void> {
  const sent = await from.call<{ msg_id: string; state: string }>('send_message', args);
  say(`  ${from.name} -> ${to.name}: ${JSON.stringify(args.text)} [${String(args.task_id)} ${String(args.status)}]`);
  say(`    ${from.name} sees ${sent.msg_id.slice(0, 8)} (outbound): ${sent.state}`);
  await follow(from, sent.msg_id, 'bus_accepted', 1);
  const inbox = await until('the message in the mailbox', async () => {
    const fetched = await to.call<Inbox>('receive_messages');
    return fetched.messages.some((m) => m.msg_id === sent.msg_id) ? fetched : undefined;
  });
  const shown = await follow(to, sent.msg_id, 'receiver_stored');
  const again = await to.call<Inbox>('receive_messages');
  say(`    ${to.name} fetches twice: ${inbox.messages.length} then ${again.messages.length} unread (fetching consumes nothing)`);
  const receipts = inbox.messages.map((m) => m.receipt);
  const first = await to.call<{ acknowledged: number }>('acknowledge_messages', { messages: receipts });
  const second = await to.call<{ already_acknowledged: number }>('acknowledge_messages', { messages: receipts });
  say(`    ${to.name} acknowledges twice: ${first.acknowledged} acknowledged, then ${second.already_acknowledged} already acknowledged`);
  await follow(to, sent.msg_id, 'receiver_acknowledged', shown);
}

export async function demo(argv: readonly string[]): Promise<void> {
  expectPositionals(parse(argv, {}), 0, 'interlink-mcp demo');
  const root = await mkdtemp(join(tmpdir(), 'interlink-demo-'));
  const relay = await RelayServer.start({ host: '127.0.0.1', port: 0, dbDir: join(root, 'relay') });
  const peers: DemoPeer[] = [];
  try {
    say(`relay   ${relay.url} (durable queues in a temporary directory)`);
    const alice = await startPeer(root, 'alice', relay.url);
    peers.push(alice);
    const bob = await startPeer(root, 'bob', relay.url);
    peers.push(bob);
    const aliceMe = await alice.call<{ identity: string; fingerprint: string }>('get_my_session_id');
    const bobMe = await bob.call<{ identity: string; fingerprint: string }>('get_my_session_id');
    say(`alice   ${aliceMe.fingerprint}`);
    say(`bob     ${bobMe.fingerprint}`);
    await alice.call('add_peer', { petname: 'bob', key: bobMe.identity });
    await bob.call('add_peer', { petname: 'alice', key: aliceMe.identity });
    say('paired: each operator added the other key to peers.json');

    say('\nquestion');
    await deliver(alice, bob, { to: 'bob', session: 'bob-1', text: 'Can you review PR 42?', task_id: 'review-42', status: 'needs_input' });
    say('\nanswer');
    await deliver(bob, alice, { to: 'alice', text: 'Reviewed: two nits, otherwise good.', task_id: 'review-42', status: 'result' });
    say('\nThe sender only ever sees pending and bus_accepted: receiver states are local to the receiver.');
  } finally {
    await Promise.all(peers.map((p) => p.close().catch(() => undefined)));
    await relay.close();
    await rm(root, { recursive: true, force: true });
  }
}
