/**
 * Codex mode end to end, with real processes: a relay, `interlink-mcp serve` in Claude and
 * in Codex mode driven by the MCP SDK client, and a `codex` stand-in that logs each run.
 * Before a hook binds the thread, nothing runs; after, the thread UUID is the session id
 * and notices go to `codex queue --thread <uuid> --message <notice>`.
 */
import type { Failure } from '../../../src/hosts/codex/failed.js';
import { randomUUID } from 'node:crypto';
import { chmod, mkdir, mkdtemp, rm, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { toolsFor } from '../../../src/mcp/tools.js';
import { callWithMeta, errorCode, reapCli, runCli, switchableCodex } from '../../helpers/codex.js';
import { fakeCodex } from '../../helpers/fake-codex.js';
import { eventually, pair, startPeer, type Peer, type PeerOptions } from '../../helpers/mcp.js';
import { reapAll } from '../../helpers/process.js';
import { startRelay } from '../../helpers/spawn-relay.js';
import { TestClient } from '../../helpers/relay-test-client.js';
import { loadIdentity } from '../../../src/identity/identity.js';
import { defaultKeyPath } from '../../../src/config/layout.js';

let root: string;
const peers: Peer[] = [];
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-codex-mode-'));
});
afterEach(async () => {
  await Promise.all(peers.splice(0).map((p) => p.close().catch(() => undefined)));
  await reapCli();
  await reapAll();
  await chmod(root, 0o700).catch(() => undefined);
  await rm(root, { recursive: true, force: true });
});

async function peer(options: PeerOptions): Promise<Peer> {
  const p = await startPeer(options);
  peers.push(p);
  return p;
}

/** A Codex-mode server (INTERLINK_MODE=codex); `env` adds the codex stand-in. */
function codexPeer(relays: string, env: Record<string, string>, name = 'bob'): Promise<Peer> {
  return peer({ root, name, session: 'ignored-in-codex-mode', relays, env: { INTERLINK_MODE: 'codex', ...env } });
}

interface Status {
  direction: string;
  state: string;
  history: { state: string; at: number }[];
}
interface Inbox {
  messages: { msg_id: string; text: string; receipt: { sender: string; msg_id: string } }[];
}

const states = (s: Status) => s.history.map((h) => h.state);
const NOTICE_ID = /n-[0-9a-f]{16}/;

/** Waits until the message's history has `count` states; returns the status. */
function statusWith(p: Peer, msgId: string, count: number, what: string): Promise<Status> {
  return eventually(
    async () => {
      const result = await callWithMeta(p, 'message_status', { msg_id: msgId }, {});
      // Not stored yet: unknown_message; any other failure is one.
      if (errorCode(result) === 'unknown_message') return undefined;
      if (result.isError) throw new Error(`message_status failed: ${JSON.stringify(result.data)}`);
      const s = result.data as unknown as Status;
      return s.history.length >= count ? s : undefined;
    },
    15_000,
    what,
  );
}

/**
 * A relay, alice (Claude mode) and bob (Codex mode, bound to a new thread, running the
 * switchable stand-in as its codex), paired.
 */
async function pairedWithCodex(mode: 'fail' | 'missing') {
  const relay = await startRelay();
  const codex = await switchableCodex(root, mode);
  const alice = await peer({ root, name: 'alice', session: 'a1', relays: relay.url });
  const bob = await codexPeer(relay.url, { INTERLINK_CODEX_BIN: codex.bin });
  const thread = randomUUID();
  await bob.call('bind_codex_session', { thread_id: thread });
  await pair(alice, bob);
  return { codex, alice, bob, thread };
}

