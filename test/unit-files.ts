/**
 * The test files that start no child process — pure rules, property tests, stores on
 * real files, in-process relays on the embedded store — which `npm run test:unit` runs
 * for the edit-test loop (no build needed), sharing one module registry per worker (they
 * need no isolation; loading src/ afresh for each file was a third of their CPU). A file
 * that starts processes (through the helpers below, or spawn/fork/execFile itself) is
 * left to `npm test`, found by reading its imports, so a new file lands on the right
 * side by itself.
 */
import { readFileSync, readdirSync } from 'node:fs';

const STARTS_PROCESSES = /\b(spawn|fork|execFile|execFileSync|spawnSync)\(|helpers\/(spawn-relay|mcp|cli|children|listener-process|process|codex|postgres|install|noproc|mailbox-writer|listener-writer|replay-claimer|fake-codex|console)\.js'/;

/** Test files that run outside `npm test` (test/host: the real CLIs, `npm run test:host`). */
export const HOST_TESTS = ['test/host/claude.test.ts', 'test/host/codex.test.ts', 'test/host/marketplace.test.ts'];

export const UNIT_FILES = readdirSync('test', { recursive: true, encoding: 'utf8' })
  .filter((name) => name.endsWith('.test.ts') && !name.startsWith('host/'))
  .map((name) => `test/${name.split('\\').join('/')}`)
  .filter((file) => !STARTS_PROCESSES.test(readFileSync(file, 'utf8')))
  .sort();
