/**
 * The command line as a user meets it: the built binary in a child process, with the
 * config and state roots pointed at temporary directories. Exit codes: 0 success, 1
 * failure with one line on stderr, 64 usage error.
 */
import { spawn } from 'node:child_process';
import { expect } from 'vitest';
import { MAIN } from './mcp.js';

export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface UserDirs {
  root: string;
  configDir: string;
  stateDir: string;
}

/** The environment of a user with nothing configured except the two roots. */
export function userEnv(dirs: UserDirs, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!name.startsWith('INTERLINK_') && !name.startsWith('XDG_')) env[name] = value;
  }
  return { ...env, HOME: dirs.root, INTERLINK_CONFIG_DIR: dirs.configDir, INTERLINK_STATE_DIR: dirs.stateDir, ...extra };
}

/** Runs `interlink-mcp <args>` with stdin closed and collects its output. */
export function runCli(args: readonly string[], env: NodeJS.ProcessEnv): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [MAIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** A failure with `code` (1 or 64): exactly one line on stderr; stdout empty unless --json. */
export function expectOneLine(run: Run, code: number, what = ''): string {
  expect(run.code, `${what}: ${run.stderr}`).toBe(code);
  expect(run.stderr.endsWith('\n'), what).toBe(true);
  expect(run.stderr.trimEnd().split('\n'), `${what}: ${run.stderr}`).toHaveLength(1);
  return run.stderr;
}

/** A failure: exit 1, nothing on stdout, exactly one line on stderr. */
export function expectOneLineFailure(run: Run): string {
  expect(run.stdout).toBe('');
  return expectOneLine(run, 1);
}

export function expectSuccess(run: Run): string {
  expect(run.code, run.stderr).toBe(0);
  expect(run.stderr).toBe('');
  return run.stdout;
}

/**
 * Runs `run` over `items`, at most `limit` at a time, results in order: a table of
 * CLI cases should not start dozens of node processes at once on a small CI machine.
 */
export async function mapLimit<T, R>(items: readonly T[], limit: number, run: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      results[i] = await run(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}
