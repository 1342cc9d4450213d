/**
 * The Codex queue executor: hands one notice to `codex queue --thread <uuid> --message
 * <notice>`. The child gets an argument vector and no shell, so nothing in a notice can
 * become a command; bodies never travel this way (a notice is a pointer, at most 12 KiB).
 * Each attempt runs in its own process group and is killed whole at the timeout.
 */
import { spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { log } from '../../log.js';
import { MAX_NOTICE_BYTES } from '../../notices/notice.js';
import { afterAttempt, QUEUE_TIMEOUT_MS, type AttemptResult, type NextStep } from './retry.js';
import { messageOf } from '../../errors.js';

export interface QueueOptions {
  /** The `codex` executable (INTERLINK_CODEX_BIN, see config/env.ts). */
  bin: string;
  thread: string;
  message: string;
  env?: NodeJS.ProcessEnv;
  timeoutMs?: number;
  backoffMs?: number;
  /** Aborting kills a running attempt and skips the remaining ones. */
  signal?: AbortSignal;
  /** No log line per failed attempt (a CLI run reports the result itself). */
  quiet?: boolean;
}

export type QueueReport = Extract<NextStep, { action: 'finish' }> & { attempts: number };

/** Keeps the last bytes of a child's output for the failure reason, never more. */
const DETAIL_BYTES = 2_048;

/** Its own process group (detached), so a timeout can kill whatever it started too. */
function startAttempt(options: QueueOptions) {
  return spawn(options.bin, ['queue', '--thread', options.thread, '--message', options.message], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: options.env ?? process.env,
    detached: true,
    shell: false,
  });
}

/** One attempt. Never throws. */
export async function queueOnce(options: QueueOptions): Promise<AttemptResult> {
  const bytes = Buffer.byteLength(options.message, 'utf8');
  if (bytes > MAX_NOTICE_BYTES) return { kind: 'too_large', bytes };
  // An abort that came before this attempt fires no event; nothing is started then.
  if (options.signal?.aborted === true) return { kind: 'unstartable', detail: 'the server stopped before the attempt' };
  return new Promise((resolve) => {
    let output = '';
    let cut: 'timeout' | 'interrupted' | undefined;
    let settled = false;
    let child: ReturnType<typeof startAttempt>;
    try {
      child = startAttempt(options);
    } catch (err) {
      // Arguments spawn refuses outright (a NUL byte, an empty executable name) throw
      // here instead of emitting 'error'.
      resolve({ kind: 'unstartable', detail: messageOf(err) });
      return;
    }
    const collect = (chunk: Buffer) => {
      output = (output + chunk.toString('utf8')).slice(-DETAIL_BYTES);
    };
    child.stdout.on('data', collect);
    child.stderr.on('data', collect);
    const killGroup = () => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        child.kill('SIGKILL');
      }
    };
    const timer = setTimeout(() => {
      // A child that already exited has a known outcome; only something it left holding
      // its output open is still running, and that is killed with the group.
      if (child.exitCode === null && child.signalCode === null) cut = 'timeout';
      killGroup();
    }, options.timeoutMs ?? QUEUE_TIMEOUT_MS);
    const onAbort = () => {
      if (child.exitCode === null && child.signalCode === null) cut = 'interrupted';
      killGroup();
    };
    options.signal?.addEventListener('abort', onAbort, { once: true });
    const finish = (result: AttemptResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
      resolve(result);
    };
    child.on('error', (err) => finish({ kind: 'unstartable', detail: err.message }));
    child.on('close', (code, signal) => {
      const detail = lastLine(output);
      if (cut !== undefined) finish({ kind: cut });
      else if (code === 0) finish({ kind: 'queued', detail });
      else finish({ kind: 'exit', code, signal, detail });
    });
  });
}

/** Attempts until the retry policy says stop. Never throws. */
export async function queueNotice(options: QueueOptions): Promise<QueueReport> {
  const aborted = (): boolean => options.signal?.aborted === true;
  for (let attempt = 1; ; attempt++) {
    if (aborted()) return stopped(attempt - 1);
    const result = await queueOnce(options);
    const step = afterAttempt(attempt, result);
    if (step.action === 'finish') return { ...step, attempts: attempt };
    if (options.quiet !== true) log.warn('codex_queue_retry', { thread: options.thread, attempt, result: result.kind });
    if (aborted()) return stopped(attempt);
    const slept = await sleep(options.backoffMs ?? step.delayMs, true, { signal: options.signal }).catch(() => false);
    if (!slept) return stopped(attempt);
  }
}

function stopped(attempts: number): QueueReport {
  const reason = attempts === 0 ? 'the server stopped before the first attempt' : 'the server stopped before the next attempt';
  return { action: 'finish', outcome: 'delivery_failed', save: true, reason, attempts };
}

/** The last non-empty line of a child's output (codex prints its error last). */
function lastLine(output: string): string {
  const lines = output.split('\n').map((line) => line.trim()).filter((line) => line !== '' && !line.startsWith('WARNING: proceeding'));
  return (lines.at(-1) ?? '').slice(0, 300);
}
