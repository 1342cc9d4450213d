/**
 * What a session shows of a group it sent (groups.ts has the rules): the panel of each
 * recipient's delivery and answer, and the group's thread. Read from the outbox that holds
 * the copies and the mailbox their answers came to; nothing here is stored.
 */
import type { Envelope } from '../envelope/envelope.js';
import { parseRoute } from '../envelope/route.js';
import { InterlinkError } from '../errors.js';
import type { StoredRecord } from '../mailbox/format.js';
import type { Mailbox } from '../mailbox/mailbox.js';
import { currentState } from '../mailbox/record-state.js';
import { shownState, type Outbox, type OutboxGroup, type OutboxRecord } from '../outbox/outbox.js';
import type { PeerTable } from '../peers/peers.js';
import type { RosterSighting } from './awaiting.js';
import { answersOf, outcomeOf, tally, type Outcome, type PanelCopy, type PanelReply } from './groups.js';
import { messageStatus, shownThread, taskFields, type HistoryEntry, type ThreadEntry } from './reading.js';

/** How much of an answer's text the panel shows; the whole message is in receive_messages and the thread. */
export const PANEL_TEXT_CHARS = 2_000;

/** A session's stores that may hold a group: its own, or an ended session's it took. */
export interface GroupStores {
  outbox: Outbox;
  mailbox: Mailbox;
  /** Set for an ended session's stores. */
  session?: string;
}

export interface PanelMessage {
  msg_id: string;
  status?: string;
  ts: number;
  text?: string;
  text_truncated?: true;
}

export interface PanelLine {
  to: string;
  key: string;
  outcome: Outcome;
  msg_id?: string;
  session?: string;
  /** The copy's delivery state, as message_status shows it. */
  delivery?: string;
  history?: HistoryEntry[];
  answer?: PanelMessage;
  /** Terminal answers after the first: visible, not counted. */
  duplicates?: PanelMessage[];
  /** The newest reply that is not an answer (a question, progress), when newer than the answer. */
  latest?: PanelMessage;
  error?: { code: string; message: string };
}

export interface GroupPanel {
  group_id: string;
  sent_at: number;
  task_id?: string;
  /** Recipients at each outcome. */
  counts: Record<Outcome, number>;
  /** True when no recipient is still expected to answer (none `waiting` or `needs_input`). */
  settled: boolean;
  recipients: PanelLine[];
  /** The session whose outbox holds the group, when it is an ended session this one took. */
  session?: string;
}

/** The group `id` and the stores that hold it; `unknown_group` when none does. */
export async function findGroup(stores: readonly GroupStores[], id: string): Promise<{ group: OutboxGroup; stores: GroupStores }> {
  for (const s of stores) {
    const group = await s.outbox.group(id);
    if (group !== undefined) return { group, stores: s };
  }
  throw new InterlinkError('unknown_group', `no group ${id} in this session's outbox (a group is kept 48 hours after its last copy settled)`);
}

const copiesOf = (group: OutboxGroup) => group.records.filter((r) => r.group?.follow_up !== true);

function panelCopy(record: OutboxRecord): PanelCopy {
  const e = record.envelope;
  return { key: e.to, msg_id: e.msg_id, sent_at: record.created_at, ...(e.task_id !== undefined && { task_id: e.task_id }) };
}

function panelReply(record: StoredRecord): PanelReply {
  const e = record.envelope;
  return { from: e.from, msg_id: e.msg_id, ts: e.ts, received_at: record.received_at, ...taskFields(e) };
}

/** What the recipients sent this session: the replies the panel links to copies. */
async function repliesFrom(mailbox: Mailbox, keys: Iterable<string>): Promise<Map<string, StoredRecord>> {
  const byId = new Map<string, StoredRecord>();
  for (const key of new Set(keys)) for (const record of await mailbox.history(key, { limit: Number.MAX_SAFE_INTEGER })) byId.set(record.envelope.msg_id, record);
  return byId;
}

