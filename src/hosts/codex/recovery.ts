/**
 * `failed_deliveries` (the MCP tool) and `interlink-mcp failed-deliveries` (people):
 * list, read, retry or discard saved Codex notice failures. Retrying runs the same
 * executor under the same policy (retry.ts) as the notifier; discarding removes the
 * saved failure, never mail.
 */
import { InterlinkError, messageOf } from '../../errors.js';
import type { FailedDeliveries, Failure } from './failed.js';
import { queueNotice, type QueueOptions, type QueueReport } from './queue.js';

export const FAILED_ACTIONS = ['list', 'read', 'retry', 'discard'] as const;
export type FailedAction = (typeof FAILED_ACTIONS)[number];

export const RECOVERY_NOTE =
  'A failed notice only points at mail: the messages stay unread in the mailbox, and receive_messages (or conversation_history) reads them whatever happened to the notice.';

export interface RecoveryOptions extends Pick<QueueOptions, 'bin' | 'env' | 'timeoutMs' | 'backoffMs' | 'signal'> {
  /** Called after a retried notice was queued (to record host_queued on its messages). */
  onQueued?: (failure: Failure) => Promise<void>;
}

export type RetryResult = {
  id: string;
  notification_id: string;
  thread: string;
  outcome: QueueReport['outcome'];
  reason: string;
  attempts: number;
  still_saved: boolean;
  /** Bookkeeping after a queued notice that did not work out; the notice was queued regardless. */
  warning?: string;
};

async function find(store: FailedDeliveries, id: string | undefined): Promise<Failure> {
  if (id === undefined) throw new InterlinkError('usage', 'this action needs the id of a saved failure (see list)');
  const failure = await store.get(id);
  if (failure === undefined) throw new InterlinkError('unknown_failure', `no saved failure ${id}; it may have been retried, discarded or expired (see list)`);
  return failure;
}

export async function listFailures(store: FailedDeliveries): Promise<{ failures: Failure[]; note: string }> {
  return { failures: await store.list(), note: RECOVERY_NOTE };
}

export async function readFailure(store: FailedDeliveries, id: string | undefined): Promise<{ failure: Failure; note: string }> {
  return { failure: await find(store, id), note: RECOVERY_NOTE };
}

export async function discardFailure(store: FailedDeliveries, id: string | undefined): Promise<{ id: string; discarded: true; note: string }> {
  const failure = await find(store, id);
  if (!(await store.discard(failure.id))) throw new InterlinkError('unknown_failure', `no saved failure ${failure.id}`);
  return { id: failure.id, discarded: true, note: 'Only the saved failure was removed; unread messages stay in the mailbox.' };
}

/**
 * Hands the saved notice to `codex queue` again (up to three attempts). Queued: the
 * failure is removed. Otherwise it stays, with the new reason; a timeout again means the
 * notice may now be queued twice.
 */
export async function retryFailure(store: FailedDeliveries, id: string | undefined, options: RecoveryOptions): Promise<RetryResult> {
  const failure = await find(store, id);
  // Quiet: `interlink-mcp failed-deliveries retry` fails with one line on stderr, and the
  // result (reason, attempts) says everything a log line per attempt would.
  const report = await queueNotice({ bin: options.bin, env: options.env, timeoutMs: options.timeoutMs, backoffMs: options.backoffMs, thread: failure.thread, message: failure.message, quiet: true, signal: options.signal });
  const base = { id: failure.id, notification_id: failure.notification_id, thread: failure.thread, outcome: report.outcome, reason: report.reason, attempts: report.attempts };
  if (report.outcome === 'host_queued') {
    // Codex has the notice now; what follows is bookkeeping, and its failure must not
    // make a delivered notice look failed.
    const warnings: string[] = [];
    const removed = await store.discard(failure.id).catch((err: unknown) => {
      warnings.push(`the saved failure could not be removed (${messageOf(err)})`);
      return false;
    });
    await options.onQueued?.(failure).catch((err: unknown) => warnings.push(`host_queued could not be recorded on its messages (${messageOf(err)})`));
    return { ...base, still_saved: !removed, ...(warnings.length > 0 && { warning: warnings.join('; ') }) };
  }
  await store.retried(failure.id, report.outcome === 'delivery_unknown' ? 'delivery_unknown' : 'delivery_failed', report.reason, report.attempts);
  return { ...base, still_saved: true };
}

export async function runFailedAction(store: FailedDeliveries, action: FailedAction, id: string | undefined, options: RecoveryOptions): Promise<object> {
  switch (action) {
    case 'list':
      return listFailures(store);
    case 'read':
      return readFailure(store, id);
    case 'retry':
      return retryFailure(store, id, options);
    case 'discard':
      return discardFailure(store, id);
  }
}
