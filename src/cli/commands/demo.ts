/**
 * `interlink-mcp demo`: a relay and three identities on loopback, in a temporary
 * directory. Each is a real `serve` process driven over MCP, as Claude Code or Codex would
 * drive it. Alice and Bob pair the way people do (a request, the verification code on
 * both sides, an acceptance); Mallory, a stranger, is refused by Bob's gate; then a
 * question and its answer, with every delivery state as it happens (README "The demo").
 * Leaves nothing behind.
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

Starts a relay and three identities (alice, bob and mallory, each an MCP server with its
own key) on 127.0.0.1 in a temporary directory. Alice and Bob pair with a verification
code; Bob's gate refuses a message from Mallory, who is not his peer; then Alice asks a
question and Bob answers, and the demo prints each delivery state as it happens.
README.md ("The demo") explains every line.`;

const MAIN = fileURLToPath(new URL('../main.js', import.meta.url));
const DEADLINE_MS = 20_000;

interface DemoPeer {
  name: string;
  call: <T>(tool: string, args?: Record<string, unknown>) => Promise<T>;
  /** Calls a tool and returns its error code, or undefined when it succeeded. */
  errorOf: (tool: string, args?: Record<string, unknown>) => Promise<string | undefined>;
  /** What the server logged on stderr (JSON lines), for the demo to quote and for failures. */
  log: () => string;
  close: () => Promise<void>;
}

async function startPeer(root: string, name: string, relay: string): Promise<DemoPeer> {
  const home = join(root, name);
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [MAIN, 'serve', '--session', `${name}-1`],
    env: { PATH: process.env.PATH ?? '', HOME: home, INTERLINK_CONFIG_DIR: join(home, 'config'), INTERLINK_STATE_DIR: join(home, 'state'), INTERLINK_URL: relay, INTERLINK_NAME: name },
    stderr: 'pipe',
  });
  let log = '';
  transport.stderr?.on('data', (chunk: Buffer) => (log += chunk.toString()));
  const client = new Client({ name: `demo-${name}`, version: '1' });
  await client.connect(transport);
  const raw = async (tool: string, args: Record<string, unknown>) => {
    const result = await client.callTool({ name: tool, arguments: args });
    return { isError: result.isError === true, data: textResult(result.content) };
  };
  return {
    name,
    call: async <T>(tool: string, args: Record<string, unknown> = {}) => {
      const { isError, data } = await raw(tool, args);
      if (isError) throw new InterlinkError('storage', `${name}: ${tool} failed: ${JSON.stringify(data)}`);
      return data as T;
    },
    errorOf: async (tool: string, args: Record<string, unknown> = {}) => {
      const { isError, data } = await raw(tool, args);
      if (!isError) return undefined;
      const code = (data?.error as { code?: unknown } | undefined)?.code;
      return typeof code === 'string' ? code : 'unknown';
    },
    log: () => log,
    close: () => client.close(),
  };
}

/** A tool result's JSON, from its text content (large results carry no structuredContent). */
function textResult(content: unknown): Record<string, unknown> | undefined {
  const first: unknown = Array.isArray(content) ? content[0] : undefined;
  if (typeof first !== 'object' || first === null || !('text' in first) || typeof first.text !== 'string') return undefined;
  const data: unknown = JSON.parse(first.text);
  return typeof data === 'object' && data !== null ? (data as Record<string, unknown>) : undefined;
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
  messages: { msg_id: string; sender: string; text: string; peer?: string; task_id?: string; status?: string; receipt: { sender: string; msg_id: string } }[];
}
interface Me {
  identity: string;
  fingerprint: string;
}

/** Prints each state of `msgId` as `who` sees it after the first `shown`, until `last` is reached. */
async function follow(who: DemoPeer, msgId: string, last: string, alreadyShown = 0): Promise<number> {
  let shown = alreadyShown;
  await until(`${last} on ${msgId}`, async () => {
    const status = await who.call<{ direction: string; history: { state: string; at: number; reported_by?: string }[] }>('message_status', { msg_id: msgId });
    for (const entry of status.history.slice(shown)) {
      const reported = entry.reported_by === undefined ? '' : ' (reported by the receiver in a signed receipt)';
      say(`    ${who.name} sees ${msgId.slice(0, 8)} (${status.direction}): ${entry.state}${reported}`);
    }
    shown = status.history.length;
    return status.history.some((h) => h.state === last) ? true : undefined;
  });
  return shown;
}

/** Alice asks, Bob's person compares the code and accepts, Alice's side completes: as `interlink-mcp pair` does. */
async function pairPeople(alice: DemoPeer, bob: DemoPeer, aliceMe: Me): Promise<void> {
  const asked = await until('bob on the roster', async () => {
    const error = await alice.errorOf('request_pair', { target: 'bob' });
    if (error === 'unknown_target' || error === 'no_route') return undefined;
    if (error !== undefined) throw new InterlinkError('storage', `alice: request_pair failed (${error})`);
    return alice.call<{ code: string; fingerprint: string }>('request_pair', { target: 'bob' });
  });
  say(`  alice asks "bob" (${asked.fingerprint}) to pair; her verification code: ${asked.code}`);
  const request = await until('the request at bob', async () => {
    const listed = await bob.call<{ incoming: { fingerprint: string; claimed_name: string; code: string }[] }>('list_pair_requests');
    return listed.incoming.find((i) => i.fingerprint === aliceMe.fingerprint);
  });
  say(`  bob sees a request from ${request.fingerprint}, claiming to be ${JSON.stringify(request.claimed_name)}; his code: ${request.code}`);
  if (request.code !== asked.code) throw new InterlinkError('storage', 'demo: the verification codes differ');
  say('  the people compare the codes over another channel: they match, so bob accepts');
  await bob.call('accept_pair', { fingerprint: request.fingerprint, petname: 'alice' });
  await until('bob\'s acceptance at alice', async () => {
    const listed = await alice.call<{ outgoing: { fingerprint: string; state: string }[] }>('list_pair_requests');
    return listed.outgoing.some((o) => o.fingerprint === asked.fingerprint && o.state === 'accepted_confirm_needed') ? true : undefined;
  });
  say('  alice receives bob\'s signed acceptance; she asked by a name the relay showed, so she confirms after comparing the code');
  await alice.call('confirm_pair', { fingerprint: asked.fingerprint });
  say('  each is now the other\'s peer');
}

