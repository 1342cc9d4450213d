/**
 * Locks whose holder was killed with SIGKILL (issue 16, faults below), through the real
 * processes (DESIGN.md "Sidecar locks"; the lock module's own cases are in
 * test/store/lock.test.ts):
 * - the notifier lock a `serve` holds for its lifetime: a second server of the session
 *   marks it and leaves it to its live holder; once the holder is killed, the second takes
 *   it over within its 5 s pass and wakes the host from then on;
 * - an outbox lock a `serve` died holding mid-commit: `interlink-mcp outbox drop` takes
 *   it over at once, and a restarted server finds the outbox whole.
 */
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mailboxPath, outboxPath } from '../../src/config/layout.js';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { generateSigningKey } from '../../src/identity/ed25519.js';
import { processIsRunning } from '../../src/store/liveness.js';
import { runCli, userEnv } from '../helpers/cli.js';
import { eventually, kill9, pair, startPeer, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { freePort, startRelay } from '../helpers/spawn-relay.js';

let root: string;
const peers: Peer[] = [];

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-dead-lock-'));
});
afterEach(async () => {
  await Promise.all(peers.splice(0).map((p) => p.close().catch(() => undefined)));
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

async function start(name: string, session: string, relays: string, env: Record<string, string> = {}): Promise<Peer> {
  const p = await startPeer({ root, name, session, relays, env });
  peers.push(p);
  return p;
}

/** The pid a lock file names, or undefined while there is none. */
async function holderPid(lockPath: string): Promise<number | undefined> {
  const text = await readFile(lockPath, 'utf8').catch(() => undefined);
  return text === undefined ? undefined : (JSON.parse(text) as { pid: number }).pid;
}

/** Whether a waiter marked the lock as wanted: its mtime set to one second after the epoch (lock-file.ts). */
async function marked(lockPath: string): Promise<boolean> {
  return (await stat(lockPath)).mtimeMs <= 1_000;
}

async function noticeCount(p: Peer, session: string): Promise<number> {
  return (await noticeCounts(p, session)).length;
}

/** The `count` of each notice in the session's inbox file, in order. */
async function noticeCounts(p: Peer, session: string): Promise<number[]> {
  const text = await readFile(join(p.state, 'inbox', `${session}.jsonl`), 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => (JSON.parse(line) as { count: number }).count);
}

describe('a lock whose holder was killed', () => {
  it("is not taken from a live server; a second server of the session takes the notifier lock within its 5 s pass once the holder is killed, and wakes the host", async () => {
    const relay = await startRelay();
    const alice = await start('alice', 'a1', relay.url);
    const first = await start('bob', 'b1', relay.url);
    const { bKey } = await pair(alice, first);
    const lock = `${mailboxPath(first.state, bKey, 'b1')}.notifier.lock`;
    await eventually(async () => ((await holderPid(lock)) === first.pid() ? true : undefined), 10_000, 'the first server holding the notifier lock');

    // A second server of the same session, while the first lives: it asks (marks the
    // lock), and leaves it; the first still wakes the host.
    const second = await start('bob', 'b1', relay.url);
    await eventually(async () => ((await marked(lock)) ? true : undefined), 15_000, 'the second server marking the lock');
    expect(await holderPid(lock)).toBe(first.pid());
    await alice.call('send_message', { to: 'bob', session: 'b1', text: 'while both run' });
    await eventually(async () => ((await noticeCount(second, 'b1')) >= 1 ? true : undefined), 15_000, 'a notice for the first message');
    expect(await holderPid(lock)).toBe(first.pid());

    // The holder dies without releasing anything; its lock names a dead process.
    const killedAt = Date.now();
    kill9(first);
    peers.splice(peers.indexOf(first), 1);
    await eventually(async () => ((await holderPid(lock)) === second.pid() ? true : undefined), 12_000, 'the second server taking the notifier lock');
    // Its idle pass comes every 5 s (DESIGN.md "Notices"); the lock is broken on that look.
    expect(Date.now() - killedAt).toBeLessThan(9_000);

    // It wakes the host now: once the first notice is let go, a notice covers both unread
    // messages. The second message is stored before the reset: a reset with only the first
    // unread is noticed again at once (count 1), and the notice for the second could then
    // wait on that one's reservation.
    const { msg_id } = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text: 'after the holder died' });
    await eventually(
      async () => ((await second.call<{ history: { state: string }[] }>('message_status', { msg_id }).catch(() => undefined))?.history.some((h) => h.state === 'receiver_stored') ? true : undefined),
      15_000,
      'the second message stored',
    );
    const before = await noticeCount(second, 'b1');
    await second.call('receive_messages', { reset_notification: true });
    await eventually(async () => ((await noticeCounts(second, 'b1')).slice(before).some((count) => count === 2) ? true : undefined), 15_000, 'a notice from the second server covering both messages');
    const texts = (await second.call<{ messages: { text: string }[] }>('receive_messages')).messages.map((m) => m.text);
    expect(texts).toEqual(['while both run', 'after the holder died']);
  }, 60_000);

  it('is taken over at once by the CLI when the server died mid-commit, and the outbox is whole after', async () => {
    // No relay answers: sends stay pending in the outbox.
    const relays = `ws://127.0.0.1:${await freePort()}`;
    const alice = await start('alice', 'a1', relays, { INTERLINK_CRASH_AT: 'outbox.append.after_sync@2' });
    const key = (await alice.call<{ identity: string }>('get_my_session_id')).identity;
    await alice.call('add_peer', { petname: 'bob', key: encodeBase64url(generateSigningKey().publicKey) });
    const first = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text: 'first' });
    // The second commit is synced, and the server is killed before it lets go of the lock.
    const pid = alice.pid()!;
    const second = await alice.client.callTool({ name: 'send_message', arguments: { to: 'bob', session: 'b1', text: 'second' } }).then(() => 'answered', () => 'no answer');
    expect(second).toBe('no answer');
    peers.splice(peers.indexOf(alice), 1);
    await eventually(async () => (processIsRunning(pid) ? undefined : true), 10_000, 'the server gone');
    const lock = `${outboxPath(alice.state, key, 'a1')}.lock`;
    expect(await holderPid(lock)).toBe(pid);

    // A person's command needs that lock: it breaks it on the first look, not after the
    // 10 s a live holder is waited on.
    const env = userEnv({ root, configDir: alice.config, stateDir: alice.state }, { INTERLINK_URL: relays });
    const startedAt = Date.now();
    const drop = await runCli(['outbox', 'drop', first.msg_id], env);
    expect(drop.code, drop.stderr).toBe(0);
    expect(drop.stdout).toContain(`Dropped ${first.msg_id}`);
    expect(Date.now() - startedAt).toBeLessThan(5_000);
    expect(await holderPid(lock)).toBeUndefined();

    // A new server of the session finds the outbox whole: the synced second send pending,
    // the first dropped.
    const again = await start('alice', 'a1', relays);
    const { pending } = await again.call<{ pending: { msg_id: string }[] }>('list_pending');
    expect(pending).toHaveLength(1);
    expect(pending[0]!.msg_id).not.toBe(first.msg_id);
    expect((await again.call<{ state: string }>('message_status', { msg_id: first.msg_id })).state).toBe('canceled');
  }, 60_000);
});
