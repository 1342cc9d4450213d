/**
 * `interlink-mcp failed-deliveries`: Codex notices that `codex queue` did not take, for a
 * person at a terminal. Works without any agent session: it reads the identity and the
 * saved failures under the state root, and retries with the same executor the server
 * uses.
 */
import type { Config } from '../../config/env.js';
import { mailboxPath } from '../../config/layout.js';
import { FailedDeliveries, failedSessions, type Failure } from '../../hosts/codex/failed.js';
import { discardFailure, FAILED_ACTIONS, readFailure, RECOVERY_NOTE, retryFailure, type FailedAction } from '../../hosts/codex/recovery.js';
import { InterlinkError } from '../../errors.js';
import { loadIdentity } from '../../identity/identity.js';
import { Mailbox } from '../../mailbox/mailbox.js';
import { withIsoTimes } from '../../mcp/result.js';
import { expectPositionals, parse, print, unknownAction } from '../args.js';

export const failedHelp = `usage: interlink-mcp failed-deliveries list [--session THREAD] [--json]
       interlink-mcp failed-deliveries read <id> [--json]
       interlink-mcp failed-deliveries retry <id> [--json]
       interlink-mcp failed-deliveries discard <id> [--json]

Codex notices that \`codex queue\` did not take, saved for 24 h under
failed/<identity>/<thread>.json. A notice only points at mail: the messages stay unread
in the mailbox whatever happens to it.
  list     every saved failure (of one thread with --session)
  read     one failure, with the notice text
  retry    hand the notice to \`codex queue\` again (up to 3 attempts); a failure whose
           outcome was unknown (a timeout) may then reach the thread twice
  discard  forget the saved failure; unread messages stay in the mailbox`;

/** The same JSON the `failed_deliveries` tool gives: an ISO 8601 string beside each time (`at_iso`, `expires_at_iso`). */
function show(json: boolean, data: object, human: () => string): void {
  print(json, withIsoTimes(data), human);
}

function when(ms: number): string {
  return new Date(ms).toISOString().replace('.000Z', 'Z');
}

function describe(f: Failure): string {
  return `${f.id}  thread ${f.thread}  ${f.outcome}  saved ${when(f.at)}, expires ${when(f.expires_at)}\n  ${f.reason}`;
}

async function stores(state: string, identity: string, session: string | undefined): Promise<FailedDeliveries[]> {
  const sessions = session !== undefined ? [session] : await failedSessions(state, identity);
  return sessions.map((s) => FailedDeliveries.forSession(state, identity, s));
}

/** The store holding failure `id` (ids are unique across sessions). */
async function storeOf(all: FailedDeliveries[], id: string): Promise<FailedDeliveries> {
  for (const store of all) if ((await store.get(id)) !== undefined) return store;
  throw new InterlinkError('unknown_failure', `no saved failure ${id}; it may have been retried, discarded or expired (see \`interlink-mcp failed-deliveries list\`)`);
}

/**
 * A retry Codex did not take. Thrown (not `process.exitCode = 1`): main() sets the exit
 * code from what the command returns or throws, and would overwrite it with 0.
 */
class RetryFailed extends Error {}

const USAGE: Record<FailedAction, { positionals: number; usage: string }> = {
  list: { positionals: 0, usage: 'interlink-mcp failed-deliveries list [--session THREAD]' },
  read: { positionals: 1, usage: 'interlink-mcp failed-deliveries read <id>' },
  retry: { positionals: 1, usage: 'interlink-mcp failed-deliveries retry <id>' },
  discard: { positionals: 1, usage: 'interlink-mcp failed-deliveries discard <id>' },
};

function isAction(value: string | undefined): value is FailedAction {
  return (FAILED_ACTIONS as readonly (string | undefined)[]).includes(value);
}

export async function failedDeliveries(argv: readonly string[], config: Config): Promise<void> {
  const [action, ...rest] = argv;
  // Usage errors first: a wrong action is exit 64 whether or not an identity exists.
  if (!isAction(action)) throw unknownAction(action, FAILED_ACTIONS);
  const args = parse(rest, { json: { type: 'boolean' }, session: { type: 'string' } });
  const [id = ''] = expectPositionals(args, USAGE[action].positionals, USAGE[action].usage);
  const json = args.values.json === true;
  const session = typeof args.values.session === 'string' ? args.values.session : undefined;
  const identity = await loadIdentity(config.keyPath);
  const state = config.stateDir;
  const all = await stores(state, identity.key, session);
  switch (action) {
    case 'list': {
      const failures = (await Promise.all(all.map((store) => store.list()))).flat().sort((a, b) => a.at - b.at);
      show(json, { failures, note: RECOVERY_NOTE }, () => (failures.length === 0 ? 'no failed Codex deliveries' : `${failures.map(describe).join('\n')}\n\n${RECOVERY_NOTE}`));
      return;
    }
    case 'read': {
      const { failure } = await readFailure(await storeOf(all, id), id);
      show(json, { failure, note: RECOVERY_NOTE }, () => `${describe(failure)}\n  attempts ${failure.attempts}, retries ${failure.retries}\n\n${failure.message}`);
      return;
    }
    case 'retry': {
      const result = await retryFailure(await storeOf(all, id), id, {
        bin: config.codexBin,
        onQueued: async (failure) => {
          // The notice now reached Codex: record it on the messages it covered, if it is
          // still their current notice (an older one changes nothing).
          const mailbox = await Mailbox.open(mailboxPath(state, identity.key, failure.thread));
          try {
            await mailbox.recordNoticeOutcome(failure.notification_id, 'host_queued');
          } finally {
            await mailbox.close();
          }
        },
      });
      if (result.outcome === 'host_queued') {
        show(json, result, () => `queued notice ${result.notification_id} for thread ${result.thread}; the saved failure is gone`);
      } else {
        if (json) show(json, result, () => '');
        // main() prints this as one line on stderr and exits 1.
        throw new RetryFailed(`${result.outcome}: ${result.reason.replace(/\s*\n\s*/g, ' ')} (still saved as ${result.id})`);
      }
      return;
    }
    case 'discard': {
      const result = await discardFailure(await storeOf(all, id), id);
      show(json, result, () => `discarded ${id}. ${result.note}`);
      return;
    }
  }
}
