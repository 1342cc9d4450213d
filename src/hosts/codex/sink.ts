/**
 * The Codex sink: a notice goes to `codex queue` for the bound thread (queue.ts), and
 * whatever Codex did not take is saved for recovery (failed.ts). The outcome recorded on
 * the messages is exactly what is known: `host_queued`, `delivery_unknown` (timeout) or
 * `delivery_failed`. Saving or clearing a failure may fail; that is logged and never
 * changes the outcome or stops the next notice.
 */
import { log } from '../../log.js';
import type { NoticeSink } from '../../notices/notifier.js';
import type { FailedDeliveries } from './failed.js';
import { queueNotice, type QueueOptions } from './queue.js';
import { messageOf } from '../../errors.js';

export interface CodexSinkOptions extends Pick<QueueOptions, 'bin' | 'env' | 'timeoutMs' | 'backoffMs'> {
  thread: string;
  failed: FailedDeliveries;
}

export function codexQueueSink(options: CodexSinkOptions): NoticeSink {
  const stop = new AbortController();
  return {
    name: 'codex-queue',
    close: () => stop.abort(),
    deliver: async (notice, text) => {
      const report = await queueNotice({ ...options, message: text, signal: stop.signal });
      const kind = notice.kind === 'pairing' ? 'pairing' : 'notice';
      if (report.outcome === 'host_queued') {
        // Only an ordinary notice clears the ordinary slot; a pairing notice says nothing about mail.
        if (kind === 'notice') await options.failed.clearNotice().catch((err: unknown) => log.warn('failed_deliveries_unwritable', { path: options.failed.path, error: messageOf(err) }));
      } else {
        log.warn('codex_notice_failed', { thread: options.thread, notification_id: notice.notification_id, outcome: report.outcome, reason: report.reason });
        if (report.save) {
          await options.failed
            .save({
              kind,
              notification_id: notice.notification_id,
              thread: options.thread,
              message: text,
              outcome: report.outcome === 'delivery_unknown' ? 'delivery_unknown' : 'delivery_failed',
              reason: report.reason,
              attempts: report.attempts,
            })
            .catch((err: unknown) => log.warn('failed_deliveries_unwritable', { path: options.failed.path, error: messageOf(err) }));
        }
      }
      return report.outcome;
    },
  };
}
