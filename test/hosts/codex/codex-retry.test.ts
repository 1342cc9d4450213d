/**
 * The retry policy after a `codex queue` attempt (src/hosts/codex/retry.ts): every kind of
 * result at every attempt, and over any sequence of results.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { afterAttempt, BACKOFF_MS, MAX_ATTEMPTS, QUEUE_TIMEOUT_MS, type AttemptResult, type NextStep } from '../../../src/hosts/codex/retry.js';
import { MAX_NOTICE_BYTES } from '../../../src/notices/notice.js';

const QUEUED_LINE = 'Queued message m-1 for thread t.';
const queued: AttemptResult = { kind: 'queued', detail: QUEUED_LINE };
const exit1: AttemptResult = { kind: 'exit', code: 1, signal: null, detail: 'Error: No active session found matching t' };
const killed: AttemptResult = { kind: 'exit', code: null, signal: 'SIGKILL', detail: '' };
const timeout: AttemptResult = { kind: 'timeout' };
const interrupted: AttemptResult = { kind: 'interrupted' };
const unstartable: AttemptResult = { kind: 'unstartable', detail: 'spawn codex ENOENT' };
const tooLarge: AttemptResult = { kind: 'too_large', bytes: MAX_NOTICE_BYTES + 1 };

const ATTEMPTS = [1, 2, 3, 4];

describe('retry policy constants', () => {
  it('are the ones the spec gives: three attempts, 2 s apart, 30 s each', () => {
    expect(MAX_ATTEMPTS).toBe(3);
    expect(BACKOFF_MS).toBe(2_000);
    expect(QUEUE_TIMEOUT_MS).toBe(30_000);
  });
});

describe('afterAttempt', () => {
  it.each(ATTEMPTS)('attempt %i queued: host_queued, nothing saved, the reason is what codex printed', (attempt) => {
    expect(afterAttempt(attempt, queued)).toEqual({ action: 'finish', outcome: 'host_queued', save: false, reason: QUEUED_LINE });
  });

  it('a non-zero exit is retried after 2 s at attempts 1 and 2', () => {
    expect(afterAttempt(1, exit1)).toEqual({ action: 'retry', delayMs: BACKOFF_MS });
    expect(afterAttempt(2, exit1)).toEqual({ action: 'retry', delayMs: 2_000 });
    expect(afterAttempt(1, killed)).toEqual({ action: 'retry', delayMs: BACKOFF_MS });
    expect(afterAttempt(2, killed)).toEqual({ action: 'retry', delayMs: BACKOFF_MS });
  });

  it.each([3, 4])('a non-zero exit at attempt %i finishes delivery_failed and is saved', (attempt) => {
    const step = afterAttempt(attempt, exit1);
    expect(step).toMatchObject({ action: 'finish', outcome: 'delivery_failed', save: true });
    const reason = (step as Extract<NextStep, { action: 'finish' }>).reason;
    expect(reason).toContain('exit 1');
    expect(reason).toContain('Error: No active session found matching t');
    expect(reason).toContain(`after ${attempt} attempts`);
  });

  it('describes a child killed by a signal by its signal, and an unknown one as unknown', () => {
    expect(afterAttempt(3, killed)).toMatchObject({ outcome: 'delivery_failed', reason: 'codex queue failed (signal SIGKILL), after 3 attempts' });
    const neither: AttemptResult = { kind: 'exit', code: null, signal: null, detail: '' };
    expect(afterAttempt(3, neither)).toMatchObject({ reason: 'codex queue failed (signal unknown), after 3 attempts' });
  });

  it('leaves out an empty detail instead of printing a dangling colon', () => {
    const step = afterAttempt(3, { kind: 'exit', code: 2, signal: null, detail: '' });
    expect(step).toMatchObject({ reason: 'codex queue failed (exit 2), after 3 attempts' });
  });

  it.each(ATTEMPTS)('attempt %i timed out: delivery_unknown, saved, never retried', (attempt) => {
    const step = afterAttempt(attempt, timeout);
    expect(step).toMatchObject({ action: 'finish', outcome: 'delivery_unknown', save: true });
    const reason = (step as Extract<NextStep, { action: 'finish' }>).reason;
    // The person retrying must know that a retry may queue the notice twice.
    expect(reason).toMatch(/may or may not be queued/);
    expect(reason).toMatch(/twice/);
  });

  it.each(ATTEMPTS)('attempt %i cut short by the server stopping: delivery_unknown, saved, never retried, and says why', (attempt) => {
    const step = afterAttempt(attempt, interrupted);
    expect(step).toMatchObject({ action: 'finish', outcome: 'delivery_unknown', save: true });
    const reason = (step as Extract<NextStep, { action: 'finish' }>).reason;
    expect(reason).toMatch(/server stopped while codex queue was running/);
    expect(reason).toMatch(/twice/);
    expect(reason).not.toMatch(/30 s/);
  });

  it.each(ATTEMPTS)('attempt %i too large: delivery_failed, saved, not retried, with the size', (attempt) => {
    const step = afterAttempt(attempt, tooLarge);
    expect(step).toEqual({ action: 'finish', outcome: 'delivery_failed', save: true, reason: `the notice is ${MAX_NOTICE_BYTES + 1} bytes, over the 12 KiB limit` });
  });

  it.each(ATTEMPTS)('attempt %i unstartable: delivery_failed, saved, not retried, with the cause', (attempt) => {
    const step = afterAttempt(attempt, unstartable);
    expect(step).toEqual({ action: 'finish', outcome: 'delivery_failed', save: true, reason: 'cannot run codex: spawn codex ENOENT' });
  });

  it('only a non-zero exit before the last attempt is ever retried', () => {
    for (const attempt of ATTEMPTS) {
      for (const result of [queued, exit1, killed, timeout, unstartable, tooLarge]) {
        const retried = afterAttempt(attempt, result).action === 'retry';
        expect(retried, `${result.kind} at attempt ${attempt}`).toBe(result.kind === 'exit' && attempt < MAX_ATTEMPTS);
      }
    }
  });
});

const attemptResult: fc.Arbitrary<AttemptResult> = fc.oneof(
  fc.record({ kind: fc.constant('queued' as const), detail: fc.string({ maxLength: 20 }) }),
  fc.record({
    kind: fc.constant('exit' as const),
    code: fc.option(fc.integer({ min: 1, max: 255 }), { nil: null }),
    signal: fc.option(fc.constantFrom('SIGKILL', 'SIGTERM', 'SIGSEGV'), { nil: null }),
    detail: fc.string({ maxLength: 20 }),
  }),
  fc.constant({ kind: 'timeout' as const }),
  fc.constant({ kind: 'interrupted' as const }),
  fc.record({ kind: fc.constant('unstartable' as const), detail: fc.string({ maxLength: 20 }) }),
  fc.record({ kind: fc.constant('too_large' as const), bytes: fc.integer({ min: MAX_NOTICE_BYTES + 1, max: 1_000_000 }) }),
);

describe('the policy over any sequence of results', () => {
  it('finishes within three attempts, retries only exits after 2 s, and saves exactly what was not queued', () => {
    fc.assert(
      fc.property(fc.array(attemptResult, { minLength: 10, maxLength: 10 }), (results) => {
        let attempt = 1;
        let step = afterAttempt(attempt, results[0]!);
        while (step.action === 'retry') {
          expect(results[attempt - 1]!.kind).toBe('exit');
          expect(step.delayMs).toBe(BACKOFF_MS);
          attempt++;
          step = afterAttempt(attempt, results[attempt - 1]!);
        }
        expect(attempt).toBeLessThanOrEqual(MAX_ATTEMPTS);
        const last = results[attempt - 1]!;
        expect(step.outcome === 'host_queued').toBe(last.kind === 'queued');
        expect(step.outcome === 'delivery_unknown').toBe(last.kind === 'timeout' || last.kind === 'interrupted');
        expect(step.save).toBe(last.kind !== 'queued');
        // Three failed exits in a row always end the run at the third.
        if (results.slice(0, MAX_ATTEMPTS).every((r) => r.kind === 'exit')) expect(attempt).toBe(MAX_ATTEMPTS);
      }),
      { numRuns: 2_000 },
    );
  });
});
