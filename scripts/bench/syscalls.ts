/**
 * Counts of the system calls that cost a message its time, per group of processes, from
 * Linux `perf stat` on the kernel's tracepoints: durability syncs, lock takes (each
 * sidecar-lock attempt is one link(2)), every system call, and context switches. Where
 * perf is missing or not permitted, `available()` says so and the caller reports that
 * instead of figures.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';

export const SYSCALL_EVENTS = {
  syncs: ['syscalls:sys_enter_fdatasync', 'syscalls:sys_enter_fsync'],
  lockTakes: ['syscalls:sys_enter_link'],
  syscalls: ['raw_syscalls:sys_enter'],
  switches: ['context-switches'],
} as const;
export type SyscallCounts = Record<keyof typeof SYSCALL_EVENTS, number>;

const EVENTS = Object.values(SYSCALL_EVENTS).flat();

/** The probe's answer, asked once: undefined inside when perf can count here. */
let probed: { why: string | undefined } | undefined;

/** Undefined when perf can count these events here; otherwise why not. */
export function perfUnavailable(): string | undefined {
  probed ??= { why: probePerf() };
  return probed.why;
}

function probePerf(): string | undefined {
  const probe = spawnSync('perf', ['stat', '-x,', '-e', EVENTS.join(','), '--', 'true'], { encoding: 'utf8', timeout: 10_000 });
  if (probe.error !== undefined) return `perf could not be run (${probe.error.message})`;
  if (probe.status !== 0 || /not supported|No permission|Permission denied/i.test(probe.stderr)) {
    return `perf stat cannot count syscall tracepoints here: ${probe.stderr.trim().split('\n')[0] ?? 'exit ' + String(probe.status)}`;
  }
  return undefined;
}

export interface Counting {
  /** Stops counting and returns the totals over every process counted. */
  stop(): Promise<SyscallCounts>;
}

/** Starts counting in the given processes (all their threads); the counts cover start to stop. */
export function countSyscalls(pids: readonly number[]): Counting {
  const child: ChildProcess = spawn('perf', ['stat', '-x,', '-e', EVENTS.join(','), '-p', pids.join(',')], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (chunk: string) => (stderr += chunk));
  const exited = new Promise<void>((resolve) => child.once('close', () => resolve()));
  return {
    async stop() {
      child.kill('SIGINT');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
      return parsePerfCsv(stderr);
    },
  };
}

/** perf stat's CSV (`-x,`): value,unit,event,… per line; "<not counted>" counts as nothing. */
export function parsePerfCsv(text: string): SyscallCounts {
  const byEvent = new Map<string, number>();
  for (const line of text.split('\n')) {
    const [value, , event] = line.split(',');
    if (event === undefined || value === undefined) continue;
    const n = Number(value);
    if (Number.isFinite(n)) byEvent.set(event, (byEvent.get(event) ?? 0) + n);
  }
  const sum = (events: readonly string[]) => events.reduce((total, e) => total + (byEvent.get(e) ?? 0), 0);
  return {
    syncs: sum(SYSCALL_EVENTS.syncs),
    lockTakes: sum(SYSCALL_EVENTS.lockTakes),
    syscalls: sum(SYSCALL_EVENTS.syscalls),
    switches: sum(SYSCALL_EVENTS.switches),
  };
}
