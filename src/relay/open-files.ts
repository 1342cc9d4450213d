/**
 * The relay's open-files limit. Every connection, counted or on its way to being refused,
 * holds a file; so does the store. Node raises its soft limit to the hard one as it
 * starts (its platform setup does so on every POSIX system), so the hard limit is the
 * one an operator sets: `LimitNOFILE=` in a systemd unit, `ulimit -Hn` in a shell
 * (docs/OPERATING.md). Read from /proc on Linux; where there is no /proc it is not known.
 */
import { readFileSync } from 'node:fs';

/** Files the relay keeps besides its connections: the store, its journal, log and listening sockets, with room to spare. */
export const RESERVED_FILES = 64;

export interface OpenFilesLimit {
  soft: number;
  hard: number;
}

/** Reads the `Max open files` line of a /proc/<pid>/limits text; `unlimited` reads as Infinity. */
export function parseOpenFiles(limits: string): OpenFilesLimit | undefined {
  const match = /^Max open files\s+(\d+|unlimited)\s+(\d+|unlimited)/m.exec(limits);
  if (match === null) return undefined;
  const value = (text: string) => (text === 'unlimited' ? Infinity : Number(text));
  return { soft: value(match[1]!), hard: value(match[2]!) };
}

export function openFilesLimit(): OpenFilesLimit | undefined {
  try {
    return parseOpenFiles(readFileSync('/proc/self/limits', 'utf8'));
  } catch {
    return undefined;
  }
}

/** The warning a relay logs when its connection cap does not fit its open files, or undefined when it fits. */
export function openFilesWarning(limit: OpenFilesLimit | undefined, maxConnections: number): string | undefined {
  if (limit === undefined || maxConnections + RESERVED_FILES <= limit.soft) return undefined;
  return `the relay may hold ${maxConnections} connections but open only ${limit.soft} files: past about ${Math.max(0, limit.soft - RESERVED_FILES)} connections accepting fails for everyone; raise the hard limit (systemd: LimitNOFILE=${maxConnections + RESERVED_FILES} or more; shell: ulimit -Hn) or lower --max-connections`;
}
