/**
 * Signed receipts: what a receiver tells a sender about the sender's messages. A receipt
 * is an envelope of kind `receipt` (sealed, signed, judged by the same gate as any
 * message), from the receiver's key to the session named in the message's reply route;
 * its text is a JSON object listing states:
 *
 *   {"receipts": [{"msg_id": "…", "state": "receiver_stored", "at": 1767225600000}, …]}
 *
 * `at` is the receiver's clock. `state` is one of REMOTE_STATES; `receiver_refused` carries
 * the gate's `code`. A receipt is never stored in a mailbox, never wakes a host and is
 * never itself receipted. Pure: building and reading the text; the agent sends and applies.
 */
import { z } from 'zod';
import { MSG_ID, msgIdText } from '../envelope/envelope.js';
import { InterlinkError, REJECT_CODES } from '../errors.js';

export const RECEIPT_KIND = 'receipt';
/** What a receiver reports, in the order a message goes through them. */
export const REMOTE_STATES = ['receiver_stored', 'receiver_acknowledged', 'receiver_refused'] as const;
export type RemoteState = (typeof REMOTE_STATES)[number];
/** Entries per receipt envelope: one receipt stays far below the body limit (about 100 bytes each). */
export const MAX_RECEIPT_ENTRIES = 256;

export const receiptEntrySchema = z.object({
  msg_id: msgIdText,
  state: z.enum(REMOTE_STATES),
  at: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  code: z.enum(REJECT_CODES).optional(),
});
export type ReceiptEntry = z.infer<typeof receiptEntrySchema>;

const receiptBodySchema = z.object({ receipts: z.array(receiptEntrySchema).min(1).max(MAX_RECEIPT_ENTRIES) });

export function receiptText(entries: readonly ReceiptEntry[]): string {
  return JSON.stringify({ receipts: entries });
}

/** Reads a receipt's text; throws InterlinkError `bad_envelope` naming what is wrong. */
export function parseReceiptText(text: string): ReceiptEntry[] {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    throw new InterlinkError('bad_envelope', 'a receipt whose text is not JSON');
  }
  const direct = readReceiptBody(data);
  if (direct !== undefined) return direct;
  const parsed = receiptBodySchema.safeParse(data);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new InterlinkError('bad_envelope', `a receipt's ${issue?.path.join('.') || 'text'} ${issue?.message ?? 'is invalid'}`);
  }
  return parsed.data.receipts;
}

const STATE_SET: ReadonlySet<unknown> = new Set(REMOTE_STATES);
const CODE_SET: ReadonlySet<unknown> = new Set(REJECT_CODES);

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * receiptBodySchema, checked directly: a sender reads receipts of up to 256 entries, and
 * the schema spent microseconds on each. The entries it returns hold only the known
 * members, as the schema's do. Stricter than the schema, never looser: undefined for
 * anything it does not take, which then goes through the schema (to be named, or taken).
 */
function readReceiptBody(data: unknown): ReceiptEntry[] | undefined {
  if (!isRecord(data) || !Array.isArray(data.receipts)) return undefined;
  const list: unknown[] = data.receipts;
  if (list.length < 1 || list.length > MAX_RECEIPT_ENTRIES) return undefined;
  const entries: ReceiptEntry[] = [];
  for (const item of list) {
    if (!isRecord(item)) return undefined;
    const { msg_id, state, at, code } = item;
    if (typeof msg_id !== 'string' || !MSG_ID.test(msg_id) || !STATE_SET.has(state)) return undefined;
    if (typeof at !== 'number' || !Number.isSafeInteger(at) || at < 0) return undefined;
    if (code !== undefined && !CODE_SET.has(code)) return undefined;
    entries.push({ msg_id, state: state as RemoteState, at, ...(code !== undefined && { code: code as ReceiptEntry['code'] & string }) });
  }
  return entries;
}

/** How far a state goes: a later state replaces an earlier one as the message's current state. */
export function remoteRank(state: RemoteState): number {
  return REMOTE_STATES.indexOf(state);
}

/**
 * When a receipt to a route is due (pure; agent/receipts.ts keeps the times): `delayMs`
 * after the first entry waiting for it, and no sooner than `intervalMs` after the last
 * receipt sent to that route. A quiet route hears within `delayMs`; a busy one gets one
 * receipt per interval, however many messages it carries.
 */
export function receiptDue(firstNotedAt: number, lastSentAt: number | undefined, delayMs: number, intervalMs: number): number {
  const soonest = firstNotedAt + delayMs;
  return lastSentAt === undefined ? soonest : Math.max(soonest, lastSentAt + intervalMs);
}
