#!/usr/bin/env node
/**
 * A stand-in for `codex queue`, for testing the executor's failure paths. It appends
 * `{t, argv, pid}` to FAKE_CODEX_LOG on every run, then behaves as FAKE_CODEX_MODE says:
 *   ok          print Codex's success line and exit 0
 *   fail        print an error and exit 1
 *   hang        never exit (until killed)
 *   fail-N      fail the first N runs (counted in FAKE_CODEX_LOG), then succeed
 *   hang-child  start a grandchild that hangs, then hang (the executor must kill both)
 */
import { spawn } from 'node:child_process';
import { appendFileSync, existsSync, readFileSync } from 'node:fs';

const log = process.env.FAKE_CODEX_LOG;
const mode = process.env.FAKE_CODEX_MODE ?? 'ok';
const previous = log !== undefined && existsSync(log) ? readFileSync(log, 'utf8').split('\n').filter(Boolean).length : 0;
if (log !== undefined) appendFileSync(log, JSON.stringify({ t: Date.now(), argv: process.argv.slice(2), pid: process.pid }) + '\n');

const argv = process.argv.slice(2);
const thread = argv[argv.indexOf('--thread') + 1];

function succeed() {
  process.stdout.write(`Queued message 01a227a4-0000-7000-8000-${String(previous).padStart(12, '0')} for thread ${thread}.\n`);
  process.exit(0);
}

function fail() {
  process.stderr.write(`Error: No active session found matching ${thread}\n`);
  process.exit(1);
}

const hang = () => setInterval(() => undefined, 1_000);

if (argv[0] !== 'queue') fail();
const failFirst = /^fail-(\d+)$/.exec(mode);
if (mode === 'ok') succeed();
else if (mode === 'fail') fail();
else if (mode === 'hang') hang();
else if (mode === 'hang-child') {
  const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
  if (process.env.FAKE_CODEX_CHILD_PID_FILE) appendFileSync(process.env.FAKE_CODEX_CHILD_PID_FILE, `${child.pid}\n`);
  hang();
} else if (failFirst) (previous < Number(failFirst[1]) ? fail : succeed)();
else fail();
