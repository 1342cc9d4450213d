/**
 * The Claude default path end to end, without the Claude CLI: a peer's message is stored,
 * the receiving server appends a notice to the session inbox, and the Stop-hook listener
 * (`interlink-mcp wait`) hands it over and exits 2. The notice is a pointer; the agent
 * then receives and acknowledges.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MAIN, eventually, pair, startPeer, type Peer } from '../helpers/mcp.js';
import { reapAll, spawnNode } from '../helpers/process.js';
import { startRelay } from '../helpers/spawn-relay.js';

let root: string;
const peers: Peer[] = [];
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-notices-'));
});
afterEach(async () => {
  await Promise.all(peers.splice(0).map((p) => p.close().catch(() => undefined)));
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

/** A relay, alice (session a1) and bob (session `bobSession`), paired. */
async function pairedPeers(bobSession: string): Promise<{ alice: Peer; bob: Peer }> {
  const relay = await startRelay();
  const alice = await startPeer({ root, name: 'alice', session: 'a1', relays: relay.url });
  const bob = await startPeer({ root, name: 'bob', session: bobSession, relays: relay.url });
  peers.push(alice, bob);
  await pair(alice, bob);
  return { alice, bob };
}

interface Inbox {
  messages: { msg_id: string; text: string; receipt: { sender: string; msg_id: string } }[];
}

