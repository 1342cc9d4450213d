/**
 * The trust gate: one pure function that decides whether a verified-or-not envelope may
 * enter this identity's mailbox. The checks run in a fixed order and the first failure
 * is the verdict:
 *
 *   1. signature    the envelope verifies under its own `from` key (strict Ed25519)
 *   2. recipient    `to` is my key, and in a version 3 envelope `to_session` is my
 *                   session (a relay cannot move a message to another session)
 *   3. kind         a kind this version handles
 *   4. sealed       a version 4 body opens with the key sender and receiver share
 *                   (`bad_seal`); a clear envelope (versions 2 and 3) comes from a peer a
 *                   person marked `clear`, for the Rust original (`unsealed`)
 *   5. authorized   a peer, or my own key (sibling sessions), for a message or a receipt;
 *                   a stranger (or a peer that wants to pair again) may only knock with
 *                   `pair_request`, or answer my outstanding request with `pair_accept`
 *   6. fresh        at most 60 s in the future (up to 10 min ahead: held, see
 *                   MAX_HOLD_MS) and 7 days in the past
 *   7. not a replay `(from, msg_id)` not seen before by this session; the per-identity
 *                   replay index (replay/claims.ts) then makes sure no other session of
 *                   this identity admitted it either
 *
 * Authorization runs before freshness and replay so that a stranger's plain message never
 * costs a replay slot.
 */
import { isInterlinkError, type RejectCode } from '../errors.js';
import { type Envelope, KNOWN_KINDS, type KnownKind, type SealedWire, type WireEnvelope, isSealed } from '../envelope/envelope.js';
import { verifyEnvelope } from '../envelope/sign.js';

export const MAX_FUTURE_MS = 60_000;
/**
 * How long a message may have waited: a receiver offline for up to 7 days still gets its
 * mail (relays keep messages until they are acknowledged), and replay memory (mailbox
 * tombstones, handled pairing messages) covers the same window.
 */
export const MAX_PAST_MS = 7 * 24 * 60 * 60 * 1000;
/**
 * A message from a peer or this identity up to this far ahead of the receiver's clock (a
 * sender whose clock runs fast, or a receiver whose clock runs slow) is not refused but
 * held: not acknowledged, and judged again once it is within MAX_FUTURE_MS.
 */
export const MAX_HOLD_MS = 10 * 60 * 1000;

/** Declared with every other code in errors.ts (REJECT_CODES), in the order the checks run. */
export type { RejectCode };

/** `receipt`: a report on my own messages from a peer or from my own key; applied to the outbox, never stored as mail. */
export type Admission = 'peer' | 'self' | 'pair_request' | 'pair_accept' | 'receipt';

/** What authorization decides, before the verdict carries the envelope. */
type Authorized = { ok: true; admission: Admission; kind: KnownKind; sender: string; petname?: string } | { ok: false; code: RejectCode; reason: string };

export type Verdict =
  /** `envelope`: the message as admitted, its body opened when it was sealed. */
  | { ok: true; admission: Admission; kind: KnownKind; sender: string; petname?: string; envelope: Envelope }
  /** `due`, only on `from_future` within MAX_HOLD_MS: when to judge it again (hold, do not refuse). */
  | { ok: false; code: RejectCode; reason: string; due?: number };

/** An outstanding pairing request this identity sent: to whom, and with which msg_id. */
export interface OutstandingRequest {
  to: string;
  msg_id: string;
}

export interface GateContext {
  me: string;
  /** This receiver's session: a version 3 envelope must be signed for it. */
  session: string;
  /** public key → petname, from peers.json. */
  peers: ReadonlyMap<string, string>;
  outstandingRequests: readonly OutstandingRequest[];
  now: number;
  seen: (sender: string, msgId: string) => boolean;
  /** Keys whose clear (unsealed, version 2 or 3) envelopes are admitted: peers marked `clear`. */
  clear?: { has(key: string): boolean };
  /** Opens a sealed body addressed to this identity; throws InterlinkError `bad_seal`. */
  open: (envelope: SealedWire) => Envelope;
  /** Signature check, injectable so tests can count or fake it; defaults to strict Ed25519. */
  verify?: (envelope: WireEnvelope) => boolean;
}

function reject(code: RejectCode, reason: string): { ok: false; code: RejectCode; reason: string } {
  return { ok: false, code, reason };
}

function isKnownKind(kind: string): kind is KnownKind {
  return (KNOWN_KINDS as readonly string[]).includes(kind);
}

function answersMyRequest(envelope: Envelope, ctx: GateContext): boolean {
  return ctx.outstandingRequests.some((request) => request.to === envelope.from && (envelope.in_reply_to === undefined || envelope.in_reply_to === request.msg_id));
}

