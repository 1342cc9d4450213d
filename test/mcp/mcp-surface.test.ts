/**
 * The MCP surface a model sees, through the SDK client against real `interlink-mcp serve`
 * processes in both modes: which tools are listed, that every parameter is described and
 * every tool states its four behaviour hints, that a 256 KiB message comes back once (not
 * as text plus structuredContent), and that times come with ISO 8601 strings.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MAX_TEXT_BYTES } from '../../src/envelope/envelope.js';
import { STRUCTURED_MAX_BYTES } from '../../src/mcp/result.js';
import { eventually, pair, resultData, startPeer, type Peer, type PeerOptions } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { newIdentity } from '../helpers/fixtures.js';
import { startRelay } from '../helpers/spawn-relay.js';

let root: string;
const peers: Peer[] = [];
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-mcp-surface-'));
});
afterEach(async () => {
  await Promise.all(peers.splice(0).map((p) => p.close().catch(() => undefined)));
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

async function peer(options: Omit<PeerOptions, 'root'>): Promise<Peer> {
  const p = await startPeer({ root, ...options });
  peers.push(p);
  return p;
}

const MODES = {
  claude: { session: 'c1', env: {} },
  codex: { session: 'ignored-in-codex-mode', env: { INTERLINK_MODE: 'codex' } },
} as const;

/** A server in `mode`; Codex mode stays unbound, which is enough to list and refuse tools. */
async function server(mode: keyof typeof MODES): Promise<Peer> {
  const relay = await startRelay();
  return peer({ name: mode, session: MODES[mode].session, relays: relay.url, env: MODES[mode].env });
}

/** Paths (`tool.a.items.b`) of every property, at any depth, that has no description. */
function undescribed(schema: unknown, path: string): string[] {
  if (schema === null || typeof schema !== 'object') return [];
  const node = schema as { properties?: Record<string, { description?: unknown }>; items?: unknown };
  const missing: string[] = [];
  for (const [name, property] of Object.entries(node.properties ?? {})) {
    if (typeof property.description !== 'string' || property.description.trim() === '') missing.push(`${path}.${name}`);
    missing.push(...undescribed(property, `${path}.${name}`));
  }
  return [...missing, ...undescribed(node.items, `${path}.items`)];
}

const HINTS = ['readOnlyHint', 'destructiveHint', 'idempotentHint', 'openWorldHint'] as const;