describe('notices for Claude', () => {
  it('wakes a waiting listener with a pointer, and records inbox_queued then receiver_acknowledged', async () => {
    const { alice, bob } = await pairedPeers('b1');

    const listener = spawnNode(MAIN, ['wait', '--session', 'b1'], { INTERLINK_STATE_DIR: bob.state, INTERLINK_CONFIG_DIR: bob.config });
    const sent = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text: 'PRIVATE BODY: review PR 42', status: 'needs_input', task_id: 't1' });
    const exit = await listener.exited;
    expect(exit.code).toBe(2);
    const notice = listener.stderr();
    expect(notice).toMatch(/notification_id n-[0-9a-f]{16}/);
    expect(notice).toContain('receive_messages');
    expect(notice).not.toContain('PRIVATE BODY');

    const inbox = await bob.call<Inbox>('receive_messages', { notification_id: /n-[0-9a-f]{16}/.exec(notice)![0] });
    expect(inbox.messages.map((m) => m.msg_id)).toEqual([sent.msg_id]);
    await bob.call('acknowledge_messages', { messages: [inbox.messages[0]!.receipt] });
    const status = await eventually(async () => {
      const s = await bob.call<{ history: { state: string }[] }>('message_status', { msg_id: sent.msg_id });
      return s.history.length >= 3 ? s : undefined;
    });
    expect(status.history.map((h) => h.state)).toEqual(['receiver_stored', 'inbox_queued', 'receiver_acknowledged']);

    // Nothing more to say: the next listener waits, then renews without a notice.
    const next = spawnNode(MAIN, ['wait', '--session', 'b1', '--renew-after-secs', '2'], { INTERLINK_STATE_DIR: bob.state, INTERLINK_CONFIG_DIR: bob.config });
    const renewal = await next.exited;
    expect(renewal.code).toBe(2);
    expect(next.stderr()).not.toMatch(/notification_id/);
  });

  it("a session's first listener does not announce notices whose messages were acknowledged, and shows one notice for what is unread", async () => {
    const { alice, bob } = await pairedPeers('b1');
    const env = { INTERLINK_STATE_DIR: bob.state, INTERLINK_CONFIG_DIR: bob.config };
    const inboxFile = join(bob.state, 'inbox', 'b1.jsonl');
    const noticeLines = async () => (await readFile(inboxFile, 'utf8').catch(() => '')).split('\n').filter((l) => l !== '').length;
    // No listener runs: each message gets a notice in the inbox, and the agent reads and
    // acknowledges it anyway (told by its person, or through another session).
    for (let i = 1; i <= 3; i++) {
      await alice.call('send_message', { to: 'bob', session: 'b1', text: `question ${i}` });
      await eventually(async () => ((await noticeLines()) >= i ? true : undefined), 15_000, `notice ${i}`);
      const inbox = await bob.call<Inbox>('receive_messages');
      await bob.call('acknowledge_messages', { messages: inbox.messages.map((m) => m.receipt) });
    }
    expect(await noticeLines()).toBe(3);

    const first = spawnNode(MAIN, ['wait', '--session', 'b1', '--renew-after-secs', '1'], env);
    expect((await first.exited).code).toBe(2);
    expect(first.stderr()).not.toMatch(/notification_id/);
    expect(first.stderr()).toContain('no messages are waiting');

    // Two more notices while one message stays unread: the listener shows only the newest.
    await alice.call('send_message', { to: 'bob', session: 'b1', text: 'still open' });
    await eventually(async () => ((await noticeLines()) >= 4 ? true : undefined), 15_000, 'notice 4');
    await bob.call('receive_messages', { reset_notification: true });
    await eventually(async () => ((await noticeLines()) >= 5 ? true : undefined), 15_000, 'notice 5');
    const next = spawnNode(MAIN, ['wait', '--session', 'b1', '--renew-after-secs', '30'], env);
    expect((await next.exited).code).toBe(2);
    const ids = next.stderr().match(/notification_id n-[0-9a-f]{16}/g) ?? [];
    expect(new Set(ids).size, next.stderr()).toBe(1);
    expect(next.stderr()).toMatch(/^1 unread Interlink message from alice/m);
  });

  it('never wakes for a notice written moments ago whose only message is already acknowledged (a wake costs a model turn)', async () => {
    const { alice, bob } = await pairedPeers('b1');
    const env = { INTERLINK_STATE_DIR: bob.state, INTERLINK_CONFIG_DIR: bob.config };
    const inboxFile = join(bob.state, 'inbox', 'b1.jsonl');
    const sent = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text: 'read me at once', status: 'needs_input' });
    await eventually(async () => ((await readFile(inboxFile, 'utf8').catch(() => '')).includes('notification_id') ? true : undefined), 15_000, 'the notice');
    // The agent reads and acknowledges it right away (its turn was still running), then the Stop hook starts the listener.
    const inbox = await bob.call<Inbox>('receive_messages');
    expect(inbox.messages.map((m) => m.msg_id)).toEqual([sent.msg_id]);
    await bob.call('acknowledge_messages', { messages: [inbox.messages[0]!.receipt] });
    const listener = spawnNode(MAIN, ['wait', '--session', 'b1', '--renew-after-secs', '1'], env);
    expect((await listener.exited).code).toBe(2);
    expect(listener.stderr()).not.toMatch(/unread Interlink message/);
    expect(listener.stderr()).toContain('no messages are waiting');
  });

  it('does not wake for progress', async () => {
    const { alice, bob } = await pairedPeers('b1');
    const progress = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text: '40% done', task_id: 't1', status: 'update' });
    await eventually(async () => ((await bob.call<Inbox>('receive_messages')).messages.some((m) => m.msg_id === progress.msg_id) ? true : undefined));
    await alice.call('send_message', { to: 'bob', session: 'b1', text: 'a question', task_id: 't2', status: 'needs_input' });
    const listener = spawnNode(MAIN, ['wait', '--session', 'b1'], { INTERLINK_STATE_DIR: bob.state, INTERLINK_CONFIG_DIR: bob.config });
    expect((await listener.exited).code).toBe(2);
    // The one notice covers the question only.
    expect(listener.stderr()).toMatch(/^1 unread Interlink message /m);
    const status = await bob.call<{ history: { state: string }[] }>('message_status', { msg_id: progress.msg_id });
    expect(status.history.map((h) => h.state)).toEqual(['receiver_stored']);
  });

  it('follows a rebind by the hooks (after /clear the hooks see a new session id) and re-sends the open notice there', async () => {
    const { alice, bob } = await pairedPeers('spawn-id');
    const env = { INTERLINK_STATE_DIR: bob.state, INTERLINK_CONFIG_DIR: bob.config };

    // Before the rebind the notice goes to the spawn-time session's inbox...
    await alice.call('send_message', { to: 'bob', session: 'spawn-id', text: 'before /clear' });
    const old = spawnNode(MAIN, ['wait', '--session', 'spawn-id'], env);
    expect((await old.exited).code).toBe(2);

    // ...after it, the still-unread message is announced again in the new session's inbox.
    expect(await bob.call('bind_claude_session', { session_id: 'after-clear' })).toEqual({ session_id: 'after-clear', mailbox_session: 'spawn-id', changed: true });
    const fresh = spawnNode(MAIN, ['wait', '--session', 'after-clear'], env);
    expect((await fresh.exited).code).toBe(2);
    expect(fresh.stderr()).toMatch(/^1 unread Interlink message from alice/m);
    // Binding again to the same id is idempotent.
    expect(await bob.call('bind_claude_session', { session_id: 'after-clear' })).toMatchObject({ changed: false });
    expect((await bob.fail('bind_claude_session', { session_id: '../escape' })).code).toBe('bad_name');
  });
});
