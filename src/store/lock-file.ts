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
 * This module is the lock file itself: taking, breaking and releasing it. lock.ts
 * orders the callers within one process and keeps a lock between uses.
 */
import { randomBytes } from 'node:crypto';
import { makePrivateDirSync, PRIVATE_DIR, PRIVATE_FILE } from './private.js';
import { closeSync, existsSync, fstatSync, linkSync, lstatSync, mkdirSync, openSync, readFileSync, rmdirSync, statSync, unlinkSync, utimesSync } from 'node:fs';
import { dirname } from 'node:path';
import { z } from 'zod';
import { writeFully } from './atomic.js';
import { SELF, holderIsDead } from './liveness.js';
import { InterlinkError, errnoCode, messageOf } from '../errors.js';
import { parseJsonWith } from '../json.js';
import { log } from '../log.js';

export const DEFAULT_LOCK_TIMEOUT_MS = 10_000;
/** A lock-breaker that has not finished in this long died while breaking. */
const BREAKER_STALE_MS = 10_000;
/**
 * A lock is never empty while its holder lives (it is linked into place whole), so an
 * unreadable one is debris from an older version or damage: broken after a moment.
 */
const UNREADABLE_LOCK_STALE_MS = 2_000;

const holderSchema = z.object({
  host: z.string(),
  boot: z.string(),
  pid: z.number().int().positive(),
  start: z.string(),
  token: z.string().min(1),
});
type Holder = z.infer<typeof holderSchema>;

function parseHolder(text: string): Holder | undefined {
  const parsed = parseJsonWith(holderSchema, text);
  return parsed.ok ? parsed.value : undefined;
}

type LockState = { kind: 'absent' } | { kind: 'held'; holder: Holder } | { kind: 'unreadable'; ageMs: number };

/**
 * What the lock file says now. Synchronous, like the create: a few microseconds of
 * local metadata, cheaper than a trip through the thread pool.
 */
function inspect(lockPath: string): LockState {
  try {
    const holder = parseHolder(readFileSync(lockPath, 'utf8'));
    return holder ? { kind: 'held', holder } : { kind: 'unreadable', ageMs: Date.now() - lastWritten(lockPath) };
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') {
      // A dangling symlink reads as absent yet blocks every create: say so instead of spinning.
      if (lstatSync(lockPath, { throwIfNoEntry: false })?.isSymbolicLink() === true) {
        throw new InterlinkError('storage', `${lockPath} is a symbolic link, not a lock file; remove it`);
      }
      return { kind: 'absent' };
    }
    if (errnoCode(err) === 'EISDIR') throw new InterlinkError('storage', `${lockPath} is a directory, not a lock file; nothing can use ${lockPath.replace(/\.lock$/, '')} until it is removed`);
    throw err;
  }
}

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

/** The lock file's exact text for `holder`: written on create, compared on release. */
function holderText(holder: Holder): string {
  return JSON.stringify(holder);
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

/**
 * Runs `remove` holding `<lock>.break`, the one directory under which a lock file is
 * ever removed; `remove` reads the lock again and unlinks it only if it is still the
 * one it means. Returns 'busy' at once if another process holds the breaker (one left
 * by a process that died while holding it is cleared once it is BREAKER_STALE_MS old).
 */
function underBreaker(lockPath: string, remove: () => boolean): boolean | 'busy' {
  const breaker = `${lockPath}.break`;
  try {
    mkdirSync(breaker, PRIVATE_DIR);
  } catch (err) {
    if (errnoCode(err) !== 'EEXIST') throw err;
    try {
      if (Date.now() - statSync(breaker).mtimeMs > BREAKER_STALE_MS) rmdirSync(breaker);
    } catch {
      // Gone or replaced meanwhile: the caller looks again.
    }
    return 'busy';
  }
  try {
    return remove();
  } finally {
    try {
      rmdirSync(breaker);
    } catch {
      // Already cleared as stale by another process.
    }
  }
}

/** Unlinks the lock file if `owns` says the state it is in now is the expected one. */
function removeIf(lockPath: string, owns: (now: LockState) => boolean): boolean {
  const now = inspect(lockPath);
  if (now.kind === 'absent') return true;
  if (!owns(now)) return false;
  try {
    unlinkSync(lockPath);
  } catch (err) {
    // Removed by hand meanwhile, which is what we wanted.
    if (errnoCode(err) !== 'ENOENT') throw err;
  }
  return true;
}

/**
 * Removes a dead holder's lock (`deadToken`; undefined for an unreadable lock). Two
 * waiters may judge the same lock dead at once; only one removes it, and only if it is
 * still the dead holder's, never a lock taken since. False: it is another's, or another
 * process is breaking it.
 */
function breakDeadLock(lockPath: string, deadToken: string | undefined): boolean {
  try {
    const outcome = underBreaker(lockPath, () =>
      removeIf(lockPath, (now) => (now.kind === 'held' ? now.holder.token === deadToken : deadToken === undefined)),
    );
    return outcome === true;
  } catch {
    return false;
  }
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

/**
 * A waiter marks a live holder's lock as wanted by setting its mtime to this instant
 * (one second after the epoch), which no lock written since has: the holder of a kept
 * lock sees it with the one stat it takes before each reuse, and lets go. A holder that
 * keeps nothing never looks; the mark changes nothing else (only an unreadable lock is
 * judged by its age, and only a readable one is marked).
 */
const WANTED_MTIME_S = 1;

/**
 * When the lock file was last written: its mtime, unless a waiter's mark replaced that
 * (a mark that landed on a lock just created in place, on a filesystem without links, in
 * the moment before its holder is written); then its ctime, which the mark set to now.
 */
function lastWritten(lockPath: string): number {
  const info = statSync(lockPath);
  return info.mtimeMs <= WANTED_MTIME_S * 1000 ? info.ctimeMs : info.mtimeMs;
}

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
