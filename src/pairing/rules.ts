/**
 * The pairing flow's state and its transitions, as pure functions (DESIGN.md, "Pairing").
 * The store (store.ts) runs them under the file's lock; the I/O around them (peers.json,
 * relays, notices) is in pairing.ts.
 *
 * - `outgoing`: requests this session sent and that are still open (at most 64).
 * - `incoming`: strangers' requests waiting for a person to decide (at most 64, one per
 *   key; past 64 the oldest goes, after the ones from known keys: see admitRequest).
 * - `dropped`: how many requests were dropped that way since when, until a person has
 *   seen it in `pair list`: a flood of throwaway knocks cannot drop a real one silently.
 * - `control`: signed control messages not yet accepted by a relay (at most 128). Each is
 *   signed again with a fresh timestamp whenever it is offered, keeping its msg_id, so a
 *   confirmation outlives an outage longer than the 24 h freshness window.
 * - `handled`: requests and acceptances already dealt with, remembered for 24 h (the
 *   freshness window) so a replay changes nothing.
 *
 * The bounds on what this side creates (outgoing, control) refuse before anything
 * changes, and before any change of trust.
 */
import { z } from 'zod';
import { InterlinkError } from '../errors.js';
import { MAX_FUTURE_MS, MAX_PAST_MS } from '../gate/decide.js';

export const MAX_OUTGOING = 64;
export const MAX_INCOMING = 64;
export const MAX_CONTROL = 128;
/**
 * As long as the gate could still admit a copy: the 7-day window plus the 60 s a
 * timestamp may run ahead. Both ends of the gate's window are inclusive while an entry
 * lives while `until > now`, hence the last millisecond.
 */
export const HANDLED_MS = MAX_PAST_MS + MAX_FUTURE_MS + 1;

const outgoingSchema = z.object({
  request_id: z.string(),
  to: z.string(),
  session: z.string(),
  /** The petname the peer gets when it accepts. */
  petname: z.string(),
  created_at: z.number().int(),
  code: z.string(),
  /** Set when the peer accepted but its petname had meanwhile come to name another key. */
  conflict: z.string().optional(),
  /** The target was picked by a name on the roster: an acceptance waits for a person's confirm. */
  by_name: z.boolean().optional(),
  /** The acceptance held for that confirm: its msg_id and when it came. */
  accepted: z.object({ msg_id: z.string(), at: z.number().int() }).optional(),
});
export type Outgoing = z.infer<typeof outgoingSchema>;

const incomingSchema = z.object({
  request_id: z.string(),
  from: z.string(),
  fingerprint: z.string(),
  /** What the requester says its name is; unverified. */
  claimed_name: z.string(),
  session: z.string(),
  received_at: z.number().int(),
  code: z.string(),
  /** The request's signed timestamp: only a newer request from the same key replaces it. */
  ts: z.number().int().optional(),
});
export type Incoming = z.infer<typeof incomingSchema>;

const controlSchema = z.object({
  msg_id: z.string(),
  kind: z.enum(['pair_request', 'pair_accept']),
  to: z.string(),
  session: z.string(),
  text: z.string(),
  in_reply_to: z.string().optional(),
  created_at: z.number().int(),
});
export type ControlJob = z.infer<typeof controlSchema>;

const handledSchema = z.object({
  from: z.string(),
  msg_id: z.string(),
  outcome: z.enum(['accepted', 'rejected', 'confirmed']),
  until: z.number().int(),
});
export type Handled = z.infer<typeof handledSchema>;

const droppedSchema = z.object({
  count: z.number().int().positive(),
  /** The first drop since a person last saw the count. */
  since: z.number().int(),
  last_at: z.number().int(),
});
export type Dropped = z.infer<typeof droppedSchema>;

export const pairingFileSchema = z.object({
  v: z.literal(1),
  outgoing: z.array(outgoingSchema),
  incoming: z.array(incomingSchema),
  control: z.array(controlSchema),
  handled: z.array(handledSchema),
  /** Absent while nothing was dropped (and in files of earlier versions). */
  dropped: droppedSchema.optional(),
});
export type PairingData = z.infer<typeof pairingFileSchema>;

export const emptyPairing = (): PairingData => ({ v: 1, outgoing: [], incoming: [], control: [], handled: [] });

export interface Change<R> {
  /** undefined: nothing to write */
  next: PairingData | undefined;
  result: R;
}

function pruned(data: PairingData, now: number): PairingData {
  return { ...data, handled: data.handled.filter((h) => h.until > now) };
}

function isHandled(data: PairingData, from: string, msgId: string): boolean {
  return data.handled.some((h) => h.from === from && h.msg_id === msgId);
}

/**
 * The same request: a msg_id is chosen by its sender, so two keys may send the same one;
 * a request is its sender's key and msg_id together.
 */
function sameRequest(a: Pick<Incoming, 'from' | 'request_id'>, b: Pick<Incoming, 'from' | 'request_id'>): boolean {
  return a.from === b.from && a.request_id === b.request_id;
}

