/**
 * `interlink-mcp failed-deliveries`: Codex notices that `codex queue` did not take, for a
 * person at a terminal. Works without any agent session: it reads the identity and the
 * saved failures under the state root, and retries with the same executor the server
 * uses.
 */
import { keyPath, mailboxPath, stateDir } from '../../config/paths.js';
import { FailedDeliveries, failedSessions, type Failure } from '../../codex/failed.js';
import { codexBin } from '../../codex/queue.js';
import { discardFailure, readFailure, RECOVERY_NOTE, retryFailure } from '../../codex/recovery.js';
import { InterlinkError } from '../../errors.js';
import { loadIdentity } from '../../identity/identity.js';
import { Mailbox } from '../../mailbox/mailbox.js';
import { expectPositionals, parse, print } from '../args.js';

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

export async function failedDeliveries(argv: readonly string[]): Promise<void> {
  const [action, ...rest] = argv;
  const args = parse(rest, { json: { type: 'boolean' }, session: { type: 'string' } });
  const json = args.values.json === true;
  const session = typeof args.values.session === 'string' ? args.values.session : undefined;
  const identity = await loadIdentity(keyPath());
  const state = stateDir();
  const all = await stores(state, identity.key, session);
  switch (action) {
    case 'list': {
      expectPositionals(args, 0, 'interlink-mcp failed-deliveries list [--session THREAD]');
      const failures = (await Promise.all(all.map((store) => store.list()))).flat().sort((a, b) => a.at - b.at);
      print(json, { failures, note: RECOVERY_NOTE }, () => (failures.length === 0 ? 'no failed Codex deliveries' : `${failures.map(describe).join('\n')}\n\n${RECOVERY_NOTE}`));
      return;
    }
    case 'read': {
      const [id] = expectPositionals(args, 1, 'interlink-mcp failed-deliveries read <id>') as [string];
      const { failure } = await readFailure(await storeOf(all, id), id);
      print(json, { failure, note: RECOVERY_NOTE }, () => `${describe(failure)}\n  attempts ${failure.attempts}, retries ${failure.retries}\n\n${failure.message}`);
      return;
    }
    case 'retry': {
      const [id] = expectPositionals(args, 1, 'interlink-mcp failed-deliveries retry <id>') as [string];
      const result = await retryFailure(await storeOf(all, id), id, {
        bin: codexBin(),
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
        print(json, result, () => `queued notice ${result.notification_id} for thread ${result.thread}; the saved failure is gone`);
      } else {
        if (json) print(json, result, () => '');
        process.stderr.write(`interlink-mcp failed-deliveries: ${result.outcome}: ${result.reason} (still saved as ${result.id})\n`);
        process.exitCode = 1;
      }
      return;
    }
    case 'discard': {
      const [id] = expectPositionals(args, 1, 'interlink-mcp failed-deliveries discard <id>') as [string];
      const result = await discardFailure(await storeOf(all, id), id);
      print(json, result, () => `discarded ${id}. ${result.note}`);
      return;
    }
    default:
      throw new InterlinkError('usage', failedHelp);
  }
}
