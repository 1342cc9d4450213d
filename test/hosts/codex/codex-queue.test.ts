/**
 * The `codex queue` executor (src/hosts/codex/queue.ts) against the stand-in on a PATH of its
 * own (helpers/fake-codex): the argument vector, no shell, three attempts with backoff,
 * timeouts that kill the whole process group and are not retried, the 12 KiB limit, a
 * missing binary and an abort. Short timeouts and backoffs keep it fast; every process
 * the stand-in starts is checked dead or killed afterwards.
 */
import { existsSync, readFileSync } from 'node:fs';
import { chmod, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { captureStderr } from '../../helpers/assert.js';
import { queueNotice, queueOnce, type QueueOptions } from '../../../src/hosts/codex/queue.js';
import { MAX_NOTICE_BYTES } from '../../../src/notices/notice.js';
import { fakeCodex, type FakeCodex, type FakeCodexMode } from '../../helpers/fake-codex.js';
import { tempDir } from '../../helpers/fixtures.js';

const THREAD = '01a227a4-1fcd-7663-ade6-117faef1cb4e';
const NOTICE = '1 unread Interlink message from alice (notification_id n-1). Call receive_messages with notification_id "n-1".';
const TIMEOUT_MS = 1_500;
const BACKOFF_MS = 200;

let root: { path: string; remove: () => Promise<void> };
let fake: FakeCodex;
/** Pids a test saw, killed in afterEach if a failing test left them running. */
let watched: number[];
/** What the executor logged (stderr), kept out of the test output. */
let logged: string[];

beforeEach(async () => {
  root = await tempDir('interlink-codex-queue-');
  fake = await fakeCodex(root.path);
  watched = [];
  logged = captureStderr();
});

afterEach(async () => {
  vi.restoreAllMocks();
  for (const pid of [...watched, ...fake.calls().map((c) => c.pid)]) {
    if (!isGone(pid) && commandLine(pid).match(/fake-codex|setInterval|sleep/)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone meanwhile
      }
    }
  }
  await root.remove();
});

function envFor(mode: FakeCodexMode, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return { ...process.env, ...fake.env(mode), ...extra };
}

function options(mode: FakeCodexMode, overrides: Partial<QueueOptions> = {}): QueueOptions {
  return { bin: fake.bin, thread: THREAD, message: NOTICE, env: envFor(mode), timeoutMs: TIMEOUT_MS, backoffMs: BACKOFF_MS, ...overrides };
}

function commandLine(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\u0000', ' ');
  } catch {
    return '';
  }
}

/** True once `pid` no longer runs: no such process, or a zombie waiting for its reaper. */
function isGone(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ESRCH';
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return true;
  }
}

/** Polls `check` until it holds; fails with `what` after the deadline. */
async function waitFor(what: string, check: () => boolean, deadlineMs = 10_000): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** A stand-in written as a shell script, for behaviours the Node stand-in lacks. */
async function scriptBin(name: string, lines: string[]): Promise<string> {
  const path = join(root.path, name);
  await writeFile(path, ['#!/bin/sh', ...lines].join('\n') + '\n');
  await chmod(path, 0o755);
  return path;
}