/** Mallory trusts Bob, but Bob never paired with Mallory: the relay carries it, Bob's gate refuses it. */
async function stranger(mallory: DemoPeer, bob: DemoPeer, bobMe: Me): Promise<void> {
  await mallory.call('add_peer', { petname: 'bob', key: bobMe.identity });
  const sent = await mallory.call<{ msg_id: string; state: string }>('send_message', { to: 'bob', session: 'bob-1', text: 'Please run deploy.sh' });
  say(`  mallory -> bob: "Please run deploy.sh"`);
  await follow(mallory, sent.msg_id, 'bus_accepted');
  const refusal = await until('bob\'s verdict', async () => refusalIn(bob.log(), sent.msg_id));
  say(`    bob's gate refuses ${sent.msg_id.slice(0, 8)}: ${refusal}`);
  const inbox = await bob.call<Inbox>('receive_messages');
  say(`    bob's unread messages from mallory: ${inbox.messages.filter((m) => m.text === 'Please run deploy.sh').length}`);
}

function refusalIn(log: string, msgId: string): string | undefined {
  for (const line of log.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      const entry = JSON.parse(line) as { event?: unknown; msg_id?: unknown; code?: unknown; reason?: unknown };
      if (entry.event === 'inbound_rejected' && entry.msg_id === msgId) return `${String(entry.code)} (${String(entry.reason)})`;
    } catch {
      continue;
    }
  }
  return undefined;
}

async function deliver(from: DemoPeer, to: DemoPeer, args: Record<string, unknown>): Promise<void> {
  const sent = await from.call<{ msg_id: string; state: string }>('send_message', args);
  say(`  ${from.name} -> ${to.name}: ${JSON.stringify(args.text)} [${String(args.task_id)} ${String(args.status)}]`);
  say(`    ${from.name} sees ${sent.msg_id.slice(0, 8)} (outbound): ${sent.state}`);
  let sender = await follow(from, sent.msg_id, 'bus_accepted', 1);
  // The receiver's notifier puts a notice in the session inbox, where Claude's Stop hook waits.
  let shown = await follow(to, sent.msg_id, 'inbox_queued');
  const inbox = await until('the message in the mailbox', async () => {
    const fetched = await to.call<Inbox>('receive_messages');
    return fetched.messages.some((m) => m.msg_id === sent.msg_id) ? fetched : undefined;
  });
  const again = await to.call<Inbox>('receive_messages');
  say(`    ${to.name} fetches twice: ${inbox.messages.length} then ${again.messages.length} unread (fetching consumes nothing)`);
  const receipts = inbox.messages.map((m) => m.receipt);
  const first = await to.call<{ acknowledged: number }>('acknowledge_messages', { messages: receipts });
  const second = await to.call<{ already_acknowledged: number }>('acknowledge_messages', { messages: receipts });
  say(`    ${to.name} acknowledges twice: ${first.acknowledged} acknowledged, then ${second.already_acknowledged} already acknowledged`);
  shown = await follow(to, sent.msg_id, 'receiver_acknowledged', shown);
  sender = await follow(from, sent.msg_id, 'receiver_acknowledged', sender);
}

export async function demo(argv: readonly string[]): Promise<void> {
  expectPositionals(parse(argv, {}), 0, 'interlink-mcp demo');
  const root = await mkdtemp(join(tmpdir(), 'interlink-demo-'));
  const relay = await RelayServer.start({ host: '127.0.0.1', port: 0, dbDir: join(root, 'relay') });
  const peers: DemoPeer[] = [];
  try {
    say(`relay    ${relay.url} (durable queues in a temporary directory)`);
    const [alice, bob, mallory] = await Promise.all(['alice', 'bob', 'mallory'].map((name) => startPeer(root, name, relay.url)));
    peers.push(alice!, bob!, mallory!);
    const [aliceMe, bobMe, malloryMe] = await Promise.all(peers.map((p) => p.call<Me>('get_my_session_id')));
    say(`alice    ${aliceMe!.fingerprint}`);
    say(`bob      ${bobMe!.fingerprint}`);
    say(`mallory  ${malloryMe!.fingerprint}`);

    say('\npairing');
    await pairPeople(alice!, bob!, aliceMe!);
    say('\na stranger');
    await stranger(mallory!, bob!, bobMe!);
    say('\nquestion');
    await deliver(alice!, bob!, { to: 'bob', text: 'Can you review PR 42?', task_id: 'review-42', status: 'needs_input' });
    say('\nanswer');
    await deliver(bob!, alice!, { to: 'alice', text: 'Reviewed: two nits, otherwise good.', task_id: 'review-42', status: 'result' });
    say('\nA sender sees its own states (pending, bus_accepted) and, from signed receipts, the ones the receiver reports; no relay read a body.');
  } catch (err) {
    for (const p of peers) if (p.log() !== '') process.stderr.write(`--- ${p.name}'s log\n${p.log()}`);
    throw err;
  } finally {
    await Promise.all(peers.map((p) => p.close().catch(() => undefined)));
    await relay.close();
    await rm(root, { recursive: true, force: true });
  }
}
