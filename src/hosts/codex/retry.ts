/**
 * What to do after one `codex queue` attempt (DESIGN.md "Notices: waking the host", Codex), as a pure function.
 *
 * - exit 0: the notice is in Codex's queue (`host_queued`).
 * - a non-zero exit: Codex refused it; try again after 2 s, at most three attempts in all.
 * - a timeout (or the server stopping mid-attempt): Codex may or may not have queued it.
 *   Trying again could queue it twice, so stop there and say so (`delivery_unknown`).
 * - the notice is too large, or `codex` cannot be started: trying again cannot help.
 * Whatever did not end in `host_queued` is saved for a person to retry (failed_deliveries).
 */
import type { NoticeOutcome } from '../../mailbox/format.js';
import { MAX_NOTICE_BYTES } from '../../notices/notice.js';

export const MAX_ATTEMPTS = 3;
export const BACKOFF_MS = 2_000;
export const QUEUE_TIMEOUT_MS = 30_000;

export type AttemptResult =
  | { kind: 'queued'; detail: string }
  | { kind: 'exit'; code: number | null; signal: string | null; detail: string }
  | { kind: 'timeout' }
  /** the server stopped while codex queue ran; it was killed, with the same unknown outcome as a timeout */
  | { kind: 'interrupted' }
  | { kind: 'unstartable'; detail: string }
  | { kind: 'too_large'; bytes: number };

export type NextStep =
  | { action: 'retry'; delayMs: number }
  | { action: 'finish'; outcome: Extract<NoticeOutcome, 'host_queued' | 'delivery_failed' | 'delivery_unknown'>; save: boolean; reason: string };

/** `attempt` counts from 1: the attempt that produced `result`. */
export function afterAttempt(attempt: number, result: AttemptResult): NextStep {
  switch (result.kind) {
    case 'queued':
      return { action: 'finish', outcome: 'host_queued', save: false, reason: result.detail };
    case 'timeout':
      return {
        action: 'finish',
        outcome: 'delivery_unknown',
        save: true,
        reason: `codex queue did not finish within ${QUEUE_TIMEOUT_MS / 1000} s; the notice may or may not be queued, and a retry may queue it twice`,
      };
    case 'interrupted':
      return {
        action: 'finish',
        outcome: 'delivery_unknown',
        save: true,
        reason: 'the server stopped while codex queue was running; the notice may or may not be queued, and a retry may queue it twice',
      };
    case 'too_large':
      return { action: 'finish', outcome: 'delivery_failed', save: true, reason: `the notice is ${result.bytes} bytes, over the ${MAX_NOTICE_BYTES / 1024} KiB limit` };
    case 'unstartable':
      return { action: 'finish', outcome: 'delivery_failed', save: true, reason: `cannot run codex: ${result.detail}` };
    case 'exit': {
      const how = result.code !== null ? `exit ${result.code}` : `signal ${result.signal ?? 'unknown'}`;
      const reason = `codex queue failed (${how})${result.detail !== '' ? `: ${result.detail}` : ''}`;
      if (attempt < MAX_ATTEMPTS) return { action: 'retry', delayMs: BACKOFF_MS };
      return { action: 'finish', outcome: 'delivery_failed', save: true, reason: `${reason}, after ${attempt} attempts` };
    }
  }
}
