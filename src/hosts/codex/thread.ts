/**
 * Which Codex thread an MCP server serves (DESIGN.md "Notices: waking the host", Codex; codex/README.md), as pure decisions.
 *
 * Codex starts one stdio MCP server per thread and tells it nothing about the thread in
 * its environment. A trusted lifecycle hook calls `bind_codex_session` with the thread's
 * UUID; until then the server neither announces, polls nor sends. A server binds once.
 * Codex also attaches the thread id to the `_meta` of the tool calls it makes (hooks' and
 * the model's), which lets every call be checked against the binding.
 */
import { z } from 'zod';
import { InterlinkError } from '../../errors.js';

const THREAD_UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** A full thread UUID, lower case; anything else (a name, a prefix) is refused. */
export function parseThreadId(value: string): string {
  const id = value.trim().toLowerCase();
  if (!THREAD_UUID.test(id)) {
    throw new InterlinkError('usage', `thread_id must be a full Codex thread UUID (like 01a227a4-1fcd-7663-ade6-117faef1cb4e), not ${JSON.stringify(value.slice(0, 60))}`);
  }
  return id;
}

/**
 * Each place Codex may name the thread is read on its own: a malformed or `null` field
 * (a serializer may write an absent value as `null`) must not hide a thread named by
 * the other.
 */
const metaThreadIdSchema = z.object({ threadId: z.string() });
const turnMetadataSchema = z.object({ 'x-codex-turn-metadata': z.object({ thread_id: z.string() }) });

/**
 * The thread a tool call says it comes from, if it says so. A `_meta` that names two
 * different threads is treated as naming a thread no binding can match.
 */
export function threadFromMeta(meta: unknown): string | undefined {
  const direct = metaThreadIdSchema.safeParse(meta);
  const turn = turnMetadataSchema.safeParse(meta);
  const named = [direct.success ? direct.data.threadId : undefined, turn.success ? turn.data['x-codex-turn-metadata'].thread_id : undefined]
    .filter((id): id is string => id !== undefined)
    .map((id) => id.trim().toLowerCase())
    .filter((id) => id !== '');
  if (named.length === 0) return undefined;
  return named.every((id) => id === named[0]) ? named[0] : 'conflicting thread ids in _meta';
}

export type BindDecision = { action: 'bind' } | { action: 'same' } | { action: 'refuse'; error: InterlinkError };

/** `bound` is the thread this server already serves; `meta` what the call's `_meta` names. */
export function decideBind(bound: string | undefined, requested: string, meta: string | undefined): BindDecision {
  if (meta !== undefined && meta !== requested) {
    return { action: 'refuse', error: new InterlinkError('thread_mismatch', `bind_codex_session names thread ${requested}, but the call comes from thread ${meta}`) };
  }
  if (bound === undefined) return { action: 'bind' };
  if (bound === requested) return { action: 'same' };
  return {
    action: 'refuse',
    error: new InterlinkError('thread_mismatch', `this Interlink server is bound to Codex thread ${bound} and cannot be rebound to ${requested}; each thread starts its own server`),
  };
}

/** Whether a tool call may run: refused when its `_meta` names a thread other than the bound one. */
export function checkCallThread(bound: string | undefined, meta: string | undefined): InterlinkError | undefined {
  if (bound === undefined || meta === undefined || meta === bound) return undefined;
  return new InterlinkError('thread_mismatch', `this Interlink server serves Codex thread ${bound}, but the call comes from thread ${meta}`);
}
