/**
 * Sidecar locks: `<file>.lock` is held while a process reads-modifies-writes `<file>`.
 *
 * A lock file is created exclusively (O_EXCL) and names its holder — host, boot id, pid
 * and the pid's start time where the OS gives them (liveness.ts) — and a random owner
 * token. A waiter that finds a lock whose holder is surely dead on this host removes it
 * at once, so a kill -9 never wedges a mailbox. A live holder is waited on until the
 * deadline, and then the caller gets a clear `busy` error naming the lock. Removing a
 * lock, whether a holder releases its own or a waiter breaks a dead one, happens under
 * `<file>.lock.break` and only while the file still carries the expected token: nobody
 * ever removes a lock that another process took since.
 *
 * Not proper-lockfile: it judges staleness by the age of an mtime that the holder keeps
 * refreshing, so a crashed holder blocks others for the stale period (>= 2 s) and a
 * stalled live holder can have its lock taken. Here liveness is asked of the OS instead.
 *
 * This module is the lock file itself: taking and releasing it, and the mark by which a
 * waiter asks the holder of a kept lock to let go. What the file holds, and reading it
 * back, is lock-holder.ts; removing one under the breaker is lock-breaker.ts. lock.ts
 * orders the callers within one process and keeps a lock between uses.
 */
import { randomBytes } from 'node:crypto';
import { makePrivateDirSync, PRIVATE_FILE } from './private.js';
import { closeSync, existsSync, fstatSync, linkSync, openSync, readFileSync, statSync, unlinkSync, utimesSync } from 'node:fs';
import { dirname } from 'node:path';
import { writeFully } from './atomic.js';
import { BREAKER_STALE_MS, breakDeadLock, removeIf, underBreaker } from './lock-breaker.js';
import { WANTED_MTIME_S, holderText, inspect, type Holder } from './lock-holder.js';
import { SELF, holderIsDead } from './liveness.js';
import { InterlinkError, errnoCode, messageOf } from '../errors.js';
import { log } from '../log.js';

export const DEFAULT_LOCK_TIMEOUT_MS = 10_000;
/**
 * A lock is never empty while its holder lives (it is linked into place whole), so an
 * unreadable one is debris from an older version or damage: broken after a moment.
 */
const UNREADABLE_LOCK_STALE_MS = 2_000;

/**
 * Writes the holder to a private temp file and links it into place: link(2) fails if the
 * lock exists, and the lock appears with its holder already in it, so no waiter ever
 * sees an empty lock and no creator that dies leaves one. These are local metadata calls
 * of a few microseconds, done synchronously: a commit takes the lock every time, and a
 * trip through the thread pool for each call would cost more than the call.
 */
function writeHolderFile(lockPath: string, holder: Holder): string {
  const temp = `${lockPath}.${process.pid}.${uniqueSuffix()}.tmp`;
  let fd: number;
  try {
    fd = openSync(temp, 'wx', PRIVATE_FILE);
  } catch (err) {
    if (errnoCode(err) !== 'ENOENT') throw err;
    makePrivateDirSync(dirname(lockPath));
    fd = openSync(temp, 'wx', PRIVATE_FILE);
  }
  try {
    writeFully(fd, Buffer.from(holderText(holder)));
  } finally {
    closeSync(fd);
  }
  return temp;
}

/**
 * Unique among every lock this process takes, and (by the random part, drawn once) among
 * every process: a counter costs nothing per commit, where drawing random bytes for each
 * token and temp name was a visible share of a commit.
 */
const PROCESS_SALT = randomBytes(8).toString('hex');
let taken = 0;
function uniqueSuffix(): string {
  return `${PROCESS_SALT}-${(taken++).toString(36)}`;
}