describe('Codex mode: before binding', () => {
  it('refuses session tools with not_bound, does not announce, and still lists every Codex-mode tool', async () => {
    const relay = await startRelay();
    const bob = await codexPeer(relay.url, {});
    for (const [name, args] of [
      ['get_my_session_id', {}],
      ['send_message', { to: 'self', text: 'hi' }],
      ['receive_messages', {}],
      ['failed_deliveries', { action: 'list' }],
    ] as const) {
      const error = await bob.fail(name, args);
      expect(error.code, name).toBe('not_bound');
      expect(error.message).toContain('bind_codex_session');
    }
    const listed = (await bob.client.listTools()).tools.map((t) => t.name);
    expect(listed.sort()).toEqual(toolsFor('codex').map((t) => t.name).sort());
    expect(listed).toEqual(expect.arrayContaining(['bind_codex_session', 'failed_deliveries']));
    expect(listed).not.toContain('bind_claude_session');

    // A Claude-mode peer started after bob announces and is on the roster; bob, running for
    // longer, is not there: an unbound server does not announce. The relay is asked for
    // both keys, as a session asks for its peers'.
    const bobKey = (await loadIdentity(defaultKeyPath(bob.config))).key;
    const alice = await peer({ root, name: 'alice', session: 'a1', relays: relay.url });
    const aliceKey = (await alice.call<{ identity: string }>('get_my_session_id')).identity;
    const asker = await TestClient.connect(relay.url);
    const onRoster = async () => {
      const ref = randomUUID();
      asker.frame({ type: 'roster', ref, keys: [aliceKey, bobKey] });
      const reply = await asker.waitFor('a roster reply', (f) => f.type === 'roster' && f.ref === ref);
      return reply.type === 'roster' ? reply.entries.map((e) => (e.announcement as { key: string; session: string })) : [];
    };
    const before = await eventually(async () => {
      const seen = await onRoster();
      return seen.some((a) => a.key === aliceKey && a.session === 'a1') ? seen : undefined;
    }, 15_000, 'alice on the roster');
    expect(before.map((a) => a.key)).toEqual([aliceKey]);

    // Once bound, bob announces its thread session.
    const thread = randomUUID();
    await bob.call('bind_codex_session', { thread_id: thread });
    expect((await bob.call<{ identity: string }>('get_my_session_id')).identity).toBe(bobKey);
    await eventually(async () => ((await onRoster()).some((a) => a.key === bobKey && a.session === thread) ? true : undefined), 15_000, 'bob on the roster');
    await asker.close();
  });
});

