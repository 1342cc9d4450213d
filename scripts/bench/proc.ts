/** What Linux's /proc says about a process: its resident memory and the CPU time it used. */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

let ticksPerSecond: number | undefined;

function clockTicks(): number {
  ticksPerSecond ??= Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  return ticksPerSecond;
}

/** A `kB` line of /proc/<pid>/status in bytes; NaN where /proc does not say. */
function statusBytes(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  try {
    const match = new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match ? Number(match[1]) * 1024 : NaN;
  } catch {
    return NaN;
  }
}

/** Resident set size (VmRSS) in bytes; NaN where /proc does not say. */
export function rssBytes(pid: number): number {
  return statusBytes(pid, 'VmRSS');
}

/** The largest resident set size the process has had (VmHWM, its high-water mark) in bytes; NaN where /proc does not say. */
export function peakRssBytes(pid: number): number {
  return statusBytes(pid, 'VmHWM');
}

/**
 * Bytes the process has caused to be written to storage so far (`write_bytes` of
 * /proc/<pid>/io: what reached the block layer, not what sat in a socket); undefined
 * where /proc does not say or does not let this user read it.
 */
export function storageWriteBytes(pid: number): number | undefined {
  try {
    const match = /^write_bytes: (\d+)$/m.exec(readFileSync(`/proc/${pid}/io`, 'utf8'));
    return match ? Number(match[1]) : undefined;
  } catch {
    return undefined;
  }
}

/** User + system CPU seconds the process used so far (fields 14 and 15 of /proc/<pid>/stat). */
export function cpuSeconds(pid: number): number {
  const fields = statFields(pid);
  if (fields === undefined) throw new Error(`no /proc/${pid}/stat: the process is gone, or this system has no /proc`);
  return (Number(fields[11]) + Number(fields[12])) / clockTicks();
}

/** The fields of /proc/<pid>/stat after the command name, from field 3 (state) at index 0. */
function statFields(pid: number | string): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces; the fields after its closing parenthesis do not.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

/**
 * CPU seconds used so far by a process and its children (a postmaster and its backends):
 * its own, that of the children it has already waited for (cutime, cstime), and that of
 * its children still running. A child that exits between two readings moves from the last
 * sum into the second, so the difference of two readings counts it once. Undefined
 * without /proc.
 */
export function familyCpuSeconds(pid: number): number | undefined {
  const own = statFields(pid);
  if (own === undefined) return undefined;
  const ticks = (fields: string[], from: number, to: number) => fields.slice(from, to + 1).reduce((sum, f) => sum + Number(f), 0);
  let total = ticks(own, 11, 14);
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const fields = statFields(entry);
    if (fields !== undefined && Number(fields[1]) === pid) total += ticks(fields, 11, 12);
  }
  return total / clockTicks();
}
