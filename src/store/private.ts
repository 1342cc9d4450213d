/**
 * Everything under the config and state roots is private to its user: message bodies,
 * keys and notices. Files are created 0600 and directories 0700 whatever the umask, and
 * files are opened without following a symlink, so a link planted under the root cannot
 * redirect a write (or a read) to a file elsewhere (DESIGN.md, "Durable files").
 */
import { constants, mkdirSync, readdirSync, lstatSync, chmodSync } from 'node:fs';
import { chmod, mkdir, open } from 'node:fs/promises';
import { join } from 'node:path';

export const PRIVATE_FILE = 0o600;
export const PRIVATE_DIR = 0o700;
/** O_NOFOLLOW where the platform has it (POSIX); 0 elsewhere. */
export const NO_FOLLOW = constants.O_NOFOLLOW ?? 0;

/** mkdir -p with 0700 for every directory it creates (then chmod: the umask cannot widen it, but may narrow it). */
export async function makePrivateDir(dir: string): Promise<void> {
  const first = await mkdir(dir, { recursive: true, mode: PRIVATE_DIR });
  if (first !== undefined) await chmod(dir, PRIVATE_DIR);
}

export function makePrivateDirSync(dir: string): void {
  const first = mkdirSync(dir, { recursive: true, mode: PRIVATE_DIR });
  if (first !== undefined) chmodSync(dir, PRIVATE_DIR);
}

export interface Loosened {
  path: string;
  mode: number;
}

/**
 * Tightens what earlier versions (or a loose umask) left readable by others: group and
 * other bits are taken off every file and directory under `root`, never following a
 * link. Returns what it changed, for one warning. Bounded by the tree's size.
 */
export function tightenTree(root: string, limit = 100_000): Loosened[] {
  const changed: Loosened[] = [];
  const stack = [root];
  let seen = 0;
  while (stack.length > 0 && seen < limit) {
    const path = stack.pop()!;
    seen++;
    let info;
    try {
      info = lstatSync(path);
    } catch {
      continue;
    }
    if (info.isSymbolicLink()) continue;
    const mode = info.mode & 0o777;
    if ((mode & 0o077) !== 0) {
      try {
        chmodSync(path, mode & 0o700);
        changed.push({ path, mode });
      } catch {
        // Not ours to change (another owner): left as it is.
      }
    }
    if (info.isDirectory()) {
      try {
        for (const name of readdirSync(path)) stack.push(join(path, name));
      } catch {
        continue;
      }
    }
  }
  return changed;
}

/** Reads a file under a root as text, refusing a symlink in its place (ELOOP). */
export async function readPrivateFile(path: string): Promise<string> {
  const handle = await open(path, constants.O_RDONLY | NO_FOLLOW);
  try {
    return await handle.readFile('utf8');
  } finally {
    await handle.close();
  }
}