describe('Codex mode: binding', () => {
  it('binds once to a full thread UUID and checks the thread every call names', async () => {
    const relay = await startRelay();
    const bob = await codexPeer(relay.url, {});
    const thread = randomUUID();
    const other = randomUUID();

    for (const bad of ['my-thread', thread.slice(0, 8), `${thread}-x`, ` ${thread.slice(1)}`]) {
      expect((await bob.fail('bind_codex_session', { thread_id: bad })).code, bad).toBe('usage');
    }
    expect((await bob.fail('bind_claude_session', { session_id: 's1' })).code).toBe('wrong_mode');

    // _meta naming another thread than the argument: refused, and the server stays unbound.
    for (const meta of [{ threadId: other }, { 'x-codex-turn-metadata': { thread_id: other } }, { threadId: thread, 'x-codex-turn-metadata': { thread_id: other } }]) {
      const refused = await callWithMeta(bob, 'bind_codex_session', { thread_id: thread }, meta);
      expect(errorCode(refused), JSON.stringify(meta)).toBe('thread_mismatch');
      expect((await bob.fail('get_my_session_id')).code).toBe('not_bound');
    }

    // _meta agreeing with the argument (case aside) binds.
    const bound = await callWithMeta(bob, 'bind_codex_session', { thread_id: thread.toUpperCase() }, { threadId: thread.toUpperCase(), 'x-codex-turn-metadata': { thread_id: thread } });
    expect(bound).toEqual({ isError: false, data: { thread_id: thread, session_id: thread, bound_now: true } });
    expect(await bob.call('get_my_session_id')).toMatchObject({ session_id: thread });

    // The same thread again is a no-op, in either case; another is refused.
    expect(await bob.call('bind_codex_session', { thread_id: thread })).toEqual({ thread_id: thread, session_id: thread, bound_now: false });
    expect(await bob.call('bind_codex_session', { thread_id: thread.toUpperCase() })).toEqual({ thread_id: thread, session_id: thread, bound_now: false });
    expect((await bob.fail('bind_codex_session', { thread_id: other })).code).toBe('thread_mismatch');
    expect(errorCode(await callWithMeta(bob, 'bind_codex_session', { thread_id: thread }, { threadId: other }))).toBe('thread_mismatch');
    expect(errorCode(await callWithMeta(bob, 'bind_codex_session', { thread_id: other }, { threadId: other }))).toBe('thread_mismatch');
    expect(await bob.call('get_my_session_id')).toMatchObject({ session_id: thread });

    // Every call is checked against the binding when its _meta names a thread.
    for (const meta of [{ threadId: other }, { 'x-codex-turn-metadata': { thread_id: other } }, { threadId: thread, 'x-codex-turn-metadata': { thread_id: other } }]) {
      for (const [name, args] of [
        ['get_my_session_id', {}],
        ['receive_messages', {}],
        ['failed_deliveries', { action: 'list' }],
      ] as const) {
        expect(errorCode(await callWithMeta(bob, name, args, meta)), `${name} ${JSON.stringify(meta)}`).toBe('thread_mismatch');
      }
    }
    for (const meta of [{ threadId: thread }, { threadId: thread.toUpperCase() }, { 'x-codex-turn-metadata': { thread_id: thread } }, { progressToken: 1 }]) {
      const ok = await callWithMeta(bob, 'get_my_session_id', {}, meta);
      expect(ok.isError, JSON.stringify(meta)).toBe(false);
      expect(ok.data.session_id).toBe(thread);
    }
    expect((await bob.call<{ failures: unknown[] }>('failed_deliveries', { action: 'list' })).failures).toEqual([]);
  });

  it('stays unbound when the session cannot start, and the next bind tries again', async () => {
    const relay = await startRelay();
    const state = join(root, 'state-is-a-file');
    await writeFile(state, 'not a directory');
    const bob = await codexPeer(relay.url, { INTERLINK_STATE_DIR: state });
    const thread = randomUUID();
    expect((await bob.fail('bind_codex_session', { thread_id: thread })).code).toBe('storage');
    expect((await bob.fail('get_my_session_id')).code).toBe('not_bound');
    await unlink(state);
    expect(await bob.call('bind_codex_session', { thread_id: thread })).toEqual({ thread_id: thread, session_id: thread, bound_now: true });
    expect(await bob.call('get_my_session_id')).toMatchObject({ session_id: thread });
  });

  it('is the same with serve --codex; never declares claude/channel; Claude mode refuses bind_codex_session', async () => {
    const relay = await startRelay();
    const byEnv = await codexPeer(relay.url, { INTERLINK_CHANNELS: '1' }, 'by-env');
    const byFlag = await peer({ root, name: 'by-flag', session: 's-flag', relays: relay.url, args: ['serve', '--codex'], env: { INTERLINK_CHANNELS: '1' } });
    const claude = await peer({ root, name: 'claude', session: 's-claude', relays: relay.url, env: { INTERLINK_CHANNELS: '1' } });

    expect(claude.client.getServerCapabilities()?.experimental).toEqual({ 'claude/channel': {} });
    for (const codex of [byEnv, byFlag]) {
      const capabilities = codex.client.getServerCapabilities();
      expect(capabilities?.tools).toBeDefined();
      expect(capabilities?.experimental?.['claude/channel']).toBeUndefined();
      expect((await codex.fail('get_my_session_id')).code).toBe('not_bound');
      expect((await codex.fail('bind_claude_session', { session_id: 's1' })).code).toBe('wrong_mode');
      const thread = randomUUID();
      expect(await codex.call('bind_codex_session', { thread_id: thread })).toMatchObject({ session_id: thread, bound_now: true });
      expect(await codex.call('get_my_session_id')).toMatchObject({ session_id: thread });
    }
    expect((await claude.fail('bind_codex_session', { thread_id: randomUUID() })).code).toBe('wrong_mode');
    expect(await claude.call('get_my_session_id')).toMatchObject({ session_id: 's-claude' });
  });
});

