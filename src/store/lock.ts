/**
 * Sidecar locks: `<file>.lock` is held while a process reads-modifies-writes `<file>`.
 *
 * A lock file is created exclusively (O_EXCL) and names its holder: host, boot id, pid
 * and the pid's start time. A waiter that finds a lock whose holder is dead on this host — the pid is gone,
 * was reused by a newer process, or the machine rebooted since — removes it at once, so
 * a kill -9 never wedges a mailbox. A live holder is waited on until the deadline, and
 * then the caller gets a clear `busy` error naming the lock.
 *
 * Not proper-lockfile: it judges staleness by the age of an mtime that the holder keeps
 * refreshing, so a crashed holder blocks others for the stale period (>= 2 s) and a
 * stalled live holder can have its lock taken. Here liveness is asked of the OS instead.
 *
 * Within one process, a promise queue per lock path orders the callers, so the file
 * lock is only contended between processes.
 */
import { randomBytes } from 'node:crypto';
import { closeSync, mkdirSync, openSync, readFileSync, unlinkSync } from 'node:fs';
import { writeFully } from './atomic.js';
import { mkdir, readFile, rmdir, stat, unlink } from 'node:fs/promises';
import { hostname } from 'node:os';
import { dirname } from 'node:path';
import { InterlinkError, errnoCode } from '../errors.js';

export const DEFAULT_LOCK_TIMEOUT_MS = 10_000;
/** A lock-breaker that has not finished in this long died while breaking. */
const BREAKER_STALE_MS = 10_000;
/** A lock file that cannot be parsed this long after it was written is debris. */
const UNREADABLE_LOCK_STALE_MS = 10_000;

interface Holder {
  host: string;
  boot: string;
  pid: number;
  start: string;
  token: string;
}

function readBootId(): string {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return '';
  }
}

/** Start time of a process in clock ticks since boot (Linux), or '' where unknown. */
function processStartTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Field 22, counted after the parenthesised command name, which may contain spaces.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[19] ?? '';
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return undefined;
    return '';
  }
}

const HOST = hostname();
const BOOT = readBootId();
const SELF_START = processStartTime(process.pid) ?? '';

function parseHolder(text: string): Holder | undefined {
  try {
    const value: unknown = JSON.parse(text);
    if (typeof value !== 'object' || value === null) return undefined;
    const v = value as Record<string, unknown>;
    if (typeof v.host === 'string' && typeof v.boot === 'string' && typeof v.pid === 'number' && typeof v.start === 'string' && typeof v.token === 'string') {
      return { host: v.host, boot: v.boot, pid: v.pid, start: v.start, token: v.token };
    }
  } catch {
    // fall through
  }
  return undefined;
}

function pidIsAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return errnoCode(err) === 'EPERM';
  }
}

/** True only when we can be sure the holder no longer runs. */
export function holderIsDead(holder: Holder): boolean {
  if (holder.host !== HOST) return false;
  if (BOOT !== '' && holder.boot !== '' && holder.boot !== BOOT) return true;
  if (!pidIsAlive(holder.pid)) return true;
  const start = processStartTime(holder.pid);
  if (start === undefined) return true;
  return holder.start !== '' && start !== '' && start !== holder.start;
}

type LockState = { kind: 'absent' } | { kind: 'held'; holder: Holder } | { kind: 'unreadable'; ageMs: number };

async function inspect(lockPath: string): Promise<LockState> {
  try {
    const [text, info] = await Promise.all([readFile(lockPath, 'utf8'), stat(lockPath)]);
    const holder = parseHolder(text);
    return holder ? { kind: 'held', holder } : { kind: 'unreadable', ageMs: Date.now() - info.mtimeMs };
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return { kind: 'absent' };
    throw err;
  }
}

/**
 * Creates the lock file with O_EXCL and writes the holder into it. These are local
 * metadata calls of a few microseconds, done synchronously: a commit takes the lock
 * every time, and a trip through the thread pool for each call would cost more than the
 * call. A waiter that reads the file between its creation and the write sees no holder
 * and waits; a creator that died in between leaves an unreadable lock that is broken
 * once it is older than UNREADABLE_LOCK_STALE_MS.
 */
function openExclusive(lockPath: string): number {
  try {
    return openSync(lockPath, 'wx');
  } catch (err) {
    if (errnoCode(err) !== 'ENOENT') throw err;
    mkdirSync(dirname(lockPath), { recursive: true });
    return openSync(lockPath, 'wx');
  }
}

