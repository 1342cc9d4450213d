/**
 * What a sidecar lock file says (lock-file.ts): the holder a taker writes into it — host,
 * boot id, pid, the pid's start time (liveness.ts) and a random owner token — read back as
 * absent, held or unreadable (and how old an unreadable one is, allowing for the mark a
 * waiter sets on a wanted lock's mtime). Taking, waiting and releasing read it through
 * here, and so does removing one (lock-breaker.ts), which goes by the token it finds.
 */
import { lstatSync, readFileSync, statSync } from 'node:fs';
import { z } from 'zod';
import { InterlinkError, errnoCode } from '../errors.js';
import { parseJsonWith } from '../json.js';

const holderSchema = z.object({
  host: z.string(),
  boot: z.string(),
  pid: z.number().int().positive(),
  start: z.string(),
  token: z.string().min(1),
});
export type Holder = z.infer<typeof holderSchema>;

function parseHolder(text: string): Holder | undefined {
  const parsed = parseJsonWith(holderSchema, text);
  return parsed.ok ? parsed.value : undefined;
}

export type LockState = { kind: 'absent' } | { kind: 'held'; holder: Holder } | { kind: 'unreadable'; ageMs: number };

/**
 * What the lock file says now. Synchronous, like the create: a few microseconds of
 * local metadata, cheaper than a trip through the thread pool.
 */
export function inspect(lockPath: string): LockState {
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

/** The lock file's exact text for `holder`: written on create, compared on release. */
export function holderText(holder: Holder): string {
  return JSON.stringify(holder);
}

/**
 * A waiter marks a live holder's lock as wanted by setting its mtime to this instant
 * (one second after the epoch), which no lock written since has: the holder of a kept
 * lock sees it with the one stat it takes before each reuse, and lets go. A holder that
 * keeps nothing never looks; the mark changes nothing else (only an unreadable lock is
 * judged by its age, and only a readable one is marked).
 */
export const WANTED_MTIME_S = 1;

/**
 * When the lock file was last written: its mtime, unless a waiter's mark replaced that
 * (a mark that landed on a lock just created in place, on a filesystem without links, in
 * the moment before its holder is written); then its ctime, which the mark set to now.
 */
function lastWritten(lockPath: string): number {
  const info = statSync(lockPath);
  return info.mtimeMs <= WANTED_MTIME_S * 1000 ? info.ctimeMs : info.mtimeMs;
}
