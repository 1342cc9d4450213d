/**
 * The Claude default sink: notices are appended to the session's inbox
 * (`inbox/<session>.jsonl`) and synced, for the Stop-hook listener (`interlink-mcp wait`)
 * to hand to Claude. Appended is all we can know: `inbox_queued`.
 */
import { appendInboxRecord } from './inbox.js';
import type { NoticeSink } from './notifier.js';

/**
 * `session` is read at each notice: Claude's hooks may rebind the server to the session
 * id they see (after /clear the hooks' id changes, the server's spawn-time id does not).
 */
export function inboxSink(stateDir: string, session: () => string): NoticeSink {
  return {
    name: 'claude-inbox',
    deliver: async (notice, text) => {
      const listenerSession = session();
      await appendInboxRecord(stateDir, listenerSession, {
        v: 1,
        kind: 'notice',
        notification_id: notice.notification_id,
        session: listenerSession,
        count: notice.count,
        at: notice.at,
        text,
        ...(notice.mailbox !== undefined && { mailbox: notice.mailbox }),
      });
      return 'inbox_queued';
    },
  };
}