describe('tools/list', () => {
  it('shows each mode its own tools, each parameter described and all four hints set', async () => {
    // The walk itself finds what is missing, nested in arrays too.
    expect(undescribed({ properties: { a: { description: 'x', items: { properties: { b: {} } } }, c: { description: ' ' } } }, 't')).toEqual(['t.a.items.b', 't.c']);
    const listed = new Map<string, string[]>();
    for (const mode of ['claude', 'codex'] as const) {
      const { tools } = await (await server(mode)).client.listTools();
      listed.set(mode, tools.map((t) => t.name).sort());
      expect(tools.flatMap((t) => undescribed(t.inputSchema, t.name)), mode).toEqual([]);
      for (const t of tools) {
        expect(t.description, t.name).toMatch(/\w/);
        for (const hint of HINTS) expect(typeof t.annotations?.[hint], `${mode} ${t.name} ${hint}`).toBe('boolean');
      }
    }
    const claude = listed.get('claude')!;
    const codex = listed.get('codex')!;
    expect(claude).toContain('bind_claude_session');
    expect(claude).not.toContain('bind_codex_session');
    expect(claude).not.toContain('failed_deliveries');
    expect(codex).toEqual(expect.arrayContaining(['bind_codex_session', 'failed_deliveries']));
    expect(codex).not.toContain('bind_claude_session');
    // Everything else is the same in both modes.
    const shared = (names: string[]) => names.filter((n) => !['bind_claude_session', 'bind_codex_session', 'failed_deliveries'].includes(n));
    expect(shared(claude)).toEqual(shared(codex));
    expect(shared(claude).length).toBeGreaterThan(10);
  });

  it('gives hints that match what the tools do, and descriptions that say who may call them', async () => {
    const { tools } = await (await server('codex')).client.listTools();
    const withHint = (hint: (typeof HINTS)[number]) =>
      tools
        .filter((t) => t.annotations?.[hint] === true)
        .map((t) => t.name)
        .sort();
    // Reading mail never consumes it; conversation_history can (consume), so it is not read-only.
    expect(withHint('readOnlyHint')).toEqual(['discover', 'get_my_session_id', 'list_audiences', 'list_pair_requests', 'list_peers', 'list_pending', 'message_status', 'receive_messages']);
    // Audiences are a person's: an agent reads them and has no tool that changes them.
    expect(tools.map((t) => t.name).filter((name) => /audience/.test(name))).toEqual(['list_audiences']);
    expect(withHint('destructiveHint')).toEqual(['cancel_pending', 'failed_deliveries', 'reject_pair', 'remove_peer']);
    // What reaches other machines through the relays: messages, pairing, presence (message_status asks the rosters).
    expect(withHint('openWorldHint')).toEqual(['accept_pair', 'cancel_task', 'discover', 'message_status', 'request_pair', 'send_message', 'set_summary']);
    expect(withHint('idempotentHint')).not.toContain('send_message');
    // What a stranger sees of a summary, as test/e2e/sealed.test.ts finds it: the key and the session.
    expect(tools.find((t) => t.name === 'set_summary')?.description).toMatch(/sealed to this identity's peers and its own sessions: every peer reads it; a stranger or a relay cannot/);
    expect(tools.find((t) => t.name === 'bind_codex_session')?.description).toMatch(/operator setup.*never on a peer's request/i);
  });
});

describe('list_audiences', () => {
  it("lists the person's audiences, leaving out a member that is no longer a peer", async () => {
    const claude = await server('claude');
    expect(await claude.call('list_audiences')).toEqual({ audiences: [] });
    const alice = newIdentity();
    await writeFile(join(claude.config, 'peers.json'), JSON.stringify({ alice: { key: alice.key } }));
    await writeFile(join(claude.config, 'audiences.json'), JSON.stringify({ team: ['alice', 'gone'], ops: ['gone'] }));
    expect(await claude.call('list_audiences')).toEqual({ audiences: [{ name: 'ops', members: [] }, { name: 'team', members: ['alice'] }] });
    await writeFile(join(claude.config, 'audiences.json'), '{"team": "alice"}');
    const error = await claude.fail('list_audiences', {});
    expect(error.code).toBe('corrupt');
    expect(error.message).toContain('audiences.json is damaged');
  });
});

describe('tools of the other mode', () => {
  it('are refused with wrong_mode (and an unknown name with unknown_tool)', async () => {
    const claude = await server('claude');
    for (const [name, args] of [
      ['bind_codex_session', { thread_id: '0b9d7a4e-2f1c-4d5e-9a8b-7c6d5e4f3a2b' }],
      ['failed_deliveries', { action: 'list' }],
    ] as const) {
      const error = await claude.fail(name, args);
      expect(error.code, name).toBe('wrong_mode');
      expect(error.message).toBe(`${name} is for Codex mode; this server runs in Claude mode (INTERLINK_MODE)`);
    }
    const codex = await server('codex');
    expect(await codex.fail('bind_claude_session', { session_id: 's1' })).toEqual({
      code: 'wrong_mode',
      message: 'bind_claude_session is for Claude mode; this server runs in Codex mode (INTERLINK_MODE)',
    });
    expect((await claude.fail('no_such_tool')).code).toBe('unknown_tool');
  });
});

interface Inbox {
  messages: { msg_id: string; text: string; ts: number; ts_iso: string; receipt: { sender: string; msg_id: string } }[];
}
interface Status {
  history: { state: string; at: number; at_iso: string }[];
}

describe('results', () => {
  it('send a 256 KiB message once, as text, and small results also as structuredContent', async () => {
    const relay = await startRelay();
    const alice = await peer({ name: 'alice', session: 'a1', relays: relay.url });
    const bob = await peer({ name: 'bob', session: 'b1', relays: relay.url });
    await pair(alice, bob);
    const text = 'x'.repeat(MAX_TEXT_BYTES);
    const sent = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text });

    const result = await eventually(async () => {
      const r = await bob.client.callTool({ name: 'receive_messages', arguments: {} });
      return (resultData(r) as unknown as Inbox).messages.length === 1 ? r : undefined;
    }, 15_000, 'the large message');
    const data = resultData(result) as unknown as Inbox;
    expect(data.messages[0]).toMatchObject({ msg_id: sent.msg_id, text });
    expect(result.structuredContent).toBeUndefined();
    const dataBytes = Buffer.byteLength(JSON.stringify(data));
    expect(Buffer.byteLength(JSON.stringify(result))).toBeLessThan(1.1 * dataBytes);

    // A small result comes both ways, the same object (resultData checks they agree).
    const me = await bob.client.callTool({ name: 'get_my_session_id', arguments: {} });
    expect(Buffer.byteLength(JSON.stringify(resultData(me)))).toBeLessThanOrEqual(STRUCTURED_MAX_BYTES);
    expect(me.structuredContent).toEqual(resultData(me));
  });

  it('carry an ISO 8601 string beside every epoch-millisecond time', async () => {
    const relay = await startRelay();
    const alice = await peer({ name: 'alice', session: 'a1', relays: relay.url });
    const bob = await peer({ name: 'bob', session: 'b1', relays: relay.url });
    await pair(alice, bob);
    const sent = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text: 'what time is it?' });
    const inbox = await eventually(async () => {
      const r = await bob.call<Inbox>('receive_messages');
      return r.messages.length === 1 ? r : undefined;
    }, 15_000, 'the message');
    const [message] = inbox.messages;
    expect(message!.ts_iso).toBe(new Date(message!.ts).toISOString());

    for (const [p, peerName] of [
      [alice, 'bob'],
      [bob, 'alice'],
    ] as const) {
      const status = await p.call<Status>('message_status', { msg_id: sent.msg_id });
      expect(status.history.length).toBeGreaterThan(0);
      for (const h of status.history) expect(h.at_iso).toBe(new Date(h.at).toISOString());
      const history = await p.call<{ messages: { ts: number; ts_iso: string }[] }>('conversation_history', { peer: peerName });
      expect(history.messages.map((m) => m.ts_iso)).toEqual([new Date(message!.ts).toISOString()]);
    }
  });
});
