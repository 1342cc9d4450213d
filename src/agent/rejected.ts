/**
 * `rejected/<identity>/<session>.json`: what the trust gate refused after a relay had
 * accepted it (a stale or future timestamp, a sender not or no longer a peer, a bad
 * signature, …), so no refusal is silent: the sender's key, msg_id, the verdict and when.
 * Bounded: the newest MAX_REJECTED entries; redeliveries of what this session admitted
 * are not listed (the gate doing its job on a copy), a copy offered to another session is. `status` counts them and
 * `interlink-mcp inbox --rejected` shows them.
 */
import { z } from 'zod';
import { peekJson, updateJson } from '../store/json-store.js';

export const MAX_REJECTED = 256;

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

const fileSchema = z.object({ v: z.literal(1), rejected: z.array(entrySchema) });
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
    return { next: next === undefined ? undefined : { v: 1 as const, rejected: next }, result: {} };
  }, storeOptions);
}

/** Reads without moving anything (for views); a damaged file reads as a reason. */
export async function peekRejections(path: string): Promise<Rejection[] | { damaged: string }> {
  const read = await peekJson(path, fileSchema);
  if (read.kind === 'ok') return read.value.rejected;
  if (read.kind === 'missing') return [];
  return { damaged: read.reason };
}
