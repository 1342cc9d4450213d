/**
 * `rejected/<identity>/<session>.json`: what the trust gate refused after a relay had
 * accepted it (a stale or future timestamp, a sender not or no longer a peer, a bad
 * signature, …), so no refusal is silent: the sender's key, msg_id, the verdict and when.
 * Bounded: the newest MAX_REJECTED entries; redeliveries of what this session admitted
 * are not listed (the gate doing its job on a copy), a copy offered to another session is. `status` counts them and
 * `interlink-mcp inbox --rejected` shows them.
 *
 * The same file keeps the `receiver_refused` receipts this session owes senders
 * (agent/receipts.ts): one is written before the relay may forget the refused message
 * and removed once a relay accepted the receipt, so a refusal reaches its sender
 * whatever restarted in between.
 */
import { z } from 'zod';
import { REJECT_CODES } from '../errors.js';
import { peekJson, readJson, updateJson } from '../store/json-store.js';

export const MAX_REJECTED = 256;
/**
 * Receipts owed at most: only peers' (and this identity's) refusals are owed, and one
 * leaves as soon as a relay answers, so this bounds a long outage, not normal use.
 */
export const MAX_OWED = 1_024;

const entrySchema = z.object({
  from: z.string(),
  msg_id: z.string(),
  code: z.string(),
  reason: z.string(),
  at: z.number().int(),
  /** The envelope's own time, for judging clocks. */
  ts: z.number().int(),
});
export type Rejection = z.infer<typeof entrySchema>;

/** A `receiver_refused` receipt owed to session `session` of key `to`, about its message `msg_id`. */
const owedSchema = z.object({
  to: z.string(),
  session: z.string(),
  msg_id: z.string(),
  code: z.enum(REJECT_CODES),
  /** When the gate refused it (this clock): the receipt's `at`. */
  at: z.number().int(),
});
export type OwedReceipt = z.infer<typeof owedSchema>;

/** `owed` came after the first files: a file without it owes nothing. */
const fileSchema = z.object({ v: z.literal(1), rejected: z.array(entrySchema), owed: z.array(owedSchema).optional() });
type RejectedFile = z.infer<typeof fileSchema>;
const empty = (): RejectedFile => ({ v: 1, rejected: [] });
const storeOptions = { unavailable: 'the list of refused messages is not shown' };

/** Adds one refusal (once per sender and msg_id), keeping the newest MAX_REJECTED (pure). */
export function withRejection(list: readonly Rejection[], entry: Rejection): Rejection[] | undefined {
  if (list.some((r) => r.from === entry.from && r.msg_id === entry.msg_id && r.code === entry.code)) return undefined;
  return [...list, entry].slice(-MAX_REJECTED);
}

export async function recordRejection(path: string, entry: Rejection): Promise<void> {
  await updateJson(path, fileSchema, empty, (current) => {
    const next = withRejection(current.rejected, entry);
    return { next: next === undefined ? undefined : { ...current, rejected: next }, result: {} };
  }, storeOptions);
}

const sameReceipt = (a: Pick<OwedReceipt, 'to' | 'msg_id'>, b: Pick<OwedReceipt, 'to' | 'msg_id'>): boolean => a.to === b.to && a.msg_id === b.msg_id;

/** Adds an owed receipt (once per sender and msg_id), keeping the newest MAX_OWED (pure). */
export function withOwed(list: readonly OwedReceipt[], entry: OwedReceipt): OwedReceipt[] | undefined {
  if (list.some((owed) => sameReceipt(owed, entry))) return undefined;
  return [...list, entry].slice(-MAX_OWED);
}

/** Removes the receipts a relay accepted (pure); undefined when none of them was owed. */
export function withoutOwed(list: readonly OwedReceipt[], sent: readonly Pick<OwedReceipt, 'to' | 'msg_id'>[]): OwedReceipt[] | undefined {
  const next = list.filter((owed) => !sent.some((s) => sameReceipt(owed, s)));
  return next.length === list.length ? undefined : next;
}

/** Records that `entry` is owed; durable when it resolves (before the relay is acknowledged). */
export async function oweReceipt(path: string, entry: OwedReceipt): Promise<void> {
  await updateJson(path, fileSchema, empty, (current) => {
    const next = withOwed(current.owed ?? [], entry);
    return { next: next === undefined ? undefined : { ...current, owed: next }, result: {} };
  }, storeOptions);
}

/** Forgets owed receipts a relay accepted. */
export async function receiptsSent(path: string, sent: readonly Pick<OwedReceipt, 'to' | 'msg_id'>[]): Promise<void> {
  await updateJson(path, fileSchema, empty, (current) => {
    const next = withoutOwed(current.owed ?? [], sent);
    return { next: next === undefined ? undefined : { ...current, owed: next }, result: {} };
  }, storeOptions);
}

/** The receipts still owed, oldest first (a session starting sends them again). */
export async function owedReceipts(path: string): Promise<OwedReceipt[]> {
  return (await readJson(path, fileSchema, empty, storeOptions)).value.owed ?? [];
}

/** Reads without moving anything (for views); a damaged file reads as a reason. */
export async function peekRejections(path: string): Promise<Rejection[] | { damaged: string }> {
  const read = await peekJson(path, fileSchema);
  if (read.kind === 'ok') return read.value.rejected;
  if (read.kind === 'missing') return [];
  return { damaged: read.reason };
}
