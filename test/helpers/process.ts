/** Child processes for tests: line-buffered stdout, waits with deadlines, always reaped. */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';

export interface Child {
  process: ChildProcess;
  lines: string[];
  stderr: () => string;
  /** Resolves when at least `count` stdout lines arrived; rejects at the deadline or on exit. */
  waitForLines: (count: number, timeoutMs?: number) => Promise<void>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  kill: (signal?: NodeJS.Signals) => Promise<void>;
}

const live = new Set<ChildProcess>();

/** `shellFirst` (e.g. `ulimit -Sn 256`) runs in sh before it execs node, which keeps its pid. */
export function spawnNode(script: string, args: readonly string[], env: NodeJS.ProcessEnv = {}, shellFirst?: string): Child {
  const [command, argv] = shellFirst === undefined ? [process.execPath, [script, ...args]] : ['sh', ['-c', `${shellFirst}; exec "$0" "$@"`, process.execPath, script, ...args]];
  const child = spawn(command, argv, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(child);
  const lines: string[] = [];
  let partial = '';
  let err = '';
  const waiters = new Set<() => void>();
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    const parts = (partial + chunk).split('\n');
    partial = parts.pop() ?? '';
    lines.push(...parts);
    for (const w of waiters) w();
  });
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (err += chunk));
  const exited = once(child, 'exit').then(([code, signal]) => {
    live.delete(child);
    for (const w of waiters) w();
    return { code: code as number | null, signal: signal as NodeJS.Signals | null };
  });
  let done = false;
  void exited.then(() => (done = true));

  const waitForLines = (count: number, timeoutMs = 20_000) =>
    new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => finish(new Error(`timed out waiting for ${count} lines (got ${lines.length}); stderr: ${err}`)), timeoutMs);
      const check = () => {
        if (lines.length >= count) finish();
        else if (done) finish(new Error(`child exited after ${lines.length} of ${count} lines; stderr: ${err}`));
      };
      const finish = (error?: Error) => {
        clearTimeout(timer);
        waiters.delete(check);
        if (error) reject(error);
        else resolve();
      };
      waiters.add(check);
      check();
    });

  const kill = async (signal: NodeJS.Signals = 'SIGKILL') => {
    if (!done) child.kill(signal);
    await exited;
  };
  return { process: child, lines, stderr: () => err, waitForLines, exited, kill };
}

/** Kills whatever a failed test left running. */
export async function reapAll(): Promise<void> {
  await Promise.all(
    [...live].map(async (child) => {
      child.kill('SIGKILL');
      if (child.exitCode === null && child.signalCode === null) await once(child, 'exit');
    }),
  );
  live.clear();
}
