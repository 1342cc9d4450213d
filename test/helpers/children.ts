/**
 * Node child processes for tests that race real processes: piped stdio, output collected,
 * a start line to release them together, and every one reaped after the test.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { expect } from 'vitest';

/** Every child started here that has not been reaped yet. */
const children = new Set<ChildProcess>();

/** Kills a child that is still running and waits until it has been reaped. */
export function reap(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) {
      children.delete(child);
      resolve();
      return;
    }
    child.once('exit', () => {
      children.delete(child);
      resolve();
    });
    child.kill('SIGKILL');
  });
}

/** Kills and reaps every child still running; for afterEach. */
export async function reapChildren(): Promise<void> {
  await Promise.all([...children].map(reap));
}

export interface RunningChild {
  child: ChildProcess;
  waitFor: (text: string) => Promise<void>;
  exited: Promise<void>;
  done: Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }>;
}

export function startChild(script: string, args: string[]): RunningChild {
  const child = spawn(process.execPath, [script, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
  children.add(child);
  let stdout = '';
  let stderr = '';
  const listeners = new Set<() => void>();
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk;
    for (const listener of listeners) listener();
  });
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  // 'exit' comes once the process has been reaped; 'close' once its output is drained too.
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const done = new Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }>((resolve) => {
    child.once('close', (code, signal) => {
      children.delete(child);
      resolve({ code, signal, stdout, stderr });
    });
  });
  const waitFor = (text: string): Promise<void> =>
    new Promise((resolve, reject) => {
      const check = (): void => {
        if (!stdout.includes(text)) return;
        listeners.delete(check);
        resolve();
      };
      listeners.add(check);
      check();
      void done.then(() => {
        if (listeners.delete(check)) reject(new Error(`child exited before printing ${JSON.stringify(text)}: ${stderr}`));
      });
    });
  return { child, waitFor, exited, done };
}

/** Starts children that each wait at a start line, then releases them all at once. */
export async function raceChildren(script: string, argsFor: (i: number) => string[], count: number): Promise<string[]> {
  const racers = Array.from({ length: count }, (_, i) => startChild(script, argsFor(i)));
  await Promise.all(racers.map((r) => r.waitFor('ready\n')));
  for (const r of racers) r.child.stdin?.end('go\n');
  const results = await Promise.all(racers.map((r) => r.done));
  return results.map(({ code, stdout, stderr }) => {
    expect(code, stderr).toBe(0);
    return stdout.slice('ready\n'.length);
  });
}

/** Writes a script of `lines` as `name` in `dir` and returns its path. */
export async function writeScript(dir: string, name: string, lines: string[]): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, lines.join('\n') + '\n');
  return path;
}

/** Script lines that print `ready` and then wait for a line on stdin before going on. */
export const startLine = [`process.stdout.write('ready\\n');`, `await new Promise((resolve) => process.stdin.once('data', resolve));`];
