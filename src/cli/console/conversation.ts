/**
 * A conversation with one peer as the console shows it: what this identity received from
 * it (every session's mailbox) and sent to it (every session's outbox), both directions
 * together, oldest first by the sender's signed time, grouped by task. Each message
 * carries its delivery states with their times; a state the receiver reported in a signed
 * receipt is marked as reported, at the receiver's clock. An outbox keeps an accepted
 * message 48 hours (OUTBOX_RETENTION_MS), so older sent messages are no longer listed:
 * the page says so.
 */
import { identityDir, sessionFileIn } from '../../config/layout.js';
import { replyToSession } from '../../envelope/envelope.js';
import { parseRoute } from '../../envelope/route.js';
import { Mailbox } from '../../mailbox/mailbox.js';
import { currentState } from '../../mailbox/record-state.js';
import { Outbox, shownState, type OutboxRecord } from '../../outbox/outbox.js';
import type { StoredRecord } from '../../mailbox/format.js';
import { sessionsIn } from '../session-listing.js';
import type { ConsoleContext } from './snapshot.js';

export interface StateStep {
  state: string;
  at: number;
  /** Reported by the receiver in a signed receipt (its clock), not observed here. */
  reported?: boolean;
}

export interface ConversationMessage {
  direction: 'sent' | 'received';
  msg_id: string;
  ts: number;
  /** This identity's session that sent or holds it. */
  session: string;
  /** The other side's session: the target of a sent message, the reply route of a received one. */
  their_session?: string;
  task_id?: string;
  status?: string;
  in_reply_to?: string;
  text: string;
  state: string;
  superseded?: boolean;
  /** The group id of a message sent to several recipients (a sent copy, or one received as such). */
  group?: string;
  history: StateStep[];
}

export interface TaskThread {
  /** undefined: messages that belong to no task. */
  task_id?: string;
  messages: ConversationMessage[];
}

function sentHistory(record: OutboxRecord): StateStep[] {
  const own: StateStep[] = record.states.map((s) => ({ state: s.state, at: s.at }));
  const accepted = record.states.some((s) => s.state === 'bus_accepted');
  // An acceptance is recorded on the record's relays list; its first time is the state's.
  if (!accepted && record.accepted_by.length > 0) own.push({ state: 'bus_accepted', at: record.states[record.states.length - 1]!.at });
  return [...own, ...(record.remote ?? []).map((r) => ({ state: r.state, at: r.at, reported: true }))];
}

function sentMessage(session: string, record: OutboxRecord): ConversationMessage {
  const e = record.envelope;
  const target = parseRoute(record.route)?.session;
  return {
    direction: 'sent',
    msg_id: e.msg_id,
    ts: e.ts,
    session,
    ...(target !== undefined && { their_session: target }),
    ...(e.task_id !== undefined && { task_id: e.task_id }),
    ...(e.status !== undefined && { status: e.status }),
    ...(e.in_reply_to !== undefined && { in_reply_to: e.in_reply_to }),
    text: e.text,
    state: shownState(record),
    ...(record.group !== undefined && { group: record.group.id }),
    history: sentHistory(record),
  };
}

function receivedMessage(session: string, record: StoredRecord): ConversationMessage {
  const e = record.envelope;
  const replySession = replyToSession(e);
  return {
    direction: 'received',
    msg_id: e.msg_id,
    ts: e.ts,
    session,
    ...(replySession !== undefined && { their_session: replySession }),
    ...(e.task_id !== undefined && { task_id: e.task_id }),
    ...(e.status !== undefined && { status: e.status }),
    ...(e.in_reply_to !== undefined && { in_reply_to: e.in_reply_to }),
    text: e.text,
    state: currentState(record),
    ...(record.superseded_by !== undefined && { superseded: true }),
    ...(e.group !== undefined && { group: e.group }),
    history: record.states.map((s) => ({ state: s.state, at: s.at })),
  };
}

/** Every message between this identity and `peerKey`, oldest first (stable: each sender's in its order). */
export async function readConversation(ctx: ConsoleContext, peerKey: string): Promise<ConversationMessage[]> {
  const { stateDir: state } = ctx.config;
  const me = ctx.identity.key;
  const messages: ConversationMessage[] = [];
  const mailboxes = identityDir(state, 'mailbox', me);
  for (const session of await sessionsIn(mailboxes)) {
    const mailbox = await Mailbox.open(sessionFileIn(mailboxes, session), { readOnly: true });
    for (const record of await mailbox.all()) if (record.envelope.from === peerKey) messages.push(receivedMessage(session, record));
  }
  const outboxes = identityDir(state, 'outbox', me);
  for (const session of await sessionsIn(outboxes)) {
    const outbox = await Outbox.open(sessionFileIn(outboxes, session), { readOnly: true });
    for (const record of await outbox.all()) if (record.envelope.to === peerKey) messages.push(sentMessage(session, record));
  }
  return messages.sort((a, b) => a.ts - b.ts);
}

/** Messages grouped by task, in the order each task began; messages of no task first. */
export function byTask(messages: readonly ConversationMessage[]): TaskThread[] {
  const threads = new Map<string | undefined, ConversationMessage[]>();
  for (const m of messages) threads.set(m.task_id, [...(threads.get(m.task_id) ?? []), m]);
  const loose = threads.get(undefined);
  threads.delete(undefined);
  return [...(loose === undefined ? [] : [{ messages: loose }]), ...[...threads].map(([task_id, list]) => ({ ...(task_id !== undefined && { task_id }), messages: list }))];
}