describe('codex queue: success', () => {
  it('queues in one attempt with exactly queue --thread <uuid> --message <notice>', async () => {
    const report = await queueNotice(options('ok'));
    expect(report).toMatchObject({ action: 'finish', outcome: 'host_queued', save: false, attempts: 1 });
    expect(report.reason).toBe(`Queued message 01a227a4-0000-7000-8000-000000000000 for thread ${THREAD}.`);
    const calls = fake.calls();
    expect(calls).toHaveLength(1);
    expect(calls[0]!.argv).toEqual(['queue', '--thread', THREAD, '--message', NOTICE]);
  });

  it('finds `codex` on the PATH of the environment it is given', async () => {
    const report = await queueNotice(options('ok', { bin: 'codex' }));
    expect(report).toMatchObject({ outcome: 'host_queued', attempts: 1 });
    expect(fake.calls()).toHaveLength(1);
  });

  it('passes shell metacharacters, quotes, newlines and substitutions through byte for byte, with no shell', async () => {
    const pwned = join(root.path, 'pwned');
    const message = [
      `it's "quoted" and 'single' \\ back\\slash`,
      `$(touch ${pwned}) \`touch ${pwned}-tick\` \${HOME} $HOME`,
      `; touch ${pwned}-semi && touch ${pwned}-and || true | cat > ${pwned}-redirect &`,
      `glob * ? [a] ~ # comment\ttab\r\n -- --message --help`,
      `unicode: ünïcødé 🚀 \u202e`,
      '',
    ].join('\n');
    const report = await queueNotice(options('ok', { message }));
    expect(report.outcome).toBe('host_queued');
    const argv = fake.calls()[0]!.argv;
    expect(argv).toEqual(['queue', '--thread', THREAD, '--message', message]);
    expect(Buffer.from(argv[4]!, 'utf8').equals(Buffer.from(message, 'utf8'))).toBe(true);
    for (const suffix of ['', '-tick', '-semi', '-and', '-redirect']) expect(existsSync(pwned + suffix), `${pwned}${suffix}`).toBe(false);
  });

  it('delivers a notice of exactly 12 KiB', async () => {
    const message = 'x'.repeat(MAX_NOTICE_BYTES);
    const report = await queueNotice(options('ok', { message }));
    expect(report.outcome).toBe('host_queued');
    expect(fake.calls()[0]!.argv[4]).toBe(message);
  });
});

describe('codex queue: failures and retries', () => {
  it('tries a failing codex exactly three times, backing off between attempts, and saves the failure', async () => {
    const report = await queueNotice(options('fail'));
    expect(report).toMatchObject({ action: 'finish', outcome: 'delivery_failed', save: true, attempts: 3 });
    expect(report.reason).toContain(`Error: No active session found matching ${THREAD}`);
    expect(report.reason).toContain('exit 1');
    const calls = fake.calls();
    expect(calls).toHaveLength(3);
    for (const call of calls) expect(call.argv).toEqual(['queue', '--thread', THREAD, '--message', NOTICE]);
    for (let i = 1; i < calls.length; i++) expect(calls[i]!.t - calls[i - 1]!.t).toBeGreaterThanOrEqual(BACKOFF_MS);
    expect(logged.filter((line) => line.includes('codex_queue_retry'))).toHaveLength(2);
  });

  it('stops retrying as soon as codex takes the notice (fail-2: third attempt queues)', async () => {
    const report = await queueNotice(options('fail-2'));
    expect(report).toMatchObject({ outcome: 'host_queued', save: false, attempts: 3 });
    expect(report.reason).toContain('Queued message');
    expect(fake.calls()).toHaveLength(3);
  });

  it('needs only two attempts when only the first fails (fail-1)', async () => {
    const report = await queueNotice(options('fail-1'));
    expect(report).toMatchObject({ outcome: 'host_queued', attempts: 2 });
    expect(fake.calls()).toHaveLength(2);
  });

  it('reports the last line codex printed, skipping its PATH warning', async () => {
    const bin = await scriptBin('codex-warns', ['echo "Error: the real cause" >&2', 'echo "WARNING: proceeding, even though we could not update PATH" >&2', 'exit 7']);
    expect(await queueOnce(options('ok', { bin }))).toEqual({ kind: 'exit', code: 7, signal: null, detail: 'Error: the real cause' });
  });

  it('reports a codex killed by a signal as an exit by that signal', async () => {
    const bin = await scriptBin('codex-dies', ['kill -9 $$']);
    expect(await queueOnce(options('ok', { bin }))).toEqual({ kind: 'exit', code: null, signal: 'SIGKILL', detail: '' });
  });
});