function full(what: string, limit: number): InterlinkError {
  return new InterlinkError('pairing_full', `${what} (at most ${limit}); nothing was changed`);
}

/**
 * A request to `to`: a new one and its control message; or, when one is open, that one
 * (same id, so the same verification code) queued to be sent again. The other side may
 * have dropped it (a full list: admitRequest) or never got it; if it still holds it, the
 * copy is a duplicate there and changes nothing. An accepted one waiting for confirm is
 * not sent again: the answer is here.
 */
export function planRequest(
  data: PairingData,
  request: Omit<Outgoing, 'conflict' | 'accepted'> & { text: string },
): Change<{ outgoing: Outgoing; repeated: boolean; resent: boolean }> {
  const open = data.outgoing.find((o) => o.to === request.to);
  if (open !== undefined) {
    const queued = data.control.some((c) => c.msg_id === open.request_id);
    if (queued || open.accepted !== undefined || open.conflict !== undefined) return { next: undefined, result: { outgoing: open, repeated: true, resent: false } };
    if (data.control.length >= MAX_CONTROL) throw full('too many pairing messages waiting for a relay', MAX_CONTROL);
    const again: ControlJob = { msg_id: open.request_id, kind: 'pair_request', to: open.to, session: open.session, text: request.text, created_at: open.created_at };
    return { next: { ...data, control: [...data.control, again] }, result: { outgoing: open, repeated: true, resent: true } };
  }
  if (data.outgoing.length >= MAX_OUTGOING) throw full('too many open pairing requests of this session', MAX_OUTGOING);
  if (data.control.length >= MAX_CONTROL) throw full('too many pairing messages waiting for a relay', MAX_CONTROL);
  const { text, ...outgoing } = request;
  const job: ControlJob = { msg_id: request.request_id, kind: 'pair_request', to: request.to, session: request.session, text, created_at: request.created_at };
  return { next: { ...data, outgoing: [...data.outgoing, outgoing], control: [...data.control, job] }, result: { outgoing, repeated: false, resent: false } };
}

/** `evicted`: stored, and the oldest open request (of another key) made room for it. */
export type RequestAdmission = 'stored' | 'replaced' | 'duplicate' | 'evicted';

/**
 * A stranger's verified pair_request. One open request per key: a newer one (by its
 * signed timestamp) replaces it, so a relay replaying an older request cannot swap it
 * back. A request already dealt with, or already here, changes nothing; past 64 the
 * oldest open request makes room, and the drop is counted (`dropped`) for a person.
 *
 * Which one goes: the oldest from a key not known here. Known are the keys this session
 * asked to pair (a crossing request) and those `known` names (the caller's peers, asking
 * again): a stranger's key costs nothing to make, theirs do not. Only when every open
 * request is from a known key does the oldest of those go.
 */
export function admitRequest(data: PairingData, request: Incoming, now: number, known: ReadonlySet<string> = new Set()): Change<RequestAdmission> {
  const current = pruned(data, now);
  if (isHandled(current, request.from, request.request_id) || current.incoming.some((i) => sameRequest(i, request))) {
    return { next: undefined, result: 'duplicate' };
  }
  const open = current.incoming.find((i) => i.from === request.from);
  if (open !== undefined && (open.ts ?? 0) >= (request.ts ?? 0)) return { next: undefined, result: 'duplicate' };
  const others = current.incoming.filter((i) => i.from !== request.from);
  const replacing = others.length !== current.incoming.length;
  // Full: the oldest request goes. Strangers' keys are free, so dropping new requests
  // instead would let 64 throwaway keys shut pairing out for good.
  if (!replacing && current.incoming.length >= MAX_INCOMING) {
    const asked = new Set(current.outgoing.map((o) => o.to));
    const victim = current.incoming.find((i) => !known.has(i.from) && !asked.has(i.from)) ?? current.incoming[0]!;
    const dropped: Dropped = { count: (current.dropped?.count ?? 0) + 1, since: current.dropped?.since ?? now, last_at: now };
    return { next: { ...current, incoming: [...current.incoming.filter((i) => i !== victim), request], dropped }, result: 'evicted' };
  }
  return { next: { ...current, incoming: [...others, request] }, result: replacing ? 'replaced' : 'stored' };
}

/**
 * A person saw this count of dropped requests (`pair list`): it starts again from none.
 * A drop after it was read keeps the count, to be shown next time.
 */
export function clearDropped(data: PairingData, seen: Dropped): Change<undefined> {
  if (data.dropped === undefined || data.dropped.count !== seen.count || data.dropped.last_at !== seen.last_at) return { next: undefined, result: undefined };
  const next = { ...data };
  delete next.dropped;
  return { next, result: undefined };
}

/** The open incoming request from the identity with this fingerprint. */
export function findIncoming(data: PairingData, fingerprint: string): Incoming | undefined {
  return data.incoming.find((i) => i.fingerprint === fingerprint);
}

/** Checked before trust changes: the confirmation will have room. */
export function checkControlRoom(data: PairingData): void {
  if (data.control.length >= MAX_CONTROL) throw full('too many pairing messages waiting for a relay', MAX_CONTROL);
}