function tryCreate(lockPath: string, holder: Holder): boolean {
  const temp = writeHolderFile(lockPath, holder);
  try {
    linkSync(temp, lockPath);
    return true;
  } catch (err) {
    if (errnoCode(err) === 'EEXIST') return false;
    if (!NO_LINKS.has(errnoCode(err) ?? '')) throw err;
  } finally {
    unlinkSync(temp);
  }
  return createInPlace(lockPath, holder);
}

/** Filesystems without hard links: create with O_EXCL, then write (a brief window without a holder). */
const NO_LINKS = new Set(['EPERM', 'ENOTSUP', 'EOPNOTSUPP', 'ENOSYS', 'EXDEV']);

function createInPlace(lockPath: string, holder: Holder): boolean {
  let fd: number;
  try {
    fd = openSync(lockPath, 'wx', PRIVATE_FILE);
  } catch (err) {
    if (errnoCode(err) === 'EEXIST') return false;
    throw err;
  }
  try {
    writeFully(fd, Buffer.from(holderText(holder)));
  } finally {
    closeSync(fd);
  }
  return true;
}

/** A randomised pause between looks at a contended lock, growing from 1 ms to 20 ms. */
function backoff(): () => Promise<void> {
  let ms = 1;
  return async () => {
    await new Promise((resolve) => setTimeout(resolve, ms * (0.5 + Math.random())));
    ms = Math.min(ms * 1.5, 20);
  };
}

/** However the lock changes hands, a waiter gives up after this many times its timeout. */
const QUEUE_WAIT_FACTOR = 6;

/**
 * Takes the lock, or throws `busy` once one holder has kept it for `timeoutMs` while we
 * waited. The clock restarts whenever the lock changes hands: a queue of short holders
 * (24 processes editing one file at once on a busy machine) is progress, not an error.
 * Still, no wait is unbounded: past QUEUE_WAIT_FACTOR × `timeoutMs` in all, it is `busy`.
 */
export async function acquire(lockPath: string, timeoutMs: number): Promise<string> {
  const holder: Holder = { ...SELF, token: uniqueSuffix() };
  const giveUpAt = Date.now() + QUEUE_WAIT_FACTOR * timeoutMs;
  let waitingOn: string | undefined;
  let deadline = 0;
  const pause = backoff();
  for (;;) {
    if (tryCreate(lockPath, holder)) return holder.token;
    const state = inspect(lockPath);
    if (state.kind === 'absent') continue;
    const dead = (state.kind === 'held' && holderIsDead(state.holder)) || (state.kind === 'unreadable' && state.ageMs > UNREADABLE_LOCK_STALE_MS);
    // A removed dead lock is retried at once; one another waiter is breaking, or that
    // cannot be removed, is waited on like a live one.
    if (dead && breakDeadLock(lockPath, state.kind === 'held' ? state.holder.token : undefined)) continue;
    // A live holder that keeps its lock between uses lets go when it sees this (lock.ts).
    if (state.kind === 'held' && !dead) signalWanted(lockPath);
    const current = state.kind === 'held' ? state.holder.token : '';
    if (current !== waitingOn) {
      waitingOn = current;
      deadline = Date.now() + timeoutMs;
    }
    if (Date.now() >= Math.min(deadline, giveUpAt)) {
      const who = state.kind === 'held' ? `process ${state.holder.pid} on ${state.holder.host}` : 'an unknown process';
      const waited = Date.now() >= giveUpAt ? `${QUEUE_WAIT_FACTOR * timeoutMs} ms behind other holders` : `${timeoutMs} ms`;
      throw new InterlinkError('busy', `${lockPath} is held by ${who}; gave up after ${waited} (if that process is gone, remove the lock file)`, {
        lock: lockPath,
      });
    }
    await pause();
  }
}

/** Marks a live holder's lock as wanted (WANTED_MTIME_S, lock-holder.ts): a holder that keeps it lets go. */
function signalWanted(lockPath: string): void {
  try {
    utimesSync(lockPath, WANTED_MTIME_S, WANTED_MTIME_S);
  } catch {
    // Released or removed meanwhile: the next look finds that.
  }
}

