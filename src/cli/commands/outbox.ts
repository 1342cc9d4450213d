/**
 * `interlink-mcp outbox drop <msg_id>`: a person drops a message no relay has accepted
 * yet, as `cancel_pending` does, from whichever session of this identity sent it. The
 * outbox is a shared journaled store, so a running server of that session sees the drop
 * on its next pass and stops offering the message.
 */
import { readdir } from 'node:fs/promises';
import type { Config } from '../../config/env.js';
import { identityDir, outboxPath, sessionOfFile } from '../../config/layout.js';
import { InterlinkError } from '../../errors.js';
import { loadIdentity } from '../../identity/identity.js';
import { Outbox, outboundState } from '../../outbox/outbox.js';
import { expectPositionals, parse, print, unknownAction } from '../args.js';

export const outboxHelp = `usage: interlink-mcp outbox drop <msg_id> [--json]

Messages this identity sent that no relay has accepted yet wait in its outboxes
(outbox/<identity>/<session>.json) and are offered again and again.
  drop  stop offering one: it is recorded as canceled (message_status shows it), and a
        message a relay already took cannot be called back`;

async function sessionsWithOutbox(state: string, identity: string): Promise<string[]> {
  const names = await readdir(identityDir(state, 'outbox', identity)).catch(() => [] as string[]);
  return [...new Set(names.flatMap((n) => sessionOfFile(n) ?? []))].sort();
}

export async function outbox(argv: readonly string[], config: Config): Promise<void> {
  const [action, ...rest] = argv;
  if (action !== 'drop') throw unknownAction(action, ['drop']);
  const args = parse(rest, { json: { type: 'boolean' } });
  const [msgId] = expectPositionals(args, 1, 'interlink-mcp outbox drop <msg_id>') as [string];
  const identity = await loadIdentity(config.keyPath);
  const state = config.stateDir;
  for (const session of await sessionsWithOutbox(state, identity.key)) {
    const store = await Outbox.open(outboxPath(state, identity.key, session));
    try {
      if ((await store.get(msgId)) === undefined) continue;
      const { ended, record } = await store.end(msgId, 'canceled', 'dropped with `interlink-mcp outbox drop`');
      if (!ended) throw new InterlinkError('not_pending', `message ${msgId} is ${record === undefined ? 'gone' : outboundState(record)}, not pending; only a message no relay has accepted can be dropped`);
      print(args.values.json === true, { msg_id: msgId, session, state: 'canceled' }, () => `Dropped ${msgId} (session ${session}): it will not be offered again (message_status says whether a relay took an earlier offer).`);
      return;
    } finally {
      await store.close();
    }
  }
  throw new InterlinkError('unknown_message', `no message ${msgId} in this identity's outboxes`);
}
