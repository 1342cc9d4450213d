/**
 * Removing a sidecar lock file, whether a waiter breaks a dead holder's or a holder
 * releases its own while a breaker is at work: only under `<file>.lock.break`, and only
 * while the file still carries the token the remover expects, so nobody ever removes a
 * lock that another process took since (DESIGN.md, "Locks").
 */
import { mkdirSync, rmdirSync, statSync, unlinkSync } from 'node:fs';
import { errnoCode } from '../errors.js';
import { inspect, type LockState } from './lock-holder.js';
import { PRIVATE_DIR } from './private.js';

/** A lock-breaker that has not finished in this long died while breaking. */
export const BREAKER_STALE_MS = 10_000;

/**
 * Runs `remove` holding `<lock>.break`, the one directory under which a lock file is
 * ever removed; `remove` reads the lock again and unlinks it only if it is still the
 * one it means. Returns 'busy' at once if another process holds the breaker (one left
 * by a process that died while holding it is cleared once it is BREAKER_STALE_MS old).
 */
export function underBreaker(lockPath: string, remove: () => boolean): boolean | 'busy' {
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
export function removeIf(lockPath: string, owns: (now: LockState) => boolean): boolean {
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
export function breakDeadLock(lockPath: string, deadToken: string | undefined): boolean {
  try {
    const outcome = underBreaker(lockPath, () =>
      removeIf(lockPath, (now) => (now.kind === 'held' ? now.holder.token === deadToken : deadToken === undefined)),
    );
    return outcome === true;
  } catch {
    return false;
  }
}