/**
 * What a holder of a kept lock needs to know before using it again, from one stat:
 * whether the file is still the one it created (same inode) and whether another process
 * waits for it. `lost` covers a lock removed (by hand) or replaced since.
 */
export function keptLockState(lockPath: string, ino: number): 'ours' | 'wanted' | 'lost' {
  const info = statSync(lockPath, { throwIfNoEntry: false });
  if (info === undefined || info.ino !== ino) return 'lost';
  return info.mtimeMs <= WANTED_MTIME_S * 1000 ? 'wanted' : 'ours';
}

/**
 * Opens a lock just taken, to keep it: the open descriptor keeps its inode alive, so no
 * file that replaces it can have the same inode number while it is kept, and
 * keptLockState's comparison cannot be fooled.
 */
export function openKeptLock(lockPath: string): { fd: number; ino: number } {
  const fd = openSync(lockPath, 'r');
  try {
    return { fd, ino: fstatSync(fd).ino };
  } catch (err) {
    closeSync(fd);
    throw err;
  }
}

/**
 * Release at process exit, where nothing asynchronous runs: the common case only (the
 * lock still names us, no breaker at work). Anything else is left, and as the lock
 * names this process, the next taker breaks it once the process is gone.
 */
export function releaseLockSync(lockPath: string, token: string): void {
  try {
    if (readFileSync(lockPath, 'utf8') === holderText({ ...SELF, token }) && !existsSync(`${lockPath}.break`)) unlinkSync(lockPath);
  } catch {
    // Gone already, or unreadable: nothing of ours to remove.
  }
}

/**
 * Removes the lock if it still carries `token`. One that is no longer ours (removed by
 * hand and taken by another process) is left to its owner. The breaker is only held for
 * microseconds, or is debris cleared after BREAKER_STALE_MS, so this waits for it; should
 * that fail, the lock stays and, as it names this process, is broken once it has exited.
 */
export async function releaseLock(lockPath: string, token: string): Promise<void> {
  // The common case, without the breaker (a directory made and removed per commit cost
  // half a millisecond here): the lock still names us, so we remove it. Nobody breaks a
  // live holder's lock on one host, so between this read and the unlink no other lock
  // can take its place unless a person removed ours by hand in those microseconds.
  try {
    // Byte for byte what we wrote: no parse needed to know it is still ours.
    if (readFileSync(lockPath, 'utf8') === holderText({ ...SELF, token }) && !existsSync(`${lockPath}.break`)) {
      unlinkSync(lockPath);
      return;
    }
  } catch (err) {
    // Gone already (removed by hand, or its whole directory): nothing left to release.
    if (errnoCode(err) === 'ENOENT') return;
    log.warn('lock_release_failed', { lock: lockPath, message: messageOf(err) });
  }
  await releaseUnderBreaker(lockPath, token);
}

/** Release when a breaker is at work or the lock no longer looks like ours: serialized with breaking. */
async function releaseUnderBreaker(lockPath: string, token: string): Promise<void> {
  const deadline = Date.now() + 2 * BREAKER_STALE_MS;
  const pause = backoff();
  for (;;) {
    try {
      const outcome = underBreaker(lockPath, () => removeIf(lockPath, (now) => now.kind === 'held' && now.holder.token === token));
      // Someone removed this lock while it was held, so another process may have run
      // its critical section alongside ours: worth a line in the log.
      if (outcome === false) log.warn('lock_lost', { lock: lockPath, message: `${lockPath} was taken over by another process while this one held it` });
      if (outcome !== 'busy') return;
    } catch (err) {
      log.warn('lock_release_failed', { lock: lockPath, message: messageOf(err) });
      return;
    }
    if (Date.now() >= deadline) {
      log.warn('lock_release_failed', { lock: lockPath, message: `${lockPath}.break stayed in place` });
      return;
    }
    await pause();
  }
}