/**
 * A peer may knock again: it may have removed this identity on its side and want to pair
 * anew (DESIGN.md "Re-pairing"). That is still only a notice for a person, and accepting
 * changes no trust here. A peer's pair_accept counts only as the answer to my open
 * request (a person may have added the peer by hand meanwhile).
 */
function authorizeTrusted(envelope: Envelope & { kind: KnownKind }, ctx: GateContext, petname: string | undefined): Authorized {
  const sender = envelope.from;
  if (envelope.kind === 'message') {
    return petname === undefined ? { ok: true, admission: 'self', kind: 'message', sender } : { ok: true, admission: 'peer', kind: 'message', sender, petname };
  }
  if (envelope.kind === 'receipt') return { ok: true, admission: 'receipt', kind: 'receipt', sender, ...(petname !== undefined && { petname }) };
  if (petname === undefined) return reject('unexpected_pairing', `${envelope.kind} from this identity's own key`);
  if (envelope.kind === 'pair_request') return { ok: true, admission: 'pair_request', kind: 'pair_request', sender, petname };
  if (!answersMyRequest(envelope, ctx)) return reject('unexpected_pairing', 'pair_accept from a peer that answers no open request of mine');
  return { ok: true, admission: 'pair_accept', kind: 'pair_accept', sender, petname };
}

function authorize(envelope: Envelope & { kind: KnownKind }, ctx: GateContext): Authorized {
  const sender = envelope.from;
  const petname = ctx.peers.get(sender);
  if (sender === ctx.me) return authorizeTrusted(envelope, ctx, undefined);
  if (petname !== undefined) return authorizeTrusted(envelope, ctx, petname);
  if (envelope.kind === 'message' || envelope.kind === 'receipt') return reject('not_allowlisted', 'sender is not a peer; a stranger may only send a pairing request');
  if (envelope.kind === 'pair_request') return { ok: true, admission: 'pair_request', kind: 'pair_request', sender };
  if (!answersMyRequest(envelope, ctx)) return reject('unsolicited_accept', 'pair_accept does not answer any outstanding pairing request of mine');
  return { ok: true, admission: 'pair_accept', kind: 'pair_accept', sender };
}

/** Step 4: the sealed body opened, or a clear envelope from a sender allowed to send one. */
function unseal(wire: WireEnvelope, ctx: GateContext): Envelope | { ok: false; code: RejectCode; reason: string } {
  if (!isSealed(wire)) {
    if (ctx.clear?.has(wire.from) === true) return wire;
    return reject('unsealed', 'a clear (unsealed) envelope: only a peer marked clear (`interlink-mcp peers add NAME KEY --clear`, for the Rust Interlink) may send one');
  }
  try {
    return ctx.open(wire);
  } catch (err) {
    if (isInterlinkError(err, 'bad_seal')) return reject('bad_seal', err.sentence);
    throw err;
  }
}

export function decide(wire: WireEnvelope, ctx: GateContext): Verdict {
  const verify = ctx.verify ?? verifyEnvelope;
  if (!verify(wire)) return reject('bad_signature', 'signature does not verify under the sender key');
  if (wire.to !== ctx.me) return reject('wrong_recipient', 'addressed to a different identity');
  if (wire.to_session !== undefined && wire.to_session !== ctx.session) {
    return reject('wrong_session', `signed for session ${JSON.stringify(wire.to_session)} of this identity, offered to ${JSON.stringify(ctx.session)}`);
  }
  const kind = wire.kind;
  if (!isKnownKind(kind)) return reject('unsupported_kind', `kind ${kind} is not supported by this version`);
  const envelope = unseal(wire, ctx);
  if ('ok' in envelope) return envelope;
  const verdict = authorize({ ...envelope, kind }, ctx);
  if (!verdict.ok) return verdict;
  if (envelope.ts > ctx.now + MAX_FUTURE_MS) {
    // Only trusted mail is held: a held delivery keeps a place in the relay's window, and
    // strangers' knocks (keys are free) must not fill it.
    const trusted = verdict.admission === 'peer' || verdict.admission === 'self' || verdict.admission === 'receipt';
    if (envelope.ts > ctx.now + MAX_HOLD_MS || !trusted) return reject('from_future', 'timestamp is more than 60 s ahead of this clock');
    return { ok: false, code: 'from_future', reason: 'timestamp is more than 60 s ahead of this clock; held until it is due', due: envelope.ts - MAX_FUTURE_MS };
  }
  if (envelope.ts < ctx.now - MAX_PAST_MS) return reject('stale', 'timestamp is more than 7 days old');
  if (ctx.seen(envelope.from, envelope.msg_id)) return reject('replay', 'this message was already received');
  return { ...verdict, envelope };
}