describe('Codex mode: notices', () => {
  it('hands a pointer to codex queue for the bound thread, and the agent receives and acknowledges', async () => {
    const relay = await startRelay();
    const codex = await fakeCodex(root);
    const alice = await peer({ root, name: 'alice', session: 'a1', relays: relay.url });
    // The stand-in is found as `codex` on PATH (no INTERLINK_CODEX_BIN).
    const bob = await codexPeer(relay.url, codex.env('ok'));
    const thread = randomUUID();
    await bob.call('bind_codex_session', { thread_id: thread });
    await pair(alice, bob);

    const sent = await alice.call<{ msg_id: string; session: string }>('send_message', { to: 'bob', session: thread, text: 'PRIVATE BODY: review PR 42', status: 'needs_input', task_id: 't1' });
    expect(sent.session).toBe(thread);
    const status = await statusWith(bob, sent.msg_id, 2, 'host_queued');
    expect(status.direction).toBe('inbound');
    expect(states(status)).toEqual(['receiver_stored', 'host_queued']);

    const calls = codex.calls();
    expect(calls).toHaveLength(1);
    const argv = calls[0]!.argv;
    expect(argv.slice(0, 4)).toEqual(['queue', '--thread', thread, '--message']);
    expect(argv).toHaveLength(5);
    const notice = argv[4]!;
    const notificationId = NOTICE_ID.exec(notice)?.[0];
    expect(notificationId).toBeDefined();
    expect(notice).toContain('receive_messages');
    expect(notice).toContain('from alice');
    expect(notice).not.toContain('PRIVATE BODY');
    expect(notice).not.toContain('PR 42');

    const inbox = await bob.call<Inbox>('receive_messages', { notification_id: notificationId });
    expect(inbox.messages.map((m) => [m.msg_id, m.text])).toEqual([[sent.msg_id, 'PRIVATE BODY: review PR 42']]);
    await bob.call('acknowledge_messages', { messages: [inbox.messages[0]!.receipt] });
    const acked = await statusWith(bob, sent.msg_id, 3, 'receiver_acknowledged');
    expect(states(acked)).toEqual(['receiver_stored', 'host_queued', 'receiver_acknowledged']);
    expect((await bob.call<Inbox>('receive_messages')).messages).toEqual([]);
    // Nothing was saved as a failure, and no second notice went out.
    expect((await bob.call<{ failures: unknown[] }>('failed_deliveries', { action: 'list' })).failures).toEqual([]);
    expect(codex.calls()).toHaveLength(1);
  });

  it('records delivery_failed after three attempts 2 s apart, saves the failure, and recovers it with failed_deliveries', async () => {
    const { codex, alice, bob, thread } = await pairedWithCodex('fail');

    const sent = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: thread, text: 'SECRET BODY', status: 'needs_input' });
    const failed = await statusWith(bob, sent.msg_id, 2, 'delivery_failed');
    expect(states(failed)).toEqual(['receiver_stored', 'delivery_failed']);

    const calls = codex.calls();
    expect(calls).toHaveLength(3);
    const notice = calls[0]!.argv[4]!;
    for (const call of calls) expect(call.argv).toEqual(['queue', '--thread', thread, '--message', notice]);
    expect(calls[1]!.t - calls[0]!.t).toBeGreaterThanOrEqual(1_950);
    expect(calls[2]!.t - calls[1]!.t).toBeGreaterThanOrEqual(1_950);
    expect(notice).not.toContain('SECRET BODY');

    const { failures, note } = await bob.call<{ failures: Failure[]; note: string }>('failed_deliveries', { action: 'list' });
    expect(note).toContain('unread');
    expect(failures).toHaveLength(1);
    const saved = failures[0]!;
    expect(saved).toMatchObject({ kind: 'notice', thread, message: notice, outcome: 'delivery_failed', attempts: 3, retries: 0, notification_id: NOTICE_ID.exec(notice)![0] });
    expect(saved.reason).toContain('No active session found');
    expect(await bob.call('failed_deliveries', { action: 'read', id: saved.id })).toEqual({ failure: saved, note });

    expect((await bob.fail('failed_deliveries', { action: 'discard', id: 'f-0000000000000000' })).code).toBe('unknown_failure');
    expect((await bob.fail('failed_deliveries', { action: 'read', id: 'f-0000000000000000' })).code).toBe('unknown_failure');
    expect((await bob.fail('failed_deliveries', { action: 'retry' })).code).toBe('usage');
    expect((await bob.fail('failed_deliveries', { action: 'explode' })).code).toBe('bad_arguments');

    // Codex takes it now: the retry queues the same notice, forgets the failure and
    // records host_queued on the message (the notice is still the current one).
    await codex.set('ok');
    const retried = await bob.call<{ outcome: string; still_saved: boolean; attempts: number; notification_id: string }>('failed_deliveries', { action: 'retry', id: saved.id });
    expect(retried).toMatchObject({ id: saved.id, outcome: 'host_queued', still_saved: false, attempts: 1, notification_id: saved.notification_id, thread });
    expect(codex.calls()).toHaveLength(4);
    expect(codex.calls()[3]!.argv).toEqual(['queue', '--thread', thread, '--message', notice]);
    expect((await bob.call<{ failures: Failure[] }>('failed_deliveries', { action: 'list' })).failures).toEqual([]);
    expect(states(await bob.call<Status>('message_status', { msg_id: sent.msg_id }))).toEqual(['receiver_stored', 'delivery_failed', 'host_queued']);
    expect((await bob.fail('failed_deliveries', { action: 'retry', id: saved.id })).code).toBe('unknown_failure');

    // A fresh notice that cannot be handed over (codex is gone) is saved again; discarding
    // it removes the saved failure only: the message stays unread.
    await codex.set('missing');
    await bob.call('receive_messages', { reset_notification: true });
    const again = await eventually(async () => {
      const list = (await bob.call<{ failures: Failure[] }>('failed_deliveries', { action: 'list' })).failures;
      return list.length > 0 ? list : undefined;
    }, 15_000, 'a second saved failure');
    expect(again).toHaveLength(1);
    expect(again[0]!.notification_id).not.toBe(saved.notification_id);
    expect(again[0]).toMatchObject({ outcome: 'delivery_failed', attempts: 1 });
    expect(again[0]!.reason).toContain('cannot run codex');
    const discarded = await bob.call('failed_deliveries', { action: 'discard', id: again[0]!.id });
    expect(discarded).toMatchObject({ id: again[0]!.id, discarded: true });
    expect((await bob.call<{ failures: Failure[] }>('failed_deliveries', { action: 'list' })).failures).toEqual([]);
    const inbox = await bob.call<Inbox>('receive_messages');
    expect(inbox.messages.map((m) => m.msg_id)).toEqual([sent.msg_id]);
    const after = await statusWith(bob, sent.msg_id, 4, 'second delivery_failed');
    expect(states(after)).toEqual(['receiver_stored', 'delivery_failed', 'host_queued', 'delivery_failed']);
    expect(codex.calls()).toHaveLength(4);
  });

  it('carries on when the failed-deliveries file cannot be written: the state is recorded and the next notice goes to codex', async () => {
    const { codex, alice, bob, thread } = await pairedWithCodex('missing');
    const bobKey = (await bob.call<{ identity: string }>('get_my_session_id')).identity;

    // Make failed/<identity>/<thread>.json unwritable. chmod does not stop root, so there
    // the file's path is taken by a directory instead.
    const dir = join(bob.state, 'failed', bobKey);
    await mkdir(dir, { recursive: true });
    const asRoot = process.getuid?.() === 0;
    if (asRoot) await mkdir(join(dir, `${thread}.json`));
    else await chmod(dir, 0o500);

    const first = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: thread, text: 'first' });
    expect(states(await statusWith(bob, first.msg_id, 2, 'delivery_failed'))).toEqual(['receiver_stored', 'delivery_failed']);
    await eventually(async () => (bob.stderr().includes('failed_deliveries_unwritable') ? true : undefined), 15_000, 'the unwritable file to be logged');
    // Nothing could be saved.
    const list = await callWithMeta(bob, 'failed_deliveries', { action: 'list' }, {});
    if (asRoot) expect(errorCode(list)).toBe('storage');
    else expect(list.data).toMatchObject({ failures: [] });

    // The agent reads the first message; the next one gets its notice, and codex takes it.
    await codex.set('ok');
    const inbox = await bob.call<Inbox>('receive_messages');
    expect(inbox.messages.map((m) => m.msg_id)).toEqual([first.msg_id]);
    await bob.call('acknowledge_messages', { messages: [inbox.messages[0]!.receipt] });
    const second = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: thread, text: 'second' });
    expect(states(await statusWith(bob, second.msg_id, 2, 'host_queued'))).toEqual(['receiver_stored', 'host_queued']);
    const calls = codex.calls();
    expect(calls).toHaveLength(1);
    expect(calls[0]!.argv.slice(0, 4)).toEqual(['queue', '--thread', thread, '--message']);
    expect(calls[0]!.argv[4]).toMatch(/^1 unread Interlink message from alice/);
  });

  it('stops a failed_deliveries retry under way when the server shuts down: its codex queue is killed', async () => {
    const { codex, alice, bob, thread } = await pairedWithCodex('fail');
    const sent = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: thread, text: 'x', status: 'needs_input' });
    await statusWith(bob, sent.msg_id, 2, 'delivery_failed');
    const [failure] = (await bob.call<{ failures: Failure[] }>('failed_deliveries', { action: 'list' })).failures;

    await codex.set('hang');
    const retry = bob.call('failed_deliveries', { action: 'retry', id: failure!.id }).catch(() => undefined);
    const hanging = await eventually(async () => codex.calls()[3], 15_000, 'the retry attempt');
    await bob.close();
    await retry;
    // The attempt runs in its own process group; only the server's shutdown signal ends it.
    await eventually(
      async () => {
        try {
          process.kill(hanging.pid, 0);
          return undefined;
        } catch {
          return true;
        }
      },
      10_000,
      'the hanging codex queue to be killed',
    );
  });

  it('stops between attempts when the server shuts down, saving the failure and recording delivery_failed', async () => {
    const { codex, alice, bob, thread } = await pairedWithCodex('fail');
    const sent = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: thread, text: 'x' });
    // The stand-in logs its run when it starts; the server logs the retry once the attempt failed.
    await eventually(async () => (bob.stderr().includes('codex_queue_retry') ? true : undefined), 15_000, 'the first attempt to fail');

    // Closing stdin shuts the server down during the 2 s backoff; it exits without the other attempts.
    const started = Date.now();
    await bob.close();
    expect(Date.now() - started).toBeLessThan(1_900);
    expect(codex.calls()).toHaveLength(1);

    const env = { HOME: join(root, 'bob'), INTERLINK_CONFIG_DIR: bob.config, INTERLINK_STATE_DIR: bob.state };
    const list = await runCli(['failed-deliveries', 'list', '--json'], env);
    expect(list.code, list.stderr).toBe(0);
    const failures = (JSON.parse(list.stdout) as { failures: Failure[] }).failures;
    expect(failures).toEqual([expect.objectContaining({ thread, outcome: 'delivery_failed', attempts: 1, reason: 'the server stopped before the next attempt' })]);
    const inbox = await runCli(['inbox', '--session', thread, '--json'], env);
    expect(inbox.code, inbox.stderr).toBe(0);
    expect((JSON.parse(inbox.stdout) as { messages: { msg_id: string; state: string }[] }).messages).toEqual([
      expect.objectContaining({ msg_id: sent.msg_id, state: 'delivery_failed' }),
    ]);
  });
});
