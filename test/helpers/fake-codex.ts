/**
 * Puts the `codex` stand-in (fake-codex.mjs) on a PATH of its own: `dir/codex` is a shim
 * that runs it with this Node. Each run is logged, so a test can check the argument
 * vector, the number of attempts and the time between them.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { readJsonLinesSync } from './json-lines.js';

export type FakeCodexMode = 'ok' | 'fail' | 'hang' | 'hang-child' | `fail-${number}`;

export interface FakeCodex {
  dir: string;
  bin: string;
  log: string;
  env(mode: FakeCodexMode): Record<string, string>;
  calls(): { t: number; argv: string[]; pid: number }[];
}

/**
 * With `control`, the shim itself sets FAKE_CODEX_CONTROL and FAKE_CODEX_LOG, for callers
 * that start it with an environment the test does not choose (Codex's MCP servers).
 */
export async function fakeCodex(root: string, options: { control?: string } = {}): Promise<FakeCodex> {
  const dir = join(root, 'fake-codex-bin');
  await mkdir(dir, { recursive: true });
  const bin = join(dir, 'codex');
  const script = join(import.meta.dirname, 'fake-codex.mjs');
  const log = join(root, 'fake-codex.jsonl');
  const fixed = options.control !== undefined ? `export FAKE_CODEX_CONTROL=${JSON.stringify(options.control)} FAKE_CODEX_LOG=${JSON.stringify(log)}\n` : '';
  await writeFile(bin, `#!/bin/sh\n${fixed}exec ${JSON.stringify(process.execPath)} ${JSON.stringify(script)} "$@"\n`, { mode: 0o755 });
  return {
    dir,
    bin,
    log,
    env: (mode) => ({ FAKE_CODEX_MODE: mode, FAKE_CODEX_LOG: log, PATH: `${dir}:${process.env.PATH ?? ''}` }),
    calls: () => readJsonLinesSync(log) as { t: number; argv: string[]; pid: number }[],
  };
}
