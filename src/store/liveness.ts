/**
 * Whether a process named by a lock file still runs (DESIGN.md, "Sidecar locks").
 *
 * Everywhere: the host name, and a signal-0 probe (`process.kill(pid, 0)`), which sends
 * nothing and answers ESRCH for no such process, EPERM for one that runs under another
 * user. Where Linux's /proc is mounted, also the boot id and each process's start time,
 * which tell a pid reused by a newer process, or a holder from before a reboot, from the
 * holder itself. Where they cannot be read (macOS, the BSDs, Windows, a Linux without
 * /proc) they are '' — unknown — and are never compared: there a lock whose pid now
 * belongs to another live process is waited on, never broken.
 */
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { errnoCode } from '../errors.js';

/** Who runs where: what a lock file records of its holder. */
export interface ProcessMark {
  host: string;
  /** Linux boot id, or '' where the OS does not give one. */
  boot: string;
  pid: number;
  /** Start time of the pid in clock ticks since boot (Linux), or '' where unknown. */
  start: string;
}

/** What the OS answers about a pid of this host. */
export interface ProcessProbe {
  isRunning: (pid: number) => boolean;
  startTime: (pid: number) => string;
}

function readBootId(): string {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return '';
  }
}

function processStartTime(pid: number): string {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Field 22, counted after the parenthesised command name, which may contain spaces.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[19] ?? '';
  } catch {
    // No /proc, or a pid this /proc does not show (another pid namespace, or it has
    // just exited — which the signal-0 probe tells on the next look): unknown.
    return '';
  }
}

/** True while a process with this pid exists, whoever owns it. */
export function processIsRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return errnoCode(err) === 'EPERM';
  }
}

export const osProbe: ProcessProbe = { isRunning: processIsRunning, startTime: processStartTime };

/** This process, as a lock file records it. */
export const SELF: ProcessMark = { host: hostname(), boot: readBootId(), pid: process.pid, start: processStartTime(process.pid) };

/**
 * True only when `holder` surely no longer runs: it is on this host and the machine has
 * rebooted since, or its pid is gone, or its pid now belongs to a process that started
 * at another time. A holder on another host is never judged dead.
 */
export function holderIsDead(holder: ProcessMark, here: ProcessMark = SELF, probe: ProcessProbe = osProbe): boolean {
  if (holder.host !== here.host) return false;
  if (here.boot !== '' && holder.boot !== '' && holder.boot !== here.boot) return true;
  if (!probe.isRunning(holder.pid)) return true;
  if (holder.start === '') return false;
  const start = probe.startTime(holder.pid);
  return start !== '' && start !== holder.start;
}
