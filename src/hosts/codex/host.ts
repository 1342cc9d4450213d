/**
 * A server in Codex mode: no session runs until a trusted hook binds the thread
 * (`bind_codex_session`), and then exactly one does, with the thread UUID as its session
 * id and `codex queue` as its notice sink. Every tool call is checked against the
 * binding when Codex says which thread it comes from.
 */
import type { Agent } from '../../agent/agent.js';
import { InterlinkError, messageOf } from '../../errors.js';
import { log } from '../../log.js';
import { FailedDeliveries } from './failed.js';
import { checkCallThread, decideBind, parseThreadId } from './thread.js';

export interface BindResult {
  thread_id: string;
  session_id: string;
  /** true for the call that bound the server; false for a repeat with the same thread */
  bound_now: boolean;
}

/** The Codex notices of the session `agent` runs that were not taken, saved for recovery (failed_deliveries). */
export function failedDeliveriesOf(agent: Pick<Agent, 'options' | 'identity' | 'session'>): FailedDeliveries {
  return FailedDeliveries.forSession(agent.options.stateDir, agent.identity.key, agent.session);
}

export class CodexHost {
  private binding: { thread: string; agent: Promise<Agent> } | undefined;
  private closed = false;

  /**
   * `bin` is the `codex` that notices run (INTERLINK_CODEX_BIN); `start` runs the session
   * for a thread, once (again only if it failed).
   */
  constructor(
    readonly bin: string,
    private readonly start: (thread: string) => Promise<Agent>,
  ) {}

  get thread(): string | undefined {
    return this.binding?.thread;
  }

  async bind(threadId: string, metaThread: string | undefined): Promise<BindResult> {
    if (this.closed) throw new InterlinkError('not_bound', 'this Interlink server is shutting down');
    const thread = parseThreadId(threadId);
    const decision = decideBind(this.binding?.thread, thread, metaThread);
    if (decision.action === 'refuse') throw decision.error;
    let boundNow = false;
    if (decision.action === 'bind') {
      const agent = this.start(thread);
      const binding = { thread, agent };
      this.binding = binding;
      boundNow = true;
      // A session that could not start (storage, identity) leaves the server unbound, so
      // the next hook call tries again.
      agent.catch((err: unknown) => {
        if (this.binding === binding) this.binding = undefined;
        log.error('codex_bind_failed', { thread, error: messageOf(err) });
      });
      log.info('codex_bound', { thread });
    }
    await this.binding!.agent;
    return { thread_id: thread, session_id: thread, bound_now: boundNow };
  }

  /** The running session; before binding, a `not_bound` error a person can act on. */
  async agent(): Promise<Agent> {
    if (this.binding === undefined) {
      throw new InterlinkError(
        'not_bound',
        "this Interlink server is waiting for Codex's hooks to bind it to a thread (bind_codex_session); check that the Interlink hooks are installed and trusted (codex/README.md)",
      );
    }
    return this.binding.agent;
  }

  /** Refuses a tool call whose `_meta` names another thread. */
  checkCall(metaThread: string | undefined): void {
    const error = checkCallThread(this.binding?.thread, metaThread);
    if (error !== undefined) throw error;
  }

  async close(): Promise<void> {
    this.closed = true;
    const agent = await this.binding?.agent.catch(() => undefined);
    await agent?.close();
  }
}