/**
 * After the requester was added to peers.json: the request is closed and the signed
 * acceptance queued. Idempotent: a request already closed leaves the data as it is.
 */
export function commitAccept(data: PairingData, request: Incoming, job: ControlJob, now: number): Change<{ queued: boolean }> {
  const current = pruned(data, now);
  if (!current.incoming.some((i) => sameRequest(i, request))) return { next: undefined, result: { queued: current.control.some((c) => c.msg_id === job.msg_id) } };
  checkControlRoom(current);
  return {
    next: {
      ...current,
      incoming: current.incoming.filter((i) => !sameRequest(i, request)),
      // The same acceptance retried (its job kept) is queued once: msg_ids in the queue are unique.
      control: current.control.some((c) => c.msg_id === job.msg_id) ? current.control : [...current.control, job],
      handled: [...current.handled, { from: request.from, msg_id: request.request_id, outcome: 'accepted', until: now + HANDLED_MS }],
    },
    result: { queued: true },
  };
}

export function reject(data: PairingData, fingerprint: string, now: number): Change<Incoming> {
  const request = findIncoming(data, fingerprint);
  if (request === undefined) throw new InterlinkError('unknown_request', `no open pairing request from ${fingerprint}`, undefined, { hint: { tool: 'see list_pair_requests', cli: 'see `interlink-mcp pair list`' } });
  const current = pruned(data, now);
  return {
    next: {
      ...current,
      incoming: current.incoming.filter((i) => !sameRequest(i, request)),
      handled: [...current.handled, { from: request.from, msg_id: request.request_id, outcome: 'rejected', until: now + HANDLED_MS }],
    },
    result: request,
  };
}

/** The open request a pair_accept from `from` answers: by its in_reply_to, or by key when it names none. */
export function matchAccept(data: PairingData, from: string, inReplyTo: string | undefined): Outgoing | undefined {
  return data.outgoing.find((o) => o.to === from && (inReplyTo === undefined || inReplyTo === o.request_id));
}

/** After the accepter was added to peers.json (or refused as a conflict): the request is closed or marked. */
export function commitAccepted(data: PairingData, request: Outgoing, acceptId: string, conflict: string | undefined, now: number): Change<undefined> {
  const current = pruned(data, now);
  const handled: Handled = { from: request.to, msg_id: acceptId, outcome: 'confirmed', until: now + HANDLED_MS };
  if (conflict !== undefined) {
    return { next: { ...current, outgoing: current.outgoing.map((o) => (o.request_id === request.request_id ? { ...o, conflict } : o)), handled: [...current.handled, handled] }, result: undefined };
  }
  return {
    next: {
      ...current,
      outgoing: current.outgoing.filter((o) => o.request_id !== request.request_id),
      // A request still waiting for a relay is answered already: it need not go out.
      control: current.control.filter((c) => c.msg_id !== request.request_id),
      handled: [...current.handled, handled],
    },
    result: undefined,
  };
}

/**
 * Outgoing requests that end without an acceptance: withdrawn by a person (`pair cancel`),
 * or moot because their key became a peer by other means. An unsent request need not go
 * out; a pair_accept that still comes answers nothing open, and the gate refuses it.
 */
export function closeOutgoing(data: PairingData, requestIds: readonly string[]): Change<Outgoing[]> {
  const closing = data.outgoing.filter((o) => requestIds.includes(o.request_id));
  if (closing.length === 0) return { next: undefined, result: [] };
  return {
    next: {
      ...data,
      outgoing: data.outgoing.filter((o) => !requestIds.includes(o.request_id)),
      control: data.control.filter((c) => !(c.kind === 'pair_request' && requestIds.includes(c.msg_id))),
    },
    result: closing,
  };
}

/**
 * An acceptance of a request made by roster name: the request stays open, marked
 * accepted, until a person confirms (`pair confirm`); nothing changes in peers.json.
 */
export function holdAccepted(data: PairingData, request: Outgoing, acceptId: string, now: number): PairingData {
  const current = pruned(data, now);
  return {
    ...current,
    outgoing: current.outgoing.map((o) => (o.request_id === request.request_id ? { ...o, accepted: { msg_id: acceptId, at: now } } : o)),
    control: current.control.filter((c) => c.msg_id !== request.request_id),
    handled: [...current.handled, { from: request.to, msg_id: acceptId, outcome: 'confirmed', until: now + HANDLED_MS }],
  };
}

export function wasHandled(data: PairingData, from: string, msgId: string, now: number): boolean {
  return pruned(data, now).handled.some((h) => h.from === from && h.msg_id === msgId);
}

/** A relay accepted the control message: it leaves the queue. */
export function controlDone(data: PairingData, msgId: string): Change<undefined> {
  if (!data.control.some((c) => c.msg_id === msgId)) return { next: undefined, result: undefined };
  return { next: { ...data, control: data.control.filter((c) => c.msg_id !== msgId) }, result: undefined };
}
