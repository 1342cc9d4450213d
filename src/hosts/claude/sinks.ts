/**
 * Claude Code's notice sinks. The default appends notices to the session's inbox
 * (`inbox/<session>.jsonl`) and syncs them, for the Stop-hook listener
 * (`interlink-mcp wait`) to hand to Claude: appended is all we can know, `inbox_queued`.
 * With channels (INTERLINK_CHANNELS=1) they go out as channel notifications instead.
 */
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { appendInboxRecord } from './inbox.js';
import type { NoticeSink } from '../../notices/notifier.js';

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

/**
 * Notices as Claude channel notifications; meta keys are identifiers, as Claude requires.
 * Claude gives no receipt for them: a sent notification is `notification_sent`, nothing more.
 */
export function channelSink(server: Server): NoticeSink {
  return {
    name: 'claude-channel',
    deliver: async (notice, text) => {
      await server.notification({
        method: 'notifications/claude/channel',
        params: { content: text, meta: { notification_id: notice.notification_id, count: String(notice.count) } },
      });
      return 'notification_sent';
    },
  };
}
