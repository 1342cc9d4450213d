/**
 * `interlink-mcp wait` as a real child process for tests: stdin given (or /dev/null),
 * stdout and stderr collected, waits on stderr text or a condition with deadlines, and
 * every child reaped by `reapListeners`.
 */
import { spawn, type ChildProcess } from 'node:child_process';

export interface ListenerResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface ListenerChild {
  child: ChildProcess;
  stderr: () => string;
  /** Resolves once stderr contains `text`; rejects at the deadline or when the child ends first. */
  waitForStderr: (text: string, timeoutMs?: number) => Promise<void>;
  /** Resolves once the child exited and its output is drained. */
  done: Promise<ListenerResult>;
}

const live = new Set<ChildProcess>();

/** Variables that steer the listener; a test sets the ones it means, the rest are removed. */
const STEERING = ['INTERLINK_SESSION', 'INTERLINK_CHANNELS', 'INTERLINK_LOG', 'INTERLINK_STATE_DIR', 'XDG_STATE_HOME'];

export function listenerEnv(overrides: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const name of STEERING) delete env[name];
  return { ...env, ...overrides };
}

export function startListener(cli: string, args: readonly string[], env: Record<string, string>, stdin?: string): ListenerChild {
  const child = spawn(process.execPath, [cli, 'wait', ...args], {
    env: listenerEnv(env),
    stdio: [stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
  });
  live.add(child);
  if (stdin !== undefined) child.stdin!.end(stdin);
  let stdout = '';
  let stderr = '';
  let ended = false;
  const listeners = new Set<() => void>();
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
    for (const listener of listeners) listener();
  });
  const done = new Promise<ListenerResult>((resolve) => {
    child.once('close', (code: number | null, signal: NodeJS.Signals | null) => {
      live.delete(child);
      ended = true;
      for (const listener of listeners) listener();
      resolve({ code, signal, stdout, stderr });
    });
  });
  const waitForStderr = (text: string, timeoutMs = 20_000): Promise<void> =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => finish(new Error(`timed out waiting for ${JSON.stringify(text)} on stderr: ${stderr}`)), timeoutMs);
      const check = (): void => {
        if (stderr.includes(text)) finish();
        else if (ended) finish(new Error(`listener ended before writing ${JSON.stringify(text)}: ${stderr}`));
      };
      const finish = (error?: Error): void => {
        clearTimeout(timer);
        listeners.delete(check);
        if (error) reject(error);
        else resolve();
      };
      listeners.add(check);
      check();
    });
  return { child, stderr: () => stderr, waitForStderr, done };
}

/** Waits for `condition` to hold, looking every few milliseconds, and fails at the deadline. */
export async function waitUntil(condition: () => Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Kills and reaps every listener a test left running. */
export async function reapListeners(): Promise<void> {
  await Promise.all(
    [...live].map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once('exit', () => resolve());
          child.kill('SIGKILL');
        }),
    ),
  );
  live.clear();
}
