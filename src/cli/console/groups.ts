/**
 * Messages this identity sent to several recipients at once, as the console shows them:
 * every session's groups (its outbox) with their panels (agent/group-views.ts, the same
 * derivation `message_status` with a group id uses), read-only. A group is kept as long
 * as its copies, 48 hours after the last one settled.
 */
import { identityDir, sessionFileIn } from '../../config/layout.js';
import { groupPanel, type GroupPanel, type GroupStores } from '../../agent/group-views.js';
import type { RosterSighting } from '../../agent/awaiting.js';
import { Mailbox } from '../../mailbox/mailbox.js';
import { Outbox } from '../../outbox/outbox.js';
import type { PeerTable } from '../../peers/peers.js';
import { sessionsIn } from '../session-listing.js';
import { sighting, type ConsoleContext } from './snapshot.js';

export interface GroupRow {
  panel: GroupPanel;
  /** The session that sent it. */
  session: string;
  /** The first line of what was sent, for the list. */
  text: string;
}

/** Each session's stores, opened read-only, with its session id. */
async function sessionStores(ctx: ConsoleContext): Promise<(GroupStores & { session: string })[]> {
  const me = ctx.identity.key;
  const outboxes = identityDir(ctx.config.stateDir, 'outbox', me);
  const mailboxes = identityDir(ctx.config.stateDir, 'mailbox', me);
  const stores: (GroupStores & { session: string })[] = [];
  for (const session of await sessionsIn(outboxes)) {
    const outbox = await Outbox.open(sessionFileIn(outboxes, session), { readOnly: true });
    const mailbox = await Mailbox.open(sessionFileIn(mailboxes, session), { readOnly: true });
    stores.push({ outbox, mailbox, session });
  }
  return stores;
}

/** Asks the relays' rosters at most once per page, and only if a copy waits on a relay. */
function oneSighting(ctx: ConsoleContext): () => Promise<RosterSighting> {
  let seen: Promise<RosterSighting> | undefined;
  return () => (seen ??= sighting(ctx));
}

/** The group ids a session's outbox holds, each with the text of its first copy. */
async function groupsIn(outbox: Outbox): Promise<Map<string, string>> {
  const ids = new Map<string, string>();
  for (const record of await outbox.all()) {
    if (record.group !== undefined && record.group.follow_up !== true && !ids.has(record.group.id)) ids.set(record.group.id, record.envelope.text);
  }
  return ids;
}

function row(panel: GroupPanel, session: string, text: string): GroupRow {
  return { panel, session, text: text.split('\n', 1)[0] ?? '' };
}

/** Every group this identity's sessions sent, newest first. */
export async function readGroups(ctx: ConsoleContext, table: PeerTable): Promise<GroupRow[]> {
  const seen = oneSighting(ctx);
  const rows: GroupRow[] = [];
  for (const stores of await sessionStores(ctx)) {
    for (const [id, text] of await groupsIn(stores.outbox)) rows.push(row(await groupPanel([{ outbox: stores.outbox, mailbox: stores.mailbox }], id, table, seen), stores.session, text));
  }
  return rows.sort((a, b) => b.panel.sent_at - a.panel.sent_at);
}

/** One group's panel (only that one is derived), or undefined when no session of this identity holds it. */
export async function readGroup(ctx: ConsoleContext, table: PeerTable, id: string): Promise<GroupRow | undefined> {
  for (const stores of await sessionStores(ctx)) {
    const text = (await groupsIn(stores.outbox)).get(id);
    if (text !== undefined) return row(await groupPanel([{ outbox: stores.outbox, mailbox: stores.mailbox }], id, table, oneSighting(ctx)), stores.session, text);
  }
  return undefined;
}
