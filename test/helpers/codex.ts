/**
 * Helpers for Codex-mode tests: a `codex` stand-in whose behaviour can be changed while a
 * server runs (the server's INTERLINK_CODEX_BIN is fixed at spawn), tool calls carrying
 * `_meta`, and `interlink-mcp` CLI runs with an explicit environment and a deadline.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { FakeCodexMode } from './fake-codex.js';
import { readJsonLinesSync } from './json-lines.js';
import { MAIN, resultData, type Peer } from './mcp.js';

export interface CodexCall {
  t: number;
  argv: string[];
  pid: number;
}

export interface SwitchableCodex {
  /** The path to give the server as INTERLINK_CODEX_BIN. */
  bin: string;
  log: string;
  /** How the next runs behave; `missing` removes the executable (codex cannot be started). */
  set(mode: FakeCodexMode | 'missing'): Promise<void>;
  calls(): CodexCall[];
}

function sh(value: string): string {
  return `'${value.replace(/'/g, `'\\''`)}'`;
}

/**
 * `bin` is a shell script that runs fake-codex.mjs with FAKE_CODEX_MODE read from a file
 * at each run, so a test can make it fail and then succeed. Starts in `mode`.
 */
export async function switchableCodex(root: string, mode: FakeCodexMode | 'missing'): Promise<SwitchableCodex> {
  const dir = join(root, 'switchable-codex');
  await mkdir(dir, { recursive: true });
  const bin = join(dir, 'codex');
  const modeFile = join(dir, 'mode');
  const log = join(root, 'switchable-codex.jsonl');
  const script = join(import.meta.dirname, 'fake-codex.mjs');
  const wrapper = [
    '#!/bin/sh',
    `FAKE_CODEX_MODE="$(cat ${sh(modeFile)})"`,
    `FAKE_CODEX_LOG=${sh(log)}`,
    'export FAKE_CODEX_MODE FAKE_CODEX_LOG',
    `exec ${sh(process.execPath)} ${sh(script)} "$@"`,
  ].join('\n');
  const set = async (next: FakeCodexMode | 'missing') => {
    if (next === 'missing') {
      await rm(bin, { force: true });
      return;
    }
    await writeFile(modeFile, next);
    await writeFile(bin, wrapper + '\n', { mode: 0o755 });
  };
  await set(mode);
  return {
    bin,
    log,
    set,
    calls: () => readJsonLinesSync(log) as CodexCall[],
  };
}

/** A tool call with `_meta`; resolves with whether it failed and its result. */
export async function callWithMeta(
  peer: Peer,
  name: string,
  args: Record<string, unknown>,
  meta: Record<string, unknown>,
): Promise<{ isError: boolean; data: Record<string, unknown> }> {
  const result = await peer.client.callTool({ name, arguments: args, _meta: meta });
  return { isError: result.isError === true, data: resultData(result) };
}

/** The error code of a failed result, or undefined when it succeeded. */
export function errorCode(result: { isError: boolean; data: Record<string, unknown> }): string | undefined {
  return result.isError ? (result.data as { error: { code: string } }).error.code : undefined;
}

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

const running = new Set<ChildProcess>();

/** Runs `interlink-mcp <args>` with exactly `env` (plus PATH), killed at the deadline. */
export function runCli(args: readonly string[], env: Record<string, string>, timeoutMs = 20_000): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [MAIN, ...args], { env: { PATH: process.env.PATH ?? '', INTERLINK_LOG: 'warn', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    running.add(child);
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.once('error', (err) => {
      clearTimeout(timer);
      running.delete(child);
      reject(err);
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      running.delete(child);
      if (timedOut) reject(new Error(`interlink-mcp ${args.join(' ')} did not finish within ${timeoutMs} ms; stderr: ${stderr}`));
      else resolve({ code, signal, stdout, stderr });
    });
  });
}

/** Kills and reaps CLI runs a failed test left behind; for afterEach. */
export async function reapCli(): Promise<void> {
  await Promise.all(
    [...running].map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) {
            running.delete(child);
            resolve();
            return;
          }
          child.once('close', () => resolve());
          child.kill('SIGKILL');
        }),
    ),
  );
}
