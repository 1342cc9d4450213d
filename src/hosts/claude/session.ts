/**
 * Which session id Claude's hooks use for this server's inbox. The server runs under its
 * spawn-time session id (its mailbox and route); after /clear, --resume or a fork the id
 * Claude gives its hooks changes, and the plugin's hooks report it (`bind_claude_session`).
 * Notices follow the hooks' id, so they reach the listener Claude starts for it.
 */
import type { Agent } from '../../agent/agent.js';
import { checkSafeName } from '../../config/paths.js';

export interface ClaudeBindResult {
  session_id: string;
  mailbox_session: string;
  changed: boolean;
}

export class ClaudeSession {
  private current: string;

  constructor(private readonly agent: Pick<Agent, 'session' | 'renotify'>) {
    this.current = agent.session;
  }

  /** Where Claude's listener looks for this session's notices. */
  get listenerSession(): string {
    return this.current;
  }

  /**
   * The current reservation is reset on a change, so the notice it may have left in the
   * old inbox is sent again to the new one.
   */
  async bind(sessionId: string): Promise<ClaudeBindResult> {
    sessionId = checkSafeName(sessionId, 'session id');
    const changed = sessionId !== this.current;
    if (changed) {
      this.current = sessionId;
      await this.agent.renotify();
    }
    return { session_id: sessionId, mailbox_session: this.agent.session, changed };
  }
}
