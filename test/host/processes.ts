/**
 * Finding and reaping every process a host CLI started. Claude Code runs hooks in their
 * own sessions, so they are not in its process group; they all inherit its environment,
 * though, so a marker variable set for the CLI finds them (and its MCP servers) in /proc.
 */
import { readdir, readFile, readlink } from 'node:fs/promises';

export const RUN_MARKER = 'INTERLINK_HOST_TEST_RUN';

export interface MarkedProcess {
  pid: number;
  argv: string[];
  cwd: string | undefined;
  /** Its environment as it started. */
  env: Record<string, string>;
}

async function readOrUndefined<T>(read: () => Promise<T>): Promise<T | undefined> {
  try {
    return await read();
  } catch {
    return undefined; // the process exited while we looked
  }
}

/** Live processes whose environment holds `INTERLINK_HOST_TEST_RUN=<run>` (Linux only). */
export async function markedProcesses(run: string): Promise<MarkedProcess[]> {
  return processesWithEnv(`${RUN_MARKER}=${run}`);
}

/**
 * Live processes whose environment holds `entry` (`NAME=value`). For processes a host
 * starts with an environment of its own choosing (Codex's MCP servers get only a few
 * variables), a variable the host passes on marks them instead.
 */
export async function processesWithEnv(entry: string): Promise<MarkedProcess[]> {
  const pids = (await readOrUndefined(() => readdir('/proc'))) ?? [];
  const found: MarkedProcess[] = [];
  for (const name of pids) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    const environ = await readOrUndefined(() => readFile(`/proc/${pid}/environ`, 'utf8'));
    const entries = environ?.split('\0') ?? [];
    if (!entries.includes(entry)) continue;
    const cmdline = (await readOrUndefined(() => readFile(`/proc/${pid}/cmdline`, 'utf8'))) ?? '';
    const cwd = await readOrUndefined(() => readlink(`/proc/${pid}/cwd`));
    const env = Object.fromEntries(entries.filter((e) => e.includes('=')).map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]));
    found.push({ pid, argv: cmdline.split('\0').filter((a) => a !== ''), cwd, env });
  }
  return found;
}

/** SIGKILLs every marked process until none is left (or the deadline passes). */
export async function reapMarked(run: string, timeoutMs = 10_000): Promise<void> {
  return reapWithEnv(`${RUN_MARKER}=${run}`, timeoutMs);
}

/** SIGKILLs every process whose environment holds `entry` until none is left. */
export async function reapWithEnv(entry: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const left = await processesWithEnv(entry);
    if (left.length === 0) return;
    if (Date.now() > deadline) throw new Error(`could not reap: ${left.map((p) => `${p.pid} ${p.argv.join(' ')}`).join('; ')}`);
    for (const p of left) {
      try {
        process.kill(p.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}
