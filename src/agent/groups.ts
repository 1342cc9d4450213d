/**
 * Messages to several recipients at once (a list of peers, or an audience a person
 * defined): the rules a group is read by, as pure functions. One call makes one signed,
 * sealed copy per recipient, all sharing a group id (sending.ts); what each recipient
 * answered is derived from the mail itself, never stored apart from it, so the panel is
 * always what the mailbox and the outbox say (DESIGN.md "Groups").
 *
 * An answer belongs to a copy when it comes from that copy's recipient and names the
 * copy's msg_id in `in_reply_to`; a reply without `in_reply_to` that carries the copy's
 * task id, stored here at or after the copy was sent, counts too (agents often answer a
 * task by its id alone). Both times are this machine's clock, so a recipient whose clock
 * disagrees is linked all the same. The first terminal answer (result, failed, canceled) in the recipient's signed
 * order is the answer; later terminal ones stay visible as duplicates; the newest
 * non-terminal reply says whether the recipient is asking something (`needs_input`).
 */
import { TERMINAL_STATUSES, type Status } from '../envelope/envelope.js';
import { InterlinkError } from '../errors.js';
import { MAX_RECIPIENTS } from '../peers/audiences.js';

// The most recipients one call reaches, and so the most members an audience holds: each
// copy is a signed, sealed message and a commit's worth of outbox, all made in one call.
export { MAX_RECIPIENTS };

/** One copy as the panel reads it. */
export interface PanelCopy {
  /** The recipient's key. */
  key: string;
  msg_id: string;
  /** When it was committed to the outbox, at this machine's clock. */
  sent_at: number;
  task_id?: string;
}

/** A message a recipient sent this session, as the panel reads it. */
export interface PanelReply {
  from: string;
  msg_id: string;
  /** Signed, at the sender's clock: orders one sender's replies. */
  ts: number;
  /** When this session stored it, at this machine's clock: compared with a copy's `sent_at`. */
  received_at: number;
  status?: Status;
  task_id?: string;
  in_reply_to?: string;
}

export interface CopyAnswers {
  /** The first terminal answer, in the recipient's signed order. */
  answer?: PanelReply;
  /** Terminal answers after the first. */
  duplicates: PanelReply[];
  /** The newest reply that is not terminal, when it is newer than the answer (or there is none). */
  latest?: PanelReply;
  /** Every reply linked to the copy. */
  replies: PanelReply[];
}

/** Whether `reply` answers `copy` (the rule at the top of this file). */
export function answers(copy: PanelCopy, reply: PanelReply): boolean {
  if (reply.from !== copy.key) return false;
  if (reply.in_reply_to !== undefined) return reply.in_reply_to === copy.msg_id;
  return copy.task_id !== undefined && reply.task_id === copy.task_id && reply.received_at >= copy.sent_at;
}

/** What each copy's recipient answered, by msg_id of the copy. */
export function answersOf(copies: readonly PanelCopy[], replies: readonly PanelReply[]): Map<string, CopyAnswers> {
  const result = new Map<string, CopyAnswers>();
  for (const copy of copies) {
    const linked = replies.filter((r) => answers(copy, r)).sort((a, b) => a.ts - b.ts || (a.msg_id < b.msg_id ? -1 : 1));
    const terminal = linked.filter((r) => r.status !== undefined && TERMINAL_STATUSES.has(r.status));
    const newest = linked.filter((r) => r.status === undefined || !TERMINAL_STATUSES.has(r.status)).at(-1);
    const answer = terminal[0];
    result.set(copy.msg_id, {
      ...(answer !== undefined && { answer }),
      duplicates: terminal.slice(1),
      ...(newest !== undefined && (answer === undefined || newest.ts > answer.ts) && { latest: newest }),
      replies: linked,
    });
  }
  return result;
}

/**
 * What a recipient's line of the panel says, from its copy's delivery state and its
 * answers: `result`, `failed` or `canceled` (its first terminal answer), `refused` (a
 * relay or the receiver refused the copy, or it was dropped), `needs_input` (it asked
 * something and has not finished), else `waiting`.
 */
export type Outcome = 'result' | 'failed' | 'canceled' | 'refused' | 'needs_input' | 'waiting' | 'not_sent';
export const OUTCOMES: readonly Outcome[] = ['result', 'failed', 'canceled', 'needs_input', 'waiting', 'refused', 'not_sent'];

const REFUSED_DELIVERY: ReadonlySet<string> = new Set(['receiver_refused', 'delivery_failed', 'canceled']);

export function outcomeOf(delivery: string, found: CopyAnswers | undefined): Outcome {
  const status = found?.answer?.status;
  if (status === 'result' || status === 'failed' || status === 'canceled') return status;
  if (REFUSED_DELIVERY.has(delivery)) return 'refused';
  return found?.latest?.status === 'needs_input' ? 'needs_input' : 'waiting';
}

/** Whether a recipient is still expected to act: what a group's cancel_task reaches. */
export function stillWorking(outcome: Outcome): boolean {
  return outcome === 'waiting' || outcome === 'needs_input';
}

/** How many recipients are at each outcome (every outcome listed, zeros included). */
export function tally(outcomes: readonly Outcome[]): Record<Outcome, number> {
  const counts = Object.fromEntries(OUTCOMES.map((o) => [o, 0])) as Record<Outcome, number>;
  for (const o of outcomes) counts[o]++;
  return counts;
}

/**
 * The distinct recipients of a list, in the order given: a petname named twice is one
 * recipient; "self" (this identity's own sessions) and more than MAX_RECIPIENTS are
 * refused, as is an empty list.
 */
export function recipientNames(names: readonly string[]): string[] {
  const distinct = [...new Set(names.map((n) => n.normalize('NFC')))];
  if (distinct.length === 0) throw new InterlinkError('bad_recipients', 'the list of recipients is empty; name at least one peer');
  if (distinct.includes('self')) throw new InterlinkError('bad_recipients', '"self" cannot be one of several recipients: send to your own sessions in a message of its own');
  if (distinct.length > MAX_RECIPIENTS) throw new InterlinkError('too_many_recipients', `${distinct.length} recipients; one message reaches at most ${MAX_RECIPIENTS}`);
  return distinct;
}