function shown(envelope: Envelope, withText: boolean): PanelMessage {
  const cut = withText && envelope.text.length > PANEL_TEXT_CHARS;
  return {
    msg_id: envelope.msg_id,
    ...(envelope.status !== undefined && { status: envelope.status }),
    ts: envelope.ts,
    ...(withText && { text: cut ? envelope.text.slice(0, PANEL_TEXT_CHARS) : envelope.text }),
    ...(cut && { text_truncated: true as const }),
  };
}

/** The panel of the group `id`: per recipient, where its copy is and what it answered. */
export async function groupPanel(stores: readonly GroupStores[], id: string, table: PeerTable, sighting: () => Promise<RosterSighting>): Promise<GroupPanel> {
  const { group, stores: where } = await findGroup(stores, id);
  const copies = copiesOf(group);
  const replies = await repliesFrom(where.mailbox, copies.map((r) => r.envelope.to));
  const found = answersOf(copies.map(panelCopy), [...replies.values()].map(panelReply));
  const name = (key: string) => table.petnameOf(key) ?? key;
  const lines: PanelLine[] = [];
  for (const copy of copies) {
    const status = await messageStatus(where.outbox, where.mailbox, copy.envelope.msg_id, sighting);
    const answers = found.get(copy.envelope.msg_id);
    const message = (reply: PanelReply | undefined, withText: boolean) => {
      const envelope = reply === undefined ? undefined : replies.get(reply.msg_id)?.envelope;
      return envelope === undefined ? undefined : shown(envelope, withText);
    };
    const answer = message(answers?.answer, true);
    const latest = message(answers?.latest, true);
    const duplicates = (answers?.duplicates ?? []).map((d) => message(d, false)).filter((d) => d !== undefined);
    lines.push({
      to: name(copy.envelope.to),
      key: copy.envelope.to,
      outcome: outcomeOf(status.state, answers),
      msg_id: copy.envelope.msg_id,
      session: parseRoute(copy.route)?.session ?? '',
      delivery: status.state,
      history: status.history,
      ...(answer !== undefined && { answer }),
      ...(duplicates.length > 0 && { duplicates }),
      ...(latest !== undefined && { latest }),
    });
  }
  for (const u of group.unrouted) lines.push({ to: name(u.to), key: u.to, outcome: 'not_sent', error: { code: u.code, message: u.reason } });
  const counts = tally(lines.map((l) => l.outcome));
  const taskId = copies[0]?.envelope.task_id;
  return {
    group_id: id,
    sent_at: group.at,
    ...(taskId !== undefined && { task_id: taskId }),
    counts,
    settled: counts.waiting + counts.needs_input === 0,
    recipients: lines,
    ...(where.session !== undefined && { session: where.session }),
  };
}

/**
 * The group's thread, oldest first: its copies and follow-ups, and every reply linked to
 * a copy. `consume` acknowledges exactly the inbound messages returned.
 */
export async function groupThread(stores: readonly GroupStores[], id: string, table: PeerTable, limit: number, consume: boolean) {
  const { group, stores: where } = await findGroup(stores, id);
  const copies = copiesOf(group);
  const replies = await repliesFrom(where.mailbox, copies.map((r) => r.envelope.to));
  const found = answersOf(copies.map(panelCopy), [...replies.values()].map(panelReply));
  const linked = new Set([...found.values()].flatMap((a) => a.replies.map((r) => r.msg_id)));
  const inbound = [...linked].map((msgId) => replies.get(msgId)!);
  const merged: ThreadEntry[] = [
    ...group.records.map((r) => ({ direction: 'outbound' as const, envelope: r.envelope, state: shownState(r) as string })),
    ...inbound.map((r) => ({ direction: 'inbound' as const, envelope: r.envelope, state: currentState(r) })),
  ]
    .sort((a, b) => a.envelope.ts - b.envelope.ts)
    .slice(-limit);
  const name = (key: string) => table.petnameOf(key) ?? key;
  const party = (m: ThreadEntry): Record<string, string> => (m.direction === 'outbound' ? { to: name(m.envelope.to) } : { from: name(m.envelope.from) });
  return { group_id: id, messages: await shownThread(where.mailbox, merged, consume, party) };
}
