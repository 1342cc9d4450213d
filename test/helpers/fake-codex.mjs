#!/usr/bin/env node
/**
 * A stand-in for `codex queue`, for testing the executor's failure paths. It appends
 * `{t, argv, pid}` to FAKE_CODEX_LOG on every run, then behaves as FAKE_CODEX_MODE says:
 *   ok          print Codex's success line and exit 0
 *   fail        print an error and exit 1
 *   hang        never exit (until killed)
 *   fail-N      fail the first N runs (counted in FAKE_CODEX_LOG), then succeed
 *   hang-child  start a grandchild that hangs, then hang (the executor must kill both)
 *
 * With FAKE_CODEX_CONTROL (a JSON file read on every run) the mode can change while the
 * process that starts it keeps running: `{"mode": "hang" | "fail" | "real", "real":
 * "<codex>"}` or `{"mode": "fail-then-real", "failures": N, "real": "<codex>"}`, where
 * `real` runs the real CLI with the same arguments and `fail-then-real` counts its runs
 * in `<control>.count`.
 */
import { spawn } from 'node:child_process';
import { appendFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs';

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

function runReal(codex) {
  const child = spawn(codex, argv, { stdio: 'inherit' });
  child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
  child.on('error', (err) => {
    process.stderr.write(`cannot run ${codex}: ${err.message}\n`);
    process.exit(1);
  });
}

const controlPath = process.env.FAKE_CODEX_CONTROL;

function byControl() {
  const control = JSON.parse(readFileSync(controlPath, 'utf8'));
  if (control.mode === 'real') return runReal(control.real);
  if (control.mode === 'hang') return hang();
  if (control.mode === 'fail-then-real') {
    const countPath = `${controlPath}.count`;
    const seen = existsSync(countPath) ? Number(readFileSync(countPath, 'utf8')) : 0;
    writeFileSync(countPath, String(seen + 1));
    return seen < control.failures ? fail() : runReal(control.real);
  }
  return fail();
}

function byMode() {
  const failFirst = /^fail-(\d+)$/.exec(mode);
  if (mode === 'ok') return succeed();
  if (mode === 'hang') return hang();
  if (mode === 'hang-child') {
    const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
    if (process.env.FAKE_CODEX_CHILD_PID_FILE) appendFileSync(process.env.FAKE_CODEX_CHILD_PID_FILE, `${child.pid}\n`);
    return hang();
  }
  if (failFirst) return previous < Number(failFirst[1]) ? fail() : succeed();
  return fail();
}

if (argv[0] !== 'queue') fail();
else if (controlPath !== undefined) byControl();
else byMode();
