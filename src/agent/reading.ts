/**
 * What a session shows of its messages: the inbox view of a stored record, one message's
 * state wherever it is, and the conversation with one peer in both directions. Reads
 * only, except `history` with `consume`, which acknowledges exactly what it returns.
 */
import { replyToSession, type Envelope, type Status } from '../envelope/envelope.js';
import { receiptOf, type Receipt } from '../envelope/receipt.js';
import { InterlinkError } from '../errors.js';
import type { StoredRecord } from '../mailbox/format.js';
import type { Mailbox } from '../mailbox/mailbox.js';
import { currentState } from '../mailbox/record-state.js';
import { shownState, type OutboxRecord, type Outbox } from '../outbox/outbox.js';
import { AWAITING_SESSION, awaitingOf, type Awaiting, type RosterSighting } from './awaiting.js';

export interface InboxMessage {
  sender: string;
  peer?: string;
  msg_id: string;
  text: string;
  ts: number;
  task_id?: string;
  status?: Status;
  in_reply_to?: string;
  reply_to?: string;
  /** The session the message was signed for, when that is not this one: an ended session whose mail this one took (agent/succession.ts). */
  to_session?: string;
  /** Set when the sender sent this message to several recipients at once: the id their copies share (signed). */
  group_id?: string;
  receipt: Receipt;
}

/** The task fields that are present, and only those. */
export function taskFields(fields: Partial<Pick<Envelope, 'task_id' | 'status' | 'in_reply_to'>>) {
  return {
    ...(fields.task_id !== undefined && { task_id: fields.task_id }),
    ...(fields.status !== undefined && { status: fields.status }),
    ...(fields.in_reply_to !== undefined && { in_reply_to: fields.in_reply_to }),
  };
}

export function inboxMessage(record: StoredRecord): InboxMessage {
  const e = record.envelope;
  return {
    sender: e.from,
    ...(record.peer !== undefined && { peer: record.peer }),
    msg_id: e.msg_id,
    text: e.text,
    ts: e.ts,
    ...taskFields(e),
    // A version 2 reply_to is an unsigned hint: one naming a key other than the sender's is
    // treated as absent (docs/PROTOCOL.md "Fields"), so it is not shown as the way to answer.
    ...(replyToSession(e) !== undefined && { reply_to: e.reply_to }),
    ...(e.group !== undefined && { group_id: e.group }),
    receipt: receiptOf(e),
  };
}

/** A history entry; `reported_by: "receiver"` marks a state the receiver reported in a signed receipt, at its clock. */
export interface HistoryEntry {
  state: string;
  at: number;
  reason?: string;
  code?: string;
  reported_by?: 'receiver';
}

/** The sender's history of one message: its own states, then what the receiver reported. */
export function outboundHistory(record: OutboxRecord): HistoryEntry[] {
  return [
    ...record.states,
    ...(record.remote ?? []).map((r) => ({ state: r.state, at: r.at, ...(r.code !== undefined && { code: r.code }), reported_by: 'receiver' as const })),
  ];
}

export interface MessageStatus {
  msg_id: string;
  direction: 'outbound' | 'inbound';
  state: string;
  history: HistoryEntry[];
  /** With `awaiting_session`: the session the relay holds the message for, since when, and who takes it. */
  awaiting?: Awaiting;
}

/**
 * One message's state and history, from this session's outbox or mailbox. An accepted
 * message with no report yet is asked about against the rosters (`sighting`): one waiting
 * for a session on no roster shows as `awaiting_session` (awaiting.ts), never recorded.
 */
export async function messageStatus(outbox: Outbox, mailbox: Mailbox, msgId: string, sighting?: () => Promise<RosterSighting>): Promise<MessageStatus> {
  const outbound = await outbox.get(msgId);
  if (outbound) {
    const shown = { msg_id: msgId, direction: 'outbound' as const, state: shownState(outbound) as string, history: outboundHistory(outbound) };
    const awaiting = shown.state === 'bus_accepted' && sighting !== undefined ? awaitingOf(outbound, await sighting()) : undefined;
    return awaiting === undefined ? shown : { ...shown, state: AWAITING_SESSION, awaiting };
  }
  const inbound = await mailbox.findByMsgId(msgId);
  if (inbound) return { msg_id: msgId, direction: 'inbound', state: currentState(inbound), history: inbound.states };
  throw new InterlinkError('unknown_message', `no message ${msgId} in this session's outbox or mailbox`);
}

/** One message of a thread as the stores hold it, and its state. */
export interface ThreadEntry {
  direction: 'inbound' | 'outbound';
  envelope: Envelope;
  state: string;
}

/**
 * A thread as the tools show it, oldest first as given. `consume` first acknowledges
 * exactly the inbound messages in it; `party` adds who each message is to or from.
 */
export async function shownThread(mailbox: Mailbox, entries: ThreadEntry[], consume: boolean, party?: (entry: ThreadEntry) => Record<string, string>) {
  if (consume) {
    const receipts = entries.filter((m) => m.direction === 'inbound' && m.state !== 'receiver_acknowledged').map((m) => receiptOf(m.envelope));
    if (receipts.length > 0) await mailbox.acknowledge(receipts);
    for (const m of entries) if (m.direction === 'inbound') m.state = 'receiver_acknowledged';
  }
  return entries.map((m) => ({
    direction: m.direction,
    ...party?.(m),
    msg_id: m.envelope.msg_id,
    text: m.envelope.text,
    ts: m.envelope.ts,
    state: m.state,
    ...taskFields(m.envelope),
    ...(m.envelope.group !== undefined && { group_id: m.envelope.group }),
    ...(m.direction === 'inbound' && { receipt: receiptOf(m.envelope) }),
  }));
}

/** Both directions with the peer `key`, oldest first; `consume` acknowledges exactly the inbound ones returned. */
export async function conversation(outbox: Outbox, mailbox: Mailbox, key: string, limit: number, consume: boolean) {
  const inbound = await mailbox.history(key, { limit });
  const outbound = (await outbox.all()).filter((r) => r.envelope.to === key).slice(-limit);
  const merged: ThreadEntry[] = [
    ...inbound.map((r) => ({ direction: 'inbound' as const, envelope: r.envelope, state: currentState(r) })),
    ...outbound.map((r) => ({ direction: 'outbound' as const, envelope: r.envelope, state: shownState(r) as string })),
  ]
    .sort((a, b) => a.envelope.ts - b.envelope.ts)
    .slice(-limit);
  return { messages: await shownThread(mailbox, merged, consume) };
}
