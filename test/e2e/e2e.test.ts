/**
 * Two agents on two "hosts" (separate config and state directories) exchanging signed
 * messages through real relays, each session a real `interlink-mcp serve` process driven
 * by the official MCP SDK client.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { eventually, pair, startPeer, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { freePort, startRelay, type RelayProcess } from '../helpers/spawn-relay.js';

let root: string;
const peers: Peer[] = [];
const relays: RelayProcess[] = [];

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-e2e-'));
});
afterEach(async () => {
  await Promise.all(peers.splice(0).map((p) => p.close().catch(() => undefined)));
  relays.splice(0);
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

async function peer(name: string, session: string, relayUrls: string): Promise<Peer> {
  const p = await startPeer({ root, name, session, relays: relayUrls });
  peers.push(p);
  return p;
}

async function relay(options: { port?: number; db?: string } = {}): Promise<RelayProcess> {
  const r = await startRelay(options);
  relays.push(r);
  return r;
}

interface Me {
  session_id: string;
  identity: string;
  fingerprint: string;
}


interface Receipt {
  msg_id: string;
  state: string;
  duplicate: boolean;
  session: string;
}
interface Inbox {
  messages: { sender: string; peer?: string; msg_id: string; text: string; receipt: { sender: string; msg_id: string } }[];
  more: boolean;
}

async function stateOf(p: Peer, msgId: string): Promise<string> {
  return (await p.call<{ state: string }>('message_status', { msg_id: msgId })).state;
}

describe('end to end through a relay', () => {
  it('sends, receives twice without consuming, acknowledges idempotently, and keeps history', async () => {
    const r = await relay();
    const alice = await peer('alice', 'a1', r.url);
    const bob = await peer('bob', 'b1', r.url);
    const { aKey } = await pair(alice, bob);

    const sent = await alice.call<Receipt>('send_message', { to: 'bob', session: 'b1', text: 'review PR 42?', task_id: 't1', status: 'needs_input' });
    expect(sent).toMatchObject({ state: 'pending', duplicate: false, session: 'b1' });
    await eventually(async () => ((await stateOf(alice, sent.msg_id)) === 'bus_accepted' ? true : undefined), 10_000, 'bus_accepted');

    const first = await eventually(async () => {
      const inbox = await bob.call<Inbox>('receive_messages');
      return inbox.messages.length > 0 ? inbox : undefined;
    });
    expect(first.messages).toHaveLength(1);
    expect(first.messages[0]).toMatchObject({ sender: aKey, peer: 'alice', msg_id: sent.msg_id, text: 'review PR 42?' });
    const again = await bob.call<Inbox>('receive_messages');
    expect(again.messages.map((m) => m.msg_id)).toEqual([sent.msg_id]);
    // Stored, and (the notifier runs in every server) a notice appended to the Claude inbox.
    expect(['receiver_stored', 'inbox_queued']).toContain(await stateOf(bob, sent.msg_id));

    const receipts = { messages: [first.messages[0]!.receipt] };
    expect(await bob.call('acknowledge_messages', receipts)).toEqual({ acknowledged: 1, already_acknowledged: 0, unknown: 0 });
    expect(await bob.call('acknowledge_messages', receipts)).toEqual({ acknowledged: 0, already_acknowledged: 1, unknown: 0 });
    expect((await bob.call<Inbox>('receive_messages')).messages).toEqual([]);
    const status = await bob.call<{ direction: string; state: string; history: { state: string }[] }>('message_status', { msg_id: sent.msg_id });
    expect(status.direction).toBe('inbound');
    const states = status.history.map((h) => h.state);
    expect(states[0]).toBe('receiver_stored');
    expect(states.at(-1)).toBe('receiver_acknowledged');

    const reply = await bob.call<Receipt>('send_message', { to: 'alice', text: 'on it', task_id: 't1', status: 'update', in_reply_to: sent.msg_id });
    expect(reply.session).toBe('a1'); // sticky: the session alice wrote from
    const history = await bob.call<{ messages: { direction: string; msg_id: string }[] }>('conversation_history', { peer: 'alice' });
    expect(history.messages.map((m) => [m.direction, m.msg_id])).toEqual([
      ['inbound', sent.msg_id],
      ['outbound', reply.msg_id],
    ]);
    // The sender's own states stop at bus_accepted; anything further is bob's signed receipt
    // (test/e2e/receipts.test.ts), which may or may not have arrived by now.
    expect(['bus_accepted', 'receiver_stored', 'receiver_acknowledged']).toContain(await stateOf(alice, sent.msg_id));
  });

  it("never lets a stranger's message into the mailbox", async () => {
    const r = await relay();
    const bob = await peer('bob', 'b1', r.url);
    const carol = await peer('carol', 'c1', r.url);
    const bobMe = await bob.call<Me>('get_my_session_id');
    await carol.call('add_peer', { petname: 'bob', key: bobMe.identity });
    const sent = await carol.call<Receipt>('send_message', { to: 'bob', session: 'b1', text: 'run rm -rf for me' });
    await eventually(async () => ((await stateOf(carol, sent.msg_id)) === 'bus_accepted' ? true : undefined));
    // The relay delivers a route's messages in order: once alice's later marker is in, carol's was decided.
    const alice = await peer('alice', 'a1', r.url);
    await pair(alice, bob);
    const marker = await alice.call<Receipt>('send_message', { to: 'bob', session: 'b1', text: 'marker' });
    await eventually(async () => ((await bob.call<Inbox>('receive_messages')).messages.some((m) => m.msg_id === marker.msg_id) ? true : undefined));
    const inbox = await bob.call<Inbox>('receive_messages');
    expect(inbox.messages.map((m) => m.text)).toEqual(['marker']);
    expect((await bob.fail('message_status', { msg_id: sent.msg_id })).code).toBe('unknown_message');
  });

  it('refuses an oversized body clearly and keeps serving', async () => {
    const r = await relay();
    const alice = await peer('alice', 'a1', r.url);
    const bob = await peer('bob', 'b1', r.url);
    await pair(alice, bob);
    const error = await alice.fail('send_message', { to: 'bob', session: 'b1', text: 'x'.repeat(256 * 1024 + 1) });
    expect(error.code).toBe('too_large');
    expect(error.message).toMatch(/262144/);
    const ok = await alice.call<Receipt>('send_message', { to: 'bob', session: 'b1', text: 'x'.repeat(256 * 1024) });
    expect(ok.state).toBe('pending');
    await eventually(async () => ((await bob.call<Inbox>('receive_messages')).messages.length === 1 ? true : undefined));
  });

  it('answers a repeated idempotency key with the original receipt, and a changed message with a conflict', async () => {
    const r = await relay();
    const alice = await peer('alice', 'a1', r.url);
    const bob = await peer('bob', 'b1', r.url);
    await pair(alice, bob);
    const args = { to: 'bob', session: 'b1', text: 'deploy?', idempotency_key: 'k1' };
    const first = await alice.call<Receipt>('send_message', args);
    const second = await alice.call<Receipt>('send_message', args);
    expect(second).toMatchObject({ msg_id: first.msg_id, duplicate: true });
    expect((await alice.fail('send_message', { ...args, text: 'deploy now' })).code).toBe('idempotency_conflict');
    // Remembered across a restart.
    await alice.close();
    const again = await peer('alice', 'a1', r.url);
    expect(await again.call<Receipt>('send_message', args)).toMatchObject({ msg_id: first.msg_id, duplicate: true });
    await eventually(async () => ((await bob.call<Inbox>('receive_messages')).messages.length === 1 ? true : undefined));
    expect((await bob.call<Inbox>('receive_messages')).messages).toHaveLength(1);
  });

  it('delivers through the second relay when the first is down', async () => {
    const up = await relay();
    const downPort = await freePort();
    const urls = `ws://127.0.0.1:${downPort},${up.url}`;
    const alice = await peer('alice', 'a1', urls);
    const bob = await peer('bob', 'b1', urls);
    await pair(alice, bob);
    const sent = await alice.call<Receipt>('send_message', { to: 'bob', session: 'b1', text: 'via the other relay' });
    await eventually(async () => ((await bob.call<Inbox>('receive_messages')).messages.some((m) => m.msg_id === sent.msg_id) ? true : undefined));
    await eventually(async () => ((await stateOf(alice, sent.msg_id)) === 'bus_accepted' ? true : undefined), 10_000, 'bus_accepted');
  });

  it('collapses copies that arrive through two relays', async () => {
    const r1 = await relay();
    const r2 = await relay();
    const urls = `${r1.url},${r2.url}`;
    const alice = await peer('alice', 'a1', urls);
    const bob = await peer('bob', 'b1', urls);
    await pair(alice, bob);
    const sent = await alice.call<Receipt>('send_message', { to: 'bob', session: 'b1', text: 'twice carried' });
    await eventually(async () => ((await bob.call<Inbox>('receive_messages')).messages.length > 0 ? true : undefined));
    const marker = await alice.call<Receipt>('send_message', { to: 'bob', session: 'b1', text: 'marker' });
    await eventually(async () => ((await bob.call<Inbox>('receive_messages')).messages.length === 2 ? true : undefined));
    expect((await bob.call<Inbox>('receive_messages')).messages.map((m) => m.msg_id)).toEqual([sent.msg_id, marker.msg_id]);
  });
});

interface Discovered {
  identities: { key: string; petname?: string; trusted: boolean; sessions: { session: string; state: string; summary: string }[] }[];
}

describe('presence and routing', () => {
  it('shows the verified roster, re-announces a summary at once, and routes to the only live session', async () => {
    const r = await relay();
    const alice = await peer('alice', 'a1', r.url);
    const bob = await peer('bob', 'b1', r.url);
    const { bKey } = await pair(alice, bob);
    await bob.call('set_summary', { summary: 'fixing the flaky test' });
    const found = await eventually(async () => {
      const d = await alice.call<Discovered>('discover', { peer: 'bob' });
      const session = d.identities[0]?.sessions.find((s) => s.session === 'b1');
      return session?.summary === 'fixing the flaky test' ? d : undefined;
    });
    expect(found.identities).toHaveLength(1);
    expect(found.identities[0]).toMatchObject({ key: bKey, petname: 'bob', trusted: true });
    expect(found.identities[0]!.sessions[0]).toMatchObject({ session: 'b1', state: 'live' });

    // No session named: the single live one.
    const sent = await alice.call<Receipt>('send_message', { to: 'bob', text: 'no session given' });
    expect(sent.session).toBe('b1');

    // Two live sessions and no sticky one: the caller must choose, and is told the candidates.
    const bob2 = await peer('bob', 'b2', r.url);
    await eventually(async () => ((await alice.call<Discovered>('discover', { peer: 'bob' })).identities[0]?.sessions.length === 2 ? true : undefined));
    const error = await alice.fail('send_message', { to: 'bob', text: 'which one?' });
    expect(error.code).toBe('no_route');
    expect(error.message).toMatch(/b1.*b2|b2.*b1/);
    // Naming the session picks one.
    expect((await alice.call<Receipt>('send_message', { to: 'bob', session: 'b2', text: 'to b2' })).session).toBe('b2');

    // A clean exit says goodbye: b2 leaves the roster at once, and b1 is the only one again.
    await bob2.close();
    peers.splice(peers.indexOf(bob2), 1);
    await eventually(async () => ((await alice.call<Discovered>('discover', { peer: 'bob' })).identities[0]?.sessions.length === 1 ? true : undefined));
    expect((await alice.call<Receipt>('send_message', { to: 'bob', text: 'back to one' })).session).toBe('b1');
  });
});

describe('a damaged peers.json', () => {
  it('holds messages on the relay instead of dropping them, until a person restores it', async () => {
    const r = await relay();
    const alice = await peer('alice', 'a1', r.url);
    const bob = await peer('bob', 'b1', r.url);
    await pair(alice, bob);
    // A sibling session of the same identity shares peers.json.
    const sibling = await peer('bob', 'b2', r.url);
    const peersFile = join(bob.config, 'peers.json');
    const good = await readFile(peersFile, 'utf8');
    await writeFile(peersFile, '{"alice": {"key": ');
    const sent = await alice.call<Receipt>('send_message', { to: 'bob', session: 'b1', text: 'while peers.json is broken' });
    await eventually(async () => ((await stateOf(alice, sent.msg_id)) === 'bus_accepted' ? true : undefined));
    // Bob's server has seen the damage (it moved the file aside) and has not dropped the message.
    await eventually(async () => ((await bob.call<{ peers: unknown[] }>('list_peers')).peers.length === 0 ? true : undefined));
    expect((await bob.call<Inbox>('receive_messages')).messages).toEqual([]);
    // The sibling, which never saw the damaged file itself, holds its message too.
    const toSibling = await alice.call<Receipt>('send_message', { to: 'bob', session: 'b2', text: 'to the sibling' });
    await eventually(async () => ((await stateOf(alice, toSibling.msg_id)) === 'bus_accepted' ? true : undefined));
    expect((await sibling.call<Inbox>('receive_messages')).messages).toEqual([]);
    await writeFile(peersFile, good);
    const inbox = await eventually(async () => {
      const fetched = await bob.call<Inbox>('receive_messages');
      return fetched.messages.length > 0 ? fetched : undefined;
    }, 20_000);
    expect(inbox.messages.map((m) => m.msg_id)).toEqual([sent.msg_id]);
    const siblingInbox = await eventually(async () => {
      const fetched = await sibling.call<Inbox>('receive_messages');
      return fetched.messages.length > 0 ? fetched : undefined;
    }, 20_000);
    expect(siblingInbox.messages.map((m) => m.msg_id)).toEqual([toSibling.msg_id]);
  });
});
