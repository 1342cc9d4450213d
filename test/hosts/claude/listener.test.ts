/**
 * `interlink-mcp wait` as Claude runs it: a real child process on real inbox files.
 * Exit 2 means notices (or the renewal notice) were shown; everything else is a silent 0.
 */
import { appendFile, mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { RENEWAL_NOTICE } from '../../../src/hosts/claude/listener.js';
import { inboxPaths, mailboxPath } from '../../../src/config/layout.js';
import { Mailbox } from '../../../src/mailbox/mailbox.js';
import { message, newIdentity, tempDir } from '../../helpers/fixtures.js';
import { appendInboxRecord, type InboxRecord } from '../../../src/hosts/claude/inbox.js';
import { reapListeners, startListener, waitUntil, type ListenerResult } from '../../helpers/listener-process.js';
import { spawnNode, reapAll } from '../../helpers/process.js';

const CLI = join(import.meta.dirname, '..', '..', '..', 'dist', 'src', 'cli', 'main.js');
const WRITER = join(import.meta.dirname, '..', '..', '..', 'dist', 'test', 'helpers', 'listener-writer.js');

let dir: { path: string; remove: () => Promise<void> };
let state: string;
beforeEach(async () => {
  dir = await tempDir('interlink-listener-');
  state = join(dir.path, 'state');
});
afterEach(async () => {
  await reapListeners();
  await reapAll();
  await dir.remove();
});
afterAll(reapListeners);

function notice(session: string, text: string): InboxRecord {
  return { v: 1, kind: 'notice', notification_id: `n-${text}`, session, count: 1, at: Date.now(), text };
}

async function append(session: string, ...texts: string[]): Promise<void> {
  for (const text of texts) await appendInboxRecord(state, session, notice(session, text));
}

/** The listener's output, as Claude would show it: one paragraph per notice. */
function shown(...texts: string[]): string {
  return texts.join('\n\n') + '\n';
}

function listen(args: string[] = [], env: Record<string, string> = {}, stdin?: string) {
  return startListener(CLI, ['--renew-after-secs', '60', ...args], { INTERLINK_STATE_DIR: state, ...env }, stdin);
}

async function cursorOf(session: string): Promise<number> {
  const text = await readFile(inboxPaths(state, session).cursor, 'utf8');
  return (JSON.parse(text) as { offset: number }).offset;
}

async function sizeOf(session: string): Promise<number> {
  return (await stat(inboxPaths(state, session).file)).size;
}

/** Stderr without the JSON log lines a debug-level listener adds. */
function notices(result: ListenerResult): string {
  return result.stderr
    .split('\n')
    .filter((line) => !line.startsWith('{"t":'))
    .join('\n');
}

/** A listener started with INTERLINK_LOG=debug, returned once it is waiting on the inbox. */
async function waitingListener(session: string, args: string[] = []) {
  const listener = listen(['--session', session, ...args], { INTERLINK_LOG: 'debug' });
  await listener.waitForStderr('"listener_waiting"');
  return listener;
}

describe('wait', () => {
  it('shows notices appended before it started, exits 2 and commits the cursor to the end', async () => {
    await append('s1', 'first', 'second\nwith two lines', 'third');
    const result = await listen(['--session', 's1']).done;
    expect(result).toEqual({ code: 2, signal: null, stdout: 'INTERLINK_NOTICES\n', stderr: shown('first', 'second\nwith two lines', 'third') });
    expect(await cursorOf('s1')).toBe(await sizeOf('s1'));
  });

  it('judges a notice by what its mailbox holds at the wake, though it read that mailbox before: acknowledged mail never wakes, new mail does', async () => {
    const me = newIdentity(6);
    const peer = newIdentity(5);
    const mailbox = await Mailbox.open(mailboxPath(state, me.key, 's1'));
    try {
      const first = message(peer, me, { text: 'first' });
      await mailbox.store(first);
      // Read while idle (the session's own mailbox), before the acknowledgement.
      const listener = listen(['--session', 's1'], { INTERLINK_LOG: 'debug' });
      await listener.waitForStderr('"listener_mailbox_read"');
      await listener.waitForStderr('"listener_waiting"');
      await mailbox.acknowledge([{ sender: peer.key, msg_id: first.msg_id }]);
      const mailboxName = { identity: me.key, session: 's1' };
      await appendInboxRecord(state, 's1', { ...notice('s1', 'about the acknowledged one'), mailbox: mailboxName });
      await listener.waitForStderr('"listener_stale_notices"');
      const second = message(peer, me, { text: 'second' });
      await mailbox.store(second);
      await appendInboxRecord(state, 's1', { ...notice('s1', 'about the unread one'), mailbox: mailboxName });
      const result = await listener.done;
      expect(result.code).toBe(2);
      expect(notices(result)).toBe(shown('about the unread one'));
    } finally {
      await mailbox.close();
    }
  });

  it('wakes when a record is appended while it waits', async () => {
    const listener = await waitingListener('s1');
    await append('s1', 'arrived while waiting');
    const result = await listener.done;
    expect(result.code).toBe(2);
    expect(notices(result)).toBe(shown('arrived while waiting'));
    expect(await cursorOf('s1')).toBe(await sizeOf('s1'));
  });

  it('lets one listener per session wait; a duplicate exits 0 without output, and the next one sees only newer records', async () => {
    const first = await waitingListener('s1');
    const second = await listen(['--session', 's1']).done;
    expect(second).toEqual({ code: 0, signal: null, stdout: '', stderr: '' });
    await append('s1', 'one');
    expect(notices(await first.done)).toBe(shown('one'));
    await append('s1', 'two', 'three');
    const third = await listen(['--session', 's1']).done;
    expect(third).toEqual({ code: 2, signal: null, stdout: 'INTERLINK_NOTICES\n', stderr: shown('two', 'three') });
  });

  it('keeps sessions apart', async () => {
    await append('other', 'not for s1');
    await append('s1', 'for s1');
    expect((await listen(['--session', 's1']).done).stderr).toBe(shown('for s1'));
    expect((await listen(['--session', 'other']).done).stderr).toBe(shown('not for s1'));
  });

  it('never consumes a partial final line; the next append repairs it and is shown alone', async () => {
    await append('s1', 'complete');
    const complete = await sizeOf('s1');
    const half = JSON.stringify(notice('s1', 'torn')).slice(0, 40);
    await appendFile(inboxPaths(state, 's1').file, half);
    expect((await listen(['--session', 's1']).done).stderr).toBe(shown('complete'));
    expect(await cursorOf('s1')).toBe(complete);

    await append('s1', 'after repair');
    const lines = (await readFile(inboxPaths(state, 's1').file, 'utf8')).split('\n');
    expect(lines.pop()).toBe('');
    expect(lines.map((line) => (JSON.parse(line) as InboxRecord).text)).toEqual(['complete', 'after repair']);
    expect((await listen(['--session', 's1']).done).stderr).toBe(shown('after repair'));
    expect(await cursorOf('s1')).toBe(await sizeOf('s1'));
  });

  it('hands over at most 64 records at a time', async () => {
    const texts = Array.from({ length: 70 }, (_, i) => `notice ${i}`);
    await append('s1', ...texts);
    expect((await listen(['--session', 's1']).done).stderr).toBe(shown(...texts.slice(0, 64)));
    expect((await listen(['--session', 's1']).done).stderr).toBe(shown(...texts.slice(64)));
  });

  it('hands over a record larger than the 256 KiB batch bound alone', async () => {
    // Notice text is capped at 12 KiB, so a line this large can only be a valid record
    // written by a newer version with a field this one does not know (and ignores).
    const big = { ...notice('s1', 'big one'), attachment: 'x'.repeat(300 * 1024) };
    await mkdir(inboxPaths(state, 's1').dir, { recursive: true });
    await appendFile(inboxPaths(state, 's1').file, JSON.stringify(big) + '\n');
    await append('s1', 'small one');
    expect((await listen(['--session', 's1']).done).stderr).toBe(shown('big one'));
    expect((await listen(['--session', 's1']).done).stderr).toBe(shown('small one'));
  });

  it('writes the renewal notice and exits 2 when nothing arrives in --renew-after-secs', async () => {
    const result = await startListener(CLI, ['--session', 's1', '--renew-after-secs', '1'], { INTERLINK_STATE_DIR: state }).done;
    expect(result).toEqual({ code: 2, signal: null, stdout: 'INTERLINK_NOTICES\n', stderr: RENEWAL_NOTICE + '\n' });
    expect(RENEWAL_NOTICE).toMatch(/end this turn/);
  });

  for (const bad of ['0', '3001', '1.5', 'soon']) {
    it(`refuses --renew-after-secs ${bad} as a usage error: one line, exit 64, never 2 (a failing hook must not wake Claude)`, async () => {
      const result = await startListener(CLI, ['--renew-after-secs', bad], { INTERLINK_STATE_DIR: state }).done;
      expect(result.code).toBe(64);
      expect(result.stdout).toBe('');
      expect(result.stderr).toMatch(/^interlink-mcp wait: --renew-after-secs [^\n]*\n$/);
    });
  }

  it('exits 0 without output and consumes nothing in channel mode', async () => {
    await append('s1', 'for the channel');
    const result = await listen(['--session', 's1'], { INTERLINK_CHANNELS: '1' }).done;
    expect(result).toEqual({ code: 0, signal: null, stdout: '', stderr: '' });
    await expect(readFile(inboxPaths(state, 's1').cursor)).rejects.toThrow(/ENOENT/);
  });

  it('takes the session from the Stop payload on stdin', async () => {
    await append('abc', 'for abc');
    const payload = JSON.stringify({ session_id: 'abc', hook_event_name: 'Stop', stop_hook_active: false, last_assistant_message: 'done' });
    const result = await listen([], {}, payload).done;
    expect(result).toEqual({ code: 2, signal: null, stdout: 'INTERLINK_NOTICES\n', stderr: shown('for abc') });
  });

  it('prefers INTERLINK_SESSION to the Stop payload, and falls back to main without either', async () => {
    await append('pinned', 'for pinned');
    await append('main', 'for main');
    const payload = JSON.stringify({ session_id: 'abc', hook_event_name: 'Stop' });
    expect((await listen([], { INTERLINK_SESSION: 'pinned' }, payload).done).stderr).toBe(shown('for pinned'));
    expect((await listen([], {}, 'not json').done).stderr).toBe(shown('for main'));
  });

  it('exits 0 with a logged error, never 2, when the state dir is unusable', async () => {
    await writeFile(state, 'a file, not a directory');
    const result = await listen(['--session', 's1']).done;
    expect(result.code).toBe(0);
    expect(result.stdout).toBe('');
    const line = JSON.parse(result.stderr.trim()) as { level: string; event: string };
    expect(line).toMatchObject({ level: 'error', event: 'listener_failed' });
  });

  it('exits 0 without output on SIGTERM and releases its lock', async () => {
    const listener = listen(['--session', 's1']);
    const lock = inboxPaths(state, 's1').lock;
    await waitUntil(async () => (await readFile(lock, 'utf8').catch(() => '')).includes(`"pid":${listener.child.pid}`), 'the listener holds its lock');
    listener.child.kill('SIGTERM');
    expect(await listener.done).toEqual({ code: 0, signal: null, stdout: '', stderr: '' });
    await expect(stat(lock)).rejects.toThrow(/ENOENT/);
  });

  it('recovers the lock of a listener killed with SIGKILL and loses no notice', async () => {
    const killed = await waitingListener('s1');
    killed.child.kill('SIGKILL');
    expect((await killed.done).signal).toBe('SIGKILL');
    await append('s1', 'after the kill');
    const result = await listen(['--session', 's1']).done;
    expect(result).toEqual({ code: 2, signal: null, stdout: 'INTERLINK_NOTICES\n', stderr: shown('after the kill') });
  });

  it('shows a notice again when the listener was killed after writing it but before committing its cursor', async () => {
    await append('s1', 'in flight');
    const killed = await listen(['--session', 's1'], { INTERLINK_CRASH_AT: 'listener.after_output' }).done;
    expect(killed.signal).toBe('SIGKILL');
    expect(killed.stderr).toBe(shown('in flight'));
    // Claude may or may not have seen it; the next listener shows it again rather than lose it.
    const next = await listen(['--session', 's1']).done;
    expect(next).toEqual({ code: 2, signal: null, stdout: 'INTERLINK_NOTICES\n', stderr: shown('in flight') });
  });

  it('stops waiting, quietly, once the Claude process it serves is gone (and frees the lock)', async () => {
    // A stand-in for the Claude process.
    const host = spawnNode('-e', ['setInterval(() => {}, 1000)']);
    const listener = listen(['--session', 's1'], { INTERLINK_HOST_PID: String(host.process.pid) });
    const lock = inboxPaths(state, 's1').lock;
    await waitUntil(async () => (await readFile(lock, 'utf8').catch(() => '')).includes(`"pid":${listener.child.pid}`), 'the listener holds its lock');
    await host.kill('SIGKILL');
    expect(await listener.done).toEqual({ code: 0, signal: null, stdout: '', stderr: '' });
    await append('s1', 'for the next session');
    expect((await listen(['--session', 's1']).done).code).toBe(2);
  });

  it('keeps every record of two concurrent writer processes as a complete line', async () => {
    const writers = ['a', 'b'].map((label) => spawnNode(WRITER, [state, 's1', '100', label]));
    for (const writer of writers) expect(await writer.exited, writer.stderr()).toEqual({ code: 0, signal: null });
    const text = await readFile(inboxPaths(state, 's1').file, 'utf8');
    expect(text.endsWith('\n')).toBe(true);
    const ids = text
      .slice(0, -1)
      .split('\n')
      .map((line) => (JSON.parse(line) as InboxRecord).notification_id);
    expect(ids).toHaveLength(200);
    for (const label of ['a', 'b']) {
      expect(ids.filter((id) => id.startsWith(`${label}-`))).toEqual(Array.from({ length: 100 }, (_, i) => `${label}-${i}`));
    }
    const shownIds: string[] = [];
    for (;;) {
      const result = await listen(['--session', 's1', '--renew-after-secs', '1']).done;
      expect(result.code).toBe(2);
      if (result.stderr === RENEWAL_NOTICE + '\n') break;
      shownIds.push(...result.stderr.split('\n\n').map((paragraph) => paragraph.split(' ')[0]!));
    }
    expect(shownIds).toEqual(ids);
  });
});