function tryCreate(lockPath: string, holder: Holder): boolean {
  let fd: number;
  try {
    fd = openExclusive(lockPath);
  } catch (err) {
    if (errnoCode(err) === 'EEXIST') return false;
    throw err;
  }
  try {
    writeFully(fd, Buffer.from(JSON.stringify(holder)));
  } finally {
    closeSync(fd);
  }
  return true;
}

/**
 * Removes a dead holder's lock. Two waiters may judge the same lock dead at once; the
 * breaker directory makes sure only one of them removes it, and only if it is still
 * the dead holder's (its token is unchanged), never a lock taken since.
 */
async function breakDeadLock(lockPath: string, deadToken: string | undefined): Promise<boolean> {
  const breaker = `${lockPath}.break`;
  try {
    await mkdir(breaker);
  } catch (err) {
    if (errnoCode(err) !== 'EEXIST') throw err;
    const info = await stat(breaker).catch(() => undefined);
    if (info && Date.now() - info.mtimeMs > BREAKER_STALE_MS) await rmdir(breaker).catch(() => undefined);
    return false;
  }
  try {
    const now = await inspect(lockPath);
    const stillDead =
      (now.kind === 'held' && now.holder.token === deadToken) || (now.kind === 'unreadable' && deadToken === undefined);
    if (!stillDead) return now.kind === 'absent';
    await unlink(lockPath);
    return true;
  } catch {
    return false;
  } finally {
    await rmdir(breaker).catch(() => undefined);
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function acquire(lockPath: string, timeoutMs: number): Promise<string> {
  const holder: Holder = { host: HOST, boot: BOOT, pid: process.pid, start: SELF_START, token: randomBytes(8).toString('hex') };
  const deadline = Date.now() + timeoutMs;
  let backoff = 1;
  for (;;) {
    if (tryCreate(lockPath, holder)) return holder.token;
    const state = await inspect(lockPath);
    if (state.kind === 'absent') continue;
    const dead = (state.kind === 'held' && holderIsDead(state.holder)) || (state.kind === 'unreadable' && state.ageMs > UNREADABLE_LOCK_STALE_MS);
    // A removed dead lock is retried at once; one another waiter is breaking, or that
    // cannot be removed, is waited on like a live one, within the same deadline.
    if (dead && (await breakDeadLock(lockPath, state.kind === 'held' ? state.holder.token : undefined))) continue;
    if (Date.now() >= deadline) {
      const who = state.kind === 'held' ? `process ${state.holder.pid} on ${state.holder.host}` : 'an unknown process';
      throw new InterlinkError('busy', `${lockPath} is held by ${who}; gave up after ${timeoutMs} ms (if that process is gone, remove the lock file)`, {
        lock: lockPath,
      });
    }
    await delay(backoff * (0.5 + Math.random()));
    backoff = Math.min(backoff * 1.5, 20);
  }
}

function releaseLock(lockPath: string): void {
  try {
    unlinkSync(lockPath);
  } catch {
    // Already gone: nothing to release.
  }
}

const queues = new Map<string, Promise<unknown>>();

/** Runs `fn` while holding the sidecar lock of `file` (`<file>.lock`, unless `lockPath` names another). */
export async function withFileLock<T>(file: string, fn: () => Promise<T>, options: { timeoutMs?: number; lockPath?: string } = {}): Promise<T> {
  const lockPath = options.lockPath ?? `${file}.lock`;
  const previous = queues.get(lockPath) ?? Promise.resolve();
  const run = previous.catch(() => undefined).then(async () => {
    await acquire(lockPath, options.timeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS);
    try {
      return await fn();
    } finally {
      releaseLock(lockPath);
    }
  });
  queues.set(lockPath, run);
  try {
    return await run;
  } finally {
    if (queues.get(lockPath) === run) queues.delete(lockPath);
  }
}

/**
 * Takes `<file>.lock` and keeps it until the returned release is called (or the process
 * dies, after which the next taker recovers it). For locks held for a process's
 * lifetime, such as the notifier's; short critical sections use withFileLock.
 * Throws `busy` if a live holder keeps it past `timeoutMs` (0: try once).
 */
export async function holdFileLock(file: string, timeoutMs: number): Promise<() => void> {
  const lockPath = `${file}.lock`;
  await acquire(lockPath, timeoutMs);
  let released = false;
  return () => {
    if (released) return;
    released = true;
    releaseLock(lockPath);
  };
}
