import { readFileSync, readdirSync } from 'node:fs';
import { defineConfig } from 'vitest/config';

/**
 * `npm run test:unit`: the tests that start no child process — pure rules, property tests,
 * stores on real files, in-process relays on the embedded store — for the edit-test loop
 * (no build needed; under 2 minutes here). A test file that starts processes (through the
 * helpers below, or spawn/fork/execFile itself) is left to `npm test`, found by reading
 * its imports, so a new file lands on the right side by itself.
 */
const STARTS_PROCESSES = /\b(spawn|fork|execFile|execFileSync|spawnSync)\(|helpers\/(spawn-relay|mcp|cli|children|listener-process|process|codex|postgres|install|noproc|mailbox-writer|listener-writer|replay-claimer|fake-codex)\.js'/;

const unit = readdirSync('test', { recursive: true, encoding: 'utf8' })
  .filter((name) => name.endsWith('.test.ts') && !name.startsWith('host/'))
  .map((name) => `test/${name.split('\\').join('/')}`)
  .filter((file) => !STARTS_PROCESSES.test(readFileSync(file, 'utf8')))
  .sort();

export default defineConfig({
  test: {
    name: 'unit',
    include: unit,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // CPU-bound files: one per core.
    maxWorkers: 2,
    setupFiles: ['test/helpers/quiet-logs.ts'],
  },
});