describe('codex queue: timeouts', () => {
  it('gives a hanging codex one attempt, reports delivery_unknown, and kills it', async () => {
    const started = Date.now();
    const report = await queueNotice(options('hang'));
    const elapsed = Date.now() - started;
    expect(report).toMatchObject({ action: 'finish', outcome: 'delivery_unknown', save: true, attempts: 1 });
    expect(report.reason).toMatch(/twice/);
    expect(elapsed).toBeGreaterThanOrEqual(TIMEOUT_MS - 20);
    expect(elapsed).toBeLessThan(20_000);
    const calls = fake.calls();
    expect(calls).toHaveLength(1);
    // The executor reaped its child before returning.
    expect(isGone(calls[0]!.pid)).toBe(true);
  });

  it('kills the whole process group at the timeout, grandchild included', async () => {
    const pidFile = join(root.path, 'grandchild.pid');
    const report = await queueNotice(options('hang-child', { env: envFor('hang-child', { FAKE_CODEX_CHILD_PID_FILE: pidFile }) }));
    expect(report).toMatchObject({ outcome: 'delivery_unknown', attempts: 1 });
    const grandchild = Number((await readFile(pidFile, 'utf8')).trim());
    expect(grandchild).toBeGreaterThan(0);
    watched.push(grandchild);
    expect(isGone(fake.calls()[0]!.pid)).toBe(true);
    // Not our child: it is reaped by init once killed, so wait for that.
    await waitFor(`grandchild ${grandchild} to die`, () => isGone(grandchild), 5_000);
  });

  it('reports the exit code of a codex that exited but left something holding its output open', async () => {
    const pidFile = join(root.path, 'holder.pid');
    const bin = await scriptBin('codex-lingers', ['sleep 30 &', `echo $! > ${JSON.stringify(pidFile)}`, 'echo "Queued message m-9 for thread $3."', 'exit 0']);
    const started = Date.now();
    const report = await queueNotice(options('ok', { bin }));
    // Bounded by the timeout, which kills the holder, not by the holder's 30 s.
    expect(Date.now() - started).toBeLessThan(15_000);
    const holder = Number((await readFile(pidFile, 'utf8')).trim());
    watched.push(holder);
    expect(report).toMatchObject({ outcome: 'host_queued', attempts: 1, reason: `Queued message m-9 for thread ${THREAD}.` });
    await waitFor(`output holder ${holder} to die`, () => isGone(holder), 5_000);
  });
});

describe('codex queue: refusals before starting codex', () => {
  it('refuses a notice over 12 KiB without starting a process', async () => {
    const message = 'x'.repeat(MAX_NOTICE_BYTES + 1);
    expect(await queueOnce(options('ok', { message }))).toEqual({ kind: 'too_large', bytes: MAX_NOTICE_BYTES + 1 });
    const report = await queueNotice(options('ok', { message }));
    expect(report).toMatchObject({ outcome: 'delivery_failed', save: true, attempts: 1 });
    expect(report.reason).toContain(`${MAX_NOTICE_BYTES + 1} bytes`);
    expect(fake.calls()).toEqual([]);
  });

  it('counts the limit in UTF-8 bytes, not characters', async () => {
    const message = 'é'.repeat(MAX_NOTICE_BYTES / 2 + 1);
    expect(message.length).toBeLessThan(MAX_NOTICE_BYTES);
    expect(await queueOnce(options('ok', { message }))).toEqual({ kind: 'too_large', bytes: MAX_NOTICE_BYTES + 2 });
    expect(fake.calls()).toEqual([]);
  });

  it('reports a missing codex binary as unstartable after one attempt', async () => {
    const bin = join(root.path, 'no-such-dir', 'codex');
    const once = await queueOnce(options('ok', { bin }));
    expect(once).toMatchObject({ kind: 'unstartable', detail: expect.stringContaining('ENOENT') });
    const report = await queueNotice(options('ok', { bin }));
    expect(report).toMatchObject({ outcome: 'delivery_failed', save: true, attempts: 1 });
    expect(report.reason).toMatch(/^cannot run codex: .*ENOENT/);
  });

  it('reports a codex that is not executable as unstartable', async () => {
    const bin = join(root.path, 'not-executable');
    await writeFile(bin, '#!/bin/sh\nexit 0\n', { mode: 0o644 });
    expect(await queueOnce(options('ok', { bin }))).toMatchObject({ kind: 'unstartable', detail: expect.stringContaining('EACCES') });
  });

  it('reports a notice that cannot be an argument (a NUL byte) as unstartable instead of throwing', async () => {
    const message = 'before\u0000after';
    await expect(queueOnce(options('ok', { message }))).resolves.toMatchObject({ kind: 'unstartable' });
    const report = await queueNotice(options('ok', { message }));
    expect(report).toMatchObject({ outcome: 'delivery_failed', save: true, attempts: 1 });
    expect(fake.calls()).toEqual([]);
  });
});

