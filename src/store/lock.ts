/**
 * Sidecar locks as the stores use them: `<file>.lock` held while a process
 * reads-modifies-writes `<file>` (lock-file.ts takes and releases the file, lock-breaker.ts
 * breaks a dead holder's; DESIGN.md, "Locks").
 *
 * Within one process a promise queue per lock path orders the callers, so the file lock
 * is only contended between processes.
 *
 * A caller may ask to keep the lock between uses (`keepMs`): a process committing often
 * to a file only it writes (a session's mailbox or outbox, under load) then takes the lock
 * once per burst instead of once per commit, which cost about a dozen system calls each.
 * A kept lock is let go
 * - after `keepMs` without a use;
 * - as soon as another process waits for it: waiters mark the lock (lock-file.ts), and
 *   the holder looks, with one stat, before each reuse; it then takes and releases the
 *   lock per use for a while, so the waiter gets its turn;
 * - after MAX_KEEP_MS held in all, even in constant use, for waiters that do not mark;
 * - at process exit. A holder killed meanwhile leaves a lock naming a dead process, which
 *   the next taker breaks at once, as for any holder.
 * So another writer of the file waits at most about `keepMs` longer than it would have.
 */
import { messageOf } from '../errors.js';
import { log } from '../log.js';
import { closeSync } from 'node:fs';
import { acquire, DEFAULT_LOCK_TIMEOUT_MS, keptLockState, openKeptLock, releaseLock, releaseLockSync } from './lock-file.js';

export { DEFAULT_LOCK_TIMEOUT_MS } from './lock-file.js';

/** However busy, a kept lock is let go after this long, so a waiter that does not mark it still gets a turn. */
const MAX_KEEP_MS = 500;
/** After seeing another process wait, this process takes and releases the lock per use for this long. */
const YIELD_MS = 200;

interface Kept {
  token: string;
  /** An open descriptor of the lock file, and its inode (lock-file.ts, openKeptLock). */
  fd: number;
  ino: number;
  since: number;
  timer: NodeJS.Timeout | undefined;
}

const queues = new Map<string, Promise<unknown>>();
const kept = new Map<string, Kept>();
const yieldUntil = new Map<string, number>();

/** Runs `fn` after the callers of `lockPath` queued before it in this process. */
function inTurn<T>(lockPath: string, fn: () => Promise<T>): Promise<T> {
  const previous = queues.get(lockPath) ?? Promise.resolve();
  const run = previous.catch(() => undefined).then(fn);
  queues.set(lockPath, run);
  const forget = () => {
    if (queues.get(lockPath) === run) queues.delete(lockPath);
  };
  run.then(forget, forget);
  return run;
}

/**
 * Runs `fn` while holding the sidecar lock of `file` (`<file>.lock`, unless `lockPath`
 * names another). With `keepMs`, the lock stays held that long after `fn` for the next
 * caller in this process (see above).
 */
export function withFileLock<T>(
  file: string,
  fn: () => Promise<T>,
  options: { timeoutMs?: number; lockPath?: string; keepMs?: number } = {},
): Promise<T> {
  const lockPath = options.lockPath ?? `${file}.lock`;
  return inTurn(lockPath, async () => {
    const reused = await reuseKept(lockPath);
    const held = reused ?? { token: await acquire(lockPath, options.timeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS), since: Date.now() };
    try {
      return await fn();
    } finally {
      await afterUse(lockPath, held, options.keepMs);
    }
  });
}

/** The lock kept from this process's last use, if it is still ours and nobody waits for it. */
async function reuseKept(lockPath: string): Promise<Kept | undefined> {
  const entry = kept.get(lockPath);
  if (entry === undefined) return undefined;
  kept.delete(lockPath);
  clearTimeout(entry.timer);
  let state: ReturnType<typeof keptLockState>;
  try {
    state = keptLockState(lockPath, entry.ino);
  } catch (err) {
    // Cannot tell: let it go the careful way and take it afresh.
    state = 'wanted';
    log.debug('lock_keep_check_failed', { lock: lockPath, error: messageOf(err) });
  }
  if (state === 'ours') return entry;
  closeSync(entry.fd);
  if (state === 'lost') {
    log.warn('lock_lost', { lock: lockPath, message: `${lockPath} was removed or replaced while this process kept it` });
    return undefined;
  }
  yieldUntil.set(lockPath, Date.now() + YIELD_MS);
  await releaseLock(lockPath, entry.token);
  return undefined;
}

async function afterUse(lockPath: string, held: { token: string; since: number; fd?: number; ino?: number }, keepMs: number | undefined): Promise<void> {
  const now = Date.now();
  const yielding = now < (yieldUntil.get(lockPath) ?? 0);
  if (!yielding) yieldUntil.delete(lockPath);
  const keep = keepMs !== undefined && keepMs > 0 && now - held.since < MAX_KEEP_MS && !yielding;
  let opened = held.fd !== undefined && held.ino !== undefined ? { fd: held.fd, ino: held.ino } : undefined;
  if (keep && opened === undefined) {
    try {
      opened = openKeptLock(lockPath);
    } catch {
      // Cannot be kept safely: released below like any other.
    }
  }
  if (!keep || opened === undefined) {
    if (opened !== undefined) closeSync(opened.fd);
    await releaseLock(lockPath, held.token);
    return;
  }
  const entry: Kept = { token: held.token, ...opened, since: held.since, timer: undefined };
  entry.timer = setTimeout(() => void inTurn(lockPath, () => letGo(lockPath, entry)), keepMs);
  entry.timer.unref();
  kept.set(lockPath, entry);
  releaseAtExit();
}

/** Releases a kept lock that went unused for its keep time (unless a caller took it meanwhile). */
async function letGo(lockPath: string, entry: Kept): Promise<void> {
  if (kept.get(lockPath) !== entry) return;
  kept.delete(lockPath);
  closeSync(entry.fd);
  await releaseLock(lockPath, entry.token);
}

/** Lets go of the lock of `file` if this process keeps it (a store closing). */
export function letGoOfKept(file: string, options: { lockPath?: string } = {}): Promise<void> {
  const lockPath = options.lockPath ?? `${file}.lock`;
  return inTurn(lockPath, async () => {
    const entry = kept.get(lockPath);
    if (entry === undefined) return;
    kept.delete(lockPath);
    clearTimeout(entry.timer);
    closeSync(entry.fd);
    await releaseLock(lockPath, entry.token);
  });
}

let exitHook = false;
function releaseAtExit(): void {
  if (exitHook) return;
  exitHook = true;
  process.once('exit', () => {
    for (const [lockPath, entry] of kept) {
      closeSync(entry.fd);
      releaseLockSync(lockPath, entry.token);
    }
    kept.clear();
  });
}

/**
 * Takes `<file>.lock` and keeps it until the returned release is called (or the process
 * dies, after which the next taker recovers it). For locks held for a process's
 * lifetime, such as the notifier's; short critical sections use withFileLock.
 * Throws `busy` if a live holder keeps it past `timeoutMs` (0: try once).
 */
export async function holdFileLock(file: string, timeoutMs: number): Promise<() => Promise<void>> {
  const lockPath = `${file}.lock`;
  const token = await acquire(lockPath, timeoutMs);
  let released: Promise<void> | undefined;
  return () => (released ??= releaseLock(lockPath, token));
}
