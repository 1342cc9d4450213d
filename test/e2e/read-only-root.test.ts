/**
 * A state root that turns read-only (issue 16, faults below), as a disk the kernel
 * remounted read-only after errors. Root ignores file modes, so the state directory is
 * covered by a read-only bind mount of itself (which root can make; skipped elsewhere),
 * and uncovered to make it writable again:
 * - at start: `serve` stops with one line naming the file and EROFS (it opens its stores
 *   at start); `status`, which only reads, still answers; once the root is writable a
 *   restarted server works and its pending mail goes out;
 * - under a running server: send_message answers `storage` naming the file and EROFS,
 *   arriving mail is logged and left on the relay; once writable, the same process sends
 *   again and takes the waiting mail.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mailboxPath, outboxPath } from '../../src/config/layout.js';
import { runCli, userEnv } from '../helpers/cli.js';
import { eventually, pair, peerPool, resultData, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { startRelay } from '../helpers/spawn-relay.js';

let root: string;
const pool = peerPool(() => root);
const covered: string[] = [];

/** Covers `dir` with a read-only bind mount of itself; false where that is not allowed. */
function makeReadOnly(dir: string): boolean {
  try {
    execFileSync('mount', ['--bind', dir, dir], { stdio: 'ignore' });
  } catch {
    return false;
  }
  covered.push(dir);
  execFileSync('mount', ['-o', 'remount,bind,ro', dir], { stdio: 'ignore' });
  return true;
}

function makeWritable(dir: string): void {
  execFileSync('umount', [dir]);
  covered.splice(covered.indexOf(dir), 1);
}

const mountable = (() => {
  if (process.getuid?.() !== 0) return false;
  const probe = join(tmpdir(), `interlink-bind-probe-${process.pid}`);
  execFileSync('mkdir', ['-p', probe]);
  try {
    if (!makeReadOnly(probe)) return false;
    makeWritable(probe);
    return true;
  } catch {
    return false;
  } finally {
    for (const dir of covered.splice(0)) execFileSync('umount', ['-l', dir]);
    execFileSync('rmdir', [probe]);
  }
})();

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-read-only-'));
});
afterEach(async () => {
  await pool.closeAll();
  await reapAll();
  for (const dir of covered.splice(0)) execFileSync('umount', ['-l', dir]);
  await rm(root, { recursive: true, force: true });
});

async function texts(p: Peer): Promise<string[]> {
  return (await p.call<{ messages: { text: string }[] }>('receive_messages', { limit: 100 })).messages.map((m) => m.text);
}

/** The structured log lines of `event` a server wrote on stderr. */
function logged(stderr: string, event: string): Record<string, unknown>[] {
  return stderr
    .split('\n')
    .filter((line) => line.includes(`"event":"${event}"`))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

const absent = async (path: string) => (await stat(path).catch(() => undefined)) === undefined;

/** A relay, alice (a1) and bob (b1) paired, and one message from bob already read at alice. */
async function pairedAfterOneMessage() {
  const relay = await startRelay({ db: join(root, 'relay-db') });
  const alice = await pool.start('alice', 'a1', relay.url);
  const bob = await pool.start('bob', 'b1', relay.url);
  const { aKey } = await pair(alice, bob);
  await bob.call('send_message', { to: 'alice', session: 'a1', text: 'before' });
  await eventually(async () => ((await texts(alice)).includes('before') ? true : undefined), 15_000, 'before at alice');
  return { relay, alice, bob, aKey };
}

describe.skipIf(!mountable)('a read-only state root', () => {
  it('stops serve at start with one line naming the file and EROFS; status still reads; a restart works once it is writable', async () => {
    const { relay, alice, bob, aKey } = await pairedAfterOneMessage();
    await pool.stop(alice);

    expect(makeReadOnly(alice.state)).toBe(true);
    await bob.call('send_message', { to: 'alice', session: 'a1', text: 'while read-only' });
    const env = userEnv({ root, configDir: alice.config, stateDir: alice.state }, { INTERLINK_URL: relay.url, INTERLINK_SESSION: 'a1' });
    const serve = await runCli(['serve'], env);
    expect(serve.code, serve.stderr).toBe(1);
    expect(serve.stderr).toBe(`interlink-mcp serve: cannot use ${mailboxPath(alice.state, aKey, 'a1')} (EROFS: read-only file system)\n`);
    // Reading needs no writable disk: status shows the stored mail.
    const status = await runCli(['status'], env);
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toMatch(/session +a1( \([^)]*\))?: 1 unread of 1 stored/);

    makeWritable(alice.state);
    const again = await pool.start('alice', 'a1', relay.url);
    await eventually(async () => ((await texts(again)).includes('while read-only') ? true : undefined), 15_000, 'the waiting message after the restart');
    expect(await texts(again)).toEqual(['before', 'while read-only']);
  }, 60_000);

  it('keeps a running server up: sends fail as storage naming the file and EROFS, arriving mail waits on the relay, and both recover once it is writable', async () => {
    const { relay, alice, bob, aKey } = await pairedAfterOneMessage();
    // A lock kept from the last commit (100 ms) would let one more commit through its open journal.
    const outboxLock = `${outboxPath(alice.state, aKey, 'a1')}.lock`;
    const mailboxLock = `${mailboxPath(alice.state, aKey, 'a1')}.lock`;
    await eventually(async () => ((await absent(outboxLock)) && (await absent(mailboxLock)) ? true : undefined), 10_000, 'no kept lock');

    expect(makeReadOnly(alice.state)).toBe(true);
    const result = await alice.client.callTool({ name: 'send_message', arguments: { to: 'bob', session: 'b1', text: 'refused' } });
    expect(result.isError).toBe(true);
    const error = (resultData(result) as { error: { code: string; message: string } }).error;
    expect(error.code).toBe('storage');
    expect(error.message).toBe(`cannot use ${outboxPath(alice.state, aKey, 'a1')} (EROFS: read-only file system)`);
    expect((await alice.call<{ pending: unknown[] }>('list_pending')).pending).toEqual([]);

    await bob.call('send_message', { to: 'alice', session: 'a1', text: 'while read-only' });
    const failure = await eventually(async () => logged(alice.stderr(), 'inbound_storage_failed')[0], 15_000, 'inbound_storage_failed in the log');
    expect(String(failure.error)).toBe(`cannot use ${mailboxPath(alice.state, aKey, 'a1')} (EROFS: read-only file system)`);
    expect(await texts(alice)).toEqual(['before']);

    makeWritable(alice.state);
    await eventually(async () => ((await texts(alice)).includes('while read-only') ? true : undefined), 30_000, 'the waiting message');
    expect(await texts(alice)).toEqual(['before', 'while read-only']);
    await alice.call('send_message', { to: 'bob', session: 'b1', text: 'after' });
    await eventually(async () => ((await texts(bob)).includes('after') ? true : undefined), 15_000, 'after at bob');
    expect(await texts(bob)).toEqual(['after']);
    expect(alice.pid()).not.toBeNull();
  }, 60_000);
});