describe('codex queue: abort', () => {
  it('kills a hanging attempt at once when aborted, and does not retry', async () => {
    const stop = new AbortController();
    const running = queueNotice(options('hang', { timeoutMs: 30_000, signal: stop.signal }));
    await waitFor('the stand-in to start', () => fake.calls().length === 1);
    const abortedAt = Date.now();
    stop.abort();
    const report = await running;
    expect(Date.now() - abortedAt).toBeLessThan(5_000);
    // Codex may have queued it before it died: the outcome is unknown, and the reason says why.
    expect(report).toMatchObject({ outcome: 'delivery_unknown', save: true, attempts: 1 });
    expect(report.reason).toMatch(/server stopped while codex queue was running/);
    expect(fake.calls()).toHaveLength(1);
    expect(isGone(fake.calls()[0]!.pid)).toBe(true);
  });

  it('kills the grandchild too when aborted', async () => {
    const pidFile = join(root.path, 'grandchild.pid');
    const stop = new AbortController();
    const running = queueNotice(options('hang-child', { timeoutMs: 30_000, signal: stop.signal, env: envFor('hang-child', { FAKE_CODEX_CHILD_PID_FILE: pidFile }) }));
    await waitFor('the grandchild to start', () => existsSync(pidFile) && readFileSync(pidFile, 'utf8').endsWith('\n'));
    const grandchild = Number(readFileSync(pidFile, 'utf8').trim());
    watched.push(grandchild);
    stop.abort();
    await running;
    await waitFor(`grandchild ${grandchild} to die`, () => isGone(grandchild), 5_000);
  });

  it('skips the remaining attempts when aborted during the backoff', async () => {
    const stop = new AbortController();
    const running = queueNotice(options('fail', { backoffMs: 30_000, signal: stop.signal }));
    await waitFor('the first retry to be scheduled', () => logged.some((line) => line.includes('codex_queue_retry')));
    const abortedAt = Date.now();
    stop.abort();
    const report = await running;
    expect(Date.now() - abortedAt).toBeLessThan(5_000);
    expect(report).toMatchObject({ outcome: 'delivery_failed', save: true, attempts: 1, reason: 'the server stopped before the next attempt' });
    expect(fake.calls()).toHaveLength(1);
  });

  it('starts nothing when already aborted', async () => {
    const stop = new AbortController();
    stop.abort();
    const startedAt = Date.now();
    const report = await queueNotice(options('hang', { signal: stop.signal }));
    expect(Date.now() - startedAt).toBeLessThan(TIMEOUT_MS);
    expect(report).toMatchObject({ outcome: 'delivery_failed', save: true, attempts: 0 });
    expect(await queueOnce(options('hang', { signal: stop.signal }))).toMatchObject({ kind: 'unstartable' });
    expect(fake.calls()).toEqual([]);
  });
});
