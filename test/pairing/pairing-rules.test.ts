/**
 * The pairing transitions (src/pairing/rules.ts): a table per transition, then a
 * model-based property that runs random operation sequences against both the real
 * functions and a small reference model written here from the rules, checking the
 * invariants after every step. Every input is deeply frozen, so a transition that edits
 * its input instead of returning a new value fails with a TypeError.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { throwsWith } from '../helpers/assert.js';
import { MAX_FUTURE_MS, MAX_PAST_MS } from '../../src/gate/decide.js';
import {
  HANDLED_MS,
  MAX_CONTROL,
  MAX_INCOMING,
  MAX_OUTGOING,
  admitRequest,
  checkControlRoom,
  clearDropped,
  commitAccept,
  commitAccepted,
  controlDone,
  emptyPairing,
  findIncoming,
  matchAccept,
  pairingFileSchema,
  planRequest,
  reject,
  wasHandled,
  type Change,
  type ControlJob,
  type Handled,
  type Incoming,
  type Outgoing,
  type PairingData,
} from '../../src/pairing/rules.js';
import { newIdentity } from '../helpers/fixtures.js';

const DAY = 24 * 60 * 60 * 1000;
const T0 = 1_900_000_000_000;

const msgId = (n: number): string => n.toString(16).padStart(32, '0');

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const inner of Object.values(value as object)) deepFreeze(inner);
  }
  return value;
}

/** A frozen copy: the transitions must never edit their input. */
function frozen(data: PairingData): PairingData {
  return deepFreeze(structuredClone(data));
}

/** Applies a change: the next data if there is one, else the same data. */
function after<R>(data: PairingData, change: Change<R>): PairingData {
  const next = change.next ?? data;
  expect(pairingFileSchema.parse(next)).toEqual(next);
  return deepFreeze(next);
}

interface Party {
  key: string;
  fingerprint: string;
}

const pool: Party[] = [20, 21, 22, 23, 24].map((seed) => {
  const { key, fingerprint } = newIdentity(seed);
  return { key, fingerprint };
});
const [ann, ben, cat] = pool as [Party, Party, Party];

/** A request received at `now`, signed at `ts` (by default `now`, so a later request is newer). */
function incoming(from: Party, requestId: string, now: number, ts = now): Incoming {
  return { request_id: requestId, from: from.key, fingerprint: from.fingerprint, claimed_name: `name of ${from.fingerprint}`, session: 'their-session', received_at: now, code: `code ${requestId}`, ts };
}

/** The same request without a signed timestamp (an entry written before `ts` existed): it counts as 0. */
function withoutTs(request: Incoming): Incoming {
  const { ts: _ts, ...rest } = request;
  return rest;
}

function request(to: string, requestId: string, now: number): Omit<Outgoing, 'conflict'> & { text: string } {
  return { request_id: requestId, to, session: `session of ${to.slice(0, 6)}`, petname: `pet-${to.slice(0, 6)}`, created_at: now, code: `code ${requestId}`, text: 'my name' };
}

function acceptJob(request: Incoming, jobId: string, now: number): ControlJob {
  return { msg_id: jobId, kind: 'pair_accept', to: request.from, session: request.session, text: 'my name', in_reply_to: request.request_id, created_at: now };
}

const fillerKey = (kind: string, i: number): string => `filler-${kind}-${i}`;
const fillerFingerprint = (i: number): string => `f111-0000-0000-${i.toString(16).padStart(4, '0')}`;

/** Data with the given numbers of entries, none of them involving the pool. */
function filled(counts: { outgoing?: number; outgoingQueued?: number; incoming?: number; accepts?: number }): PairingData {
  const data = emptyPairing();
  const outgoingCount = counts.outgoing ?? 0;
  const queued = counts.outgoingQueued ?? outgoingCount;
  for (let i = 0; i < outgoingCount; i++) {
    const { text, ...outgoing } = request(fillerKey('out', i), msgId(100_000 + i), T0 - 1000);
    data.outgoing.push(outgoing);
    if (i < queued) data.control.push({ msg_id: outgoing.request_id, kind: 'pair_request', to: outgoing.to, session: outgoing.session, text, created_at: T0 - 1000 });
  }
  for (let i = 0; i < (counts.incoming ?? 0); i++) {
    data.incoming.push({ ...incoming({ key: fillerKey('in', i), fingerprint: fillerFingerprint(i) }, msgId(200_000 + i), T0 - 1000) });
  }
  for (let i = 0; i < (counts.accepts ?? 0); i++) {
    data.control.push({ msg_id: msgId(300_000 + i), kind: 'pair_accept', to: fillerKey('acc', i), session: 's', text: 'my name', in_reply_to: msgId(400_000 + i), created_at: T0 - 1000 });
  }
  return deepFreeze(data);
}

// ---------------------------------------------------------------------------------------
// Tables, one per transition.
// ---------------------------------------------------------------------------------------

describe('planRequest', () => {
  it('opens a request and queues its signed pair_request under the same id', () => {
    const change = planRequest(frozen(emptyPairing()), request(ann.key, msgId(1), T0));
    const { text: _text, ...outgoing } = request(ann.key, msgId(1), T0);
    expect(change.result).toEqual({ outgoing, repeated: false, resent: false });
    expect(change.next).toEqual({
      v: 1,
      outgoing: [outgoing],
      incoming: [],
      control: [{ msg_id: msgId(1), kind: 'pair_request', to: ann.key, session: outgoing.session, text: 'my name', created_at: T0 }],
      handled: [],
    });
    expect(change.next?.outgoing[0]).not.toHaveProperty('text');
  });

  it('repeats an open request to the same key with its id, changing nothing', () => {
    const data = after(emptyPairing(), planRequest(frozen(emptyPairing()), request(ann.key, msgId(1), T0)));
    const again = planRequest(data, { ...request(ann.key, msgId(2), T0 + 5), session: 'another', petname: 'other' });
    expect(again.next).toBeUndefined();
    expect(again.result.repeated).toBe(true);
    expect(again.result.outgoing).toEqual(data.outgoing[0]);
    expect(again.result.outgoing.request_id).toBe(msgId(1));
  });

  it('opens a second request to another key', () => {
    const one = after(emptyPairing(), planRequest(frozen(emptyPairing()), request(ann.key, msgId(1), T0)));
    const two = after(one, planRequest(one, request(ben.key, msgId(2), T0)));
    expect(two.outgoing.map((o) => o.to)).toEqual([ann.key, ben.key]);
    expect(two.control.map((c) => c.msg_id)).toEqual([msgId(1), msgId(2)]);
  });

  it('repeats even when the bounds are reached', () => {
    const full = filled({ outgoing: MAX_OUTGOING, accepts: MAX_CONTROL - MAX_OUTGOING });
    const change = planRequest(full, request(fillerKey('out', 5), msgId(9), T0));
    expect(change).toEqual({ next: undefined, result: { outgoing: full.outgoing[5], repeated: true, resent: false } });
  });

  it('queues an open request a relay already took again, with its id and code, so a receiver that dropped it gets it', () => {
    const data = after(emptyPairing(), planRequest(frozen(emptyPairing()), request(ann.key, msgId(1), T0)));
    const taken = after(data, controlDone(data, msgId(1)));
    const again = planRequest(frozen(taken), { ...request(ann.key, msgId(2), T0 + 5), text: 'my new name' });
    expect(again.result).toEqual({ outgoing: taken.outgoing[0], repeated: true, resent: true });
    expect(again.next?.outgoing).toEqual(taken.outgoing);
    expect(again.next?.control).toEqual([{ msg_id: msgId(1), kind: 'pair_request', to: ann.key, session: taken.outgoing[0]!.session, text: 'my new name', created_at: T0 }]);
    // Queued once: asking a third time before a relay took it changes nothing.
    expect(planRequest(after(taken, again), request(ann.key, msgId(3), T0 + 6))).toEqual({ next: undefined, result: { outgoing: taken.outgoing[0], repeated: true, resent: false } });
  });

  it('does not send again a request that was accepted (the answer is here), and refuses a resend with the queue full', () => {
    const data = after(emptyPairing(), planRequest(frozen(emptyPairing()), request(ann.key, msgId(1), T0)));
    const taken = after(data, controlDone(data, msgId(1)));
    const accepted = frozen({ ...taken, outgoing: [{ ...taken.outgoing[0]!, accepted: { msg_id: msgId(7), at: T0 + 1 } }] });
    expect(planRequest(accepted, request(ann.key, msgId(2), T0 + 5)).next).toBeUndefined();
    const full = frozen({ ...taken, control: filled({ accepts: MAX_CONTROL }).control });
    const before = structuredClone(full);
    throwsWith(() => planRequest(full, request(ann.key, msgId(2), T0 + 5)), 'pairing_full');
    expect(full).toEqual(before);
  });

  it(`refuses a ${MAX_OUTGOING + 1}th open request, changing nothing`, () => {
    const justRoom = filled({ outgoing: MAX_OUTGOING - 1 });
    expect(planRequest(justRoom, request(ann.key, msgId(1), T0)).next?.outgoing).toHaveLength(MAX_OUTGOING);
    const full = filled({ outgoing: MAX_OUTGOING, outgoingQueued: 0 });
    const before = structuredClone(full);
    const err = throwsWith(() => planRequest(full, request(ann.key, msgId(1), T0)), 'pairing_full');
    expect(err.message).toContain(String(MAX_OUTGOING));
    expect(full).toEqual(before);
  });

  it(`refuses when ${MAX_CONTROL} control messages wait, changing nothing`, () => {
    const justRoom = filled({ accepts: MAX_CONTROL - 1 });
    expect(planRequest(justRoom, request(ann.key, msgId(1), T0)).next?.control).toHaveLength(MAX_CONTROL);
    const full = filled({ accepts: MAX_CONTROL });
    const err = throwsWith(() => planRequest(full, request(ann.key, msgId(1), T0)), 'pairing_full');
    expect(err.message).toContain(String(MAX_CONTROL));
  });
});

describe('admitRequest', () => {
  const empty = frozen(emptyPairing());

  it('stores a new request', () => {
    const change = admitRequest(empty, incoming(ann, msgId(1), T0), T0);
    expect(change.result).toBe('stored');
    expect(change.next?.incoming).toEqual([incoming(ann, msgId(1), T0)]);
  });

  it('keeps one request per key: a strictly newer one (by its signed ts) replaces it', () => {
    const one = after(empty, admitRequest(empty, incoming(ann, msgId(1), T0), T0));
    const change = admitRequest(one, incoming(ann, msgId(2), T0 + 1), T0 + 1);
    expect(change.result).toBe('replaced');
    expect(change.next?.incoming).toEqual([incoming(ann, msgId(2), T0 + 1)]);
    // Newer by its ts, whenever it arrives: even received before the open one was.
    const early = incoming(ann, msgId(3), T0 - 5, T0 + 1);
    expect(admitRequest(one, early, T0 - 5)).toEqual({ next: { ...one, incoming: [early] }, result: 'replaced' });
  });

  it("changes nothing for another request from the same key whose ts is equal to or older than the open one's", () => {
    const open = incoming(ann, msgId(1), T0 + 100);
    const one = frozen({ ...emptyPairing(), incoming: [open, incoming(ben, msgId(9), T0)] });
    const table: Array<[string, Incoming]> = [
      ['equal ts', incoming(ann, msgId(2), T0 + 100)],
      ['equal ts, received later', incoming(ann, msgId(2), T0 + 5000, T0 + 100)],
      ['older by 1 ms', incoming(ann, msgId(2), T0 + 200, T0 + 99)],
      ['older by a day, received later', incoming(ann, msgId(2), T0 + 200, T0 + 100 - DAY)],
    ];
    for (const [label, req] of table) expect(admitRequest(one, req, req.received_at), label).toEqual({ next: undefined, result: 'duplicate' });
    // Newer by 1 ms replaces, and leaves the other key's request alone.
    const newer = incoming(ann, msgId(2), T0 + 101);
    expect(admitRequest(one, newer, T0 + 101)).toEqual({ next: { ...one, incoming: [incoming(ben, msgId(9), T0), newer] }, result: 'replaced' });
  });

  it('counts a missing ts as 0', () => {
    const stamped = incoming(ann, msgId(1), T0);
    const bare = withoutTs(incoming(ann, msgId(2), T0 + 10));
    // With nothing open from the key, a request without ts is stored as it came.
    const change = admitRequest(empty, bare, T0 + 10);
    expect(change).toEqual({ next: { ...emptyPairing(), incoming: [bare] }, result: 'stored' });
    expect(change.next?.incoming[0]).not.toHaveProperty('ts');
    const openBare = after(empty, change);
    // Any ts above 0 is newer than none; none is not newer than a ts, nor than none.
    expect(admitRequest(openBare, stamped, T0 + 20)).toEqual({ next: { ...openBare, incoming: [stamped] }, result: 'replaced' });
    expect(admitRequest(openBare, incoming(ann, msgId(3), T0 + 20, 1), T0 + 20).result).toBe('replaced');
    expect(admitRequest(openBare, incoming(ann, msgId(3), T0 + 20, 0), T0 + 20)).toEqual({ next: undefined, result: 'duplicate' });
    expect(admitRequest(openBare, withoutTs(incoming(ann, msgId(3), T0 + 20)), T0 + 20)).toEqual({ next: undefined, result: 'duplicate' });
    const openStamped = frozen({ ...emptyPairing(), incoming: [stamped] });
    expect(admitRequest(openStamped, bare, T0 + 20)).toEqual({ next: undefined, result: 'duplicate' });
  });

  it('treats the same id from another key as another request', () => {
    const one = after(empty, admitRequest(empty, incoming(ann, msgId(1), T0), T0));
    const change = admitRequest(one, incoming(ben, msgId(1), T0), T0);
    expect(change.result).toBe('stored');
    expect(change.next?.incoming.map((i) => i.from)).toEqual([ann.key, ben.key]);
  });

  it('changes nothing for a replay of an open request', () => {
    const one = after(empty, admitRequest(empty, incoming(ann, msgId(1), T0), T0));
    expect(admitRequest(one, incoming(ann, msgId(1), T0 + 50), T0 + 50)).toEqual({ next: undefined, result: 'duplicate' });
  });

  it('changes nothing for a replay of an accepted, rejected or confirmed request while it is remembered', () => {
    for (const outcome of ['accepted', 'rejected', 'confirmed'] as const) {
      const data = frozen({ ...emptyPairing(), handled: [{ from: ann.key, msg_id: msgId(1), outcome, until: T0 + DAY }] });
      expect(admitRequest(data, incoming(ann, msgId(1), T0), T0), outcome).toEqual({ next: undefined, result: 'duplicate' });
      expect(admitRequest(data, incoming(ann, msgId(1), T0 + DAY - 1), T0 + DAY - 1), outcome).toEqual({ next: undefined, result: 'duplicate' });
      // Another key's request with that id is not a replay.
      expect(admitRequest(data, incoming(ben, msgId(1), T0), T0).result).toBe('stored');
    }
  });

  it('forgets what it handled once the entry expires: a replay then is stored again (the gate refuses it as stale first)', () => {
    const data = frozen({ ...emptyPairing(), handled: [{ from: ann.key, msg_id: msgId(1), outcome: 'rejected', until: T0 + DAY }] });
    const change = admitRequest(data, incoming(ann, msgId(1), T0 + DAY), T0 + DAY);
    expect(change.result).toBe('stored');
    expect(change.next?.handled).toEqual([]);
  });

  it('cannot be swapped back: the replay of a replaced request is older than the open one, so it is a duplicate and changes nothing', () => {
    // A replaced request is neither open nor handled, and pairing messages do not enter the
    // mailbox's replay set; a relay that kept the older signed envelope replays it with its
    // original ts, which is older than the open request's.
    const first = incoming(ann, msgId(1), T0);
    const second = incoming(ann, msgId(2), T0 + 10);
    const one = after(empty, admitRequest(empty, first, T0));
    const two = after(one, admitRequest(one, second, T0 + 10));
    for (const at of [T0 + 20, T0 + HANDLED_MS]) {
      expect(admitRequest(two, { ...first, received_at: at }, at), String(at)).toEqual({ next: undefined, result: 'duplicate' });
    }
    expect(findIncoming(two, ann.fingerprint)).toEqual(second);
    // The newer request itself, replayed, is a duplicate too.
    expect(admitRequest(two, { ...second, received_at: T0 + 30 }, T0 + 30)).toEqual({ next: undefined, result: 'duplicate' });
  });

  it('forgets a replaced request once the open one is closed: its replay is shown again (DESIGN.md "Pairing", bounded memory)', () => {
    // A decision: the ts rule compares with the open request only. After the newer request
    // was rejected, the older one is neither open nor handled, and a relay that kept it can
    // bring it back while the gate still admits it: a person sees that knock again.
    const first = incoming(ann, msgId(1), T0);
    const second = incoming(ann, msgId(2), T0 + 10);
    const two = after(empty, admitRequest(after(empty, admitRequest(empty, first, T0)), second, T0 + 10));
    const rejected = after(two, reject(two, ann.fingerprint, T0 + 20));
    expect(admitRequest(rejected, second, T0 + 30)).toEqual({ next: undefined, result: 'duplicate' });
    const replay = { ...first, received_at: T0 + 30 };
    expect(admitRequest(rejected, replay, T0 + 30)).toEqual({ next: { ...rejected, incoming: [replay] }, result: 'stored' });
  });

  it('remembers a request handled at once, dated the most the gate allows ahead, for as long as the gate admits a copy', () => {
    // Rejected the moment it arrived, signed MAX_FUTURE_MS ahead: the gate admits a copy
    // until its ts is MAX_PAST_MS old, so HANDLED_MS must span both.
    const t = T0 + 1000;
    const future = incoming(ann, msgId(1), t, t + MAX_FUTURE_MS);
    const stored = after(empty, admitRequest(empty, future, t));
    const rejected = after(stored, reject(stored, ann.fingerprint, t));
    const gateAdmits = (at: number) => future.ts! <= at + MAX_FUTURE_MS && future.ts! >= at - MAX_PAST_MS;
    for (const at of [t, t + MAX_PAST_MS, t + HANDLED_MS - 1]) {
      expect(gateAdmits(at), String(at)).toBe(true);
      expect(admitRequest(rejected, { ...future, received_at: at }, at), String(at)).toEqual({ next: undefined, result: 'duplicate' });
    }
    // The last of those is the last millisecond the gate admits it; from the next one, when
    // the entry is gone, the gate refuses it as stale.
    expect(gateAdmits(t + HANDLED_MS - 1)).toBe(true);
    expect(gateAdmits(t + HANDLED_MS)).toBe(false);
  });

  it('prunes expired handled entries when it writes, and keeps live ones', () => {
    const handled: Handled[] = [
      { from: ann.key, msg_id: msgId(7), outcome: 'accepted', until: T0 },
      { from: ben.key, msg_id: msgId(8), outcome: 'rejected', until: T0 + 1 },
    ];
    const change = admitRequest(frozen({ ...emptyPairing(), handled }), incoming(cat, msgId(1), T0), T0);
    expect(change.next?.handled).toEqual([handled[1]]);
  });

  it(`makes room past ${MAX_INCOMING} for a new key's request by evicting the oldest open one`, () => {
    const almost = filled({ incoming: MAX_INCOMING - 1 });
    const below = admitRequest(almost, incoming(ann, msgId(1), T0), T0);
    expect(below).toEqual({ next: { ...almost, incoming: [...almost.incoming, incoming(ann, msgId(1), T0)] }, result: 'stored' });
    const full = filled({ incoming: MAX_INCOMING });
    const change = admitRequest(full, incoming(ann, msgId(1), T0), T0);
    // The first in the array (the oldest) goes, the new one is appended; nothing is remembered as handled.
    expect(change).toEqual({ next: { ...full, incoming: [...full.incoming.slice(1), incoming(ann, msgId(1), T0)], dropped: { count: 1, since: T0, last_at: T0 } }, result: 'evicted' });
    const evicted = after(full, change);
    expect(evicted.incoming).toHaveLength(MAX_INCOMING);
    expect(findIncoming(evicted, fillerFingerprint(0))).toBeUndefined();
    expect(findIncoming(evicted, ann.fingerprint)).toEqual(incoming(ann, msgId(1), T0));
    expect(evicted.handled).toEqual([]);
    // The next new key evicts the next oldest: the first filler's successor, not the newcomer.
    const again = admitRequest(evicted, incoming(ben, msgId(2), T0 + 1), T0 + 1);
    expect(again.result).toBe('evicted');
    expect(again.next?.incoming).toEqual([...full.incoming.slice(2), incoming(ann, msgId(1), T0), incoming(ben, msgId(2), T0 + 1)]);
    // Counted, since the first drop, for a person (pair list, status).
    expect(again.next?.dropped).toEqual({ count: 2, since: T0, last_at: T0 + 1 });
  });

  it('at the bound keeps requests from known keys (peers asking again, keys this session asked) and drops the oldest stranger', () => {
    const full = filled({ incoming: MAX_INCOMING });
    const peer = fillerKey('in', 0);
    const asked = fillerKey('in', 1);
    const crossing = frozen({ ...full, outgoing: [{ request_id: msgId(77), to: asked, session: 's', petname: 'asked', created_at: T0, code: 'c' }] });
    const change = admitRequest(crossing, incoming(ann, msgId(1), T0), T0, new Set([peer]));
    expect(change.result).toBe('evicted');
    expect(change.next?.incoming.map((i) => i.from)).toEqual([peer, asked, ...full.incoming.slice(3).map((i) => i.from), ann.key]);
    // Every open request from a known key: the oldest of them goes.
    const allKnown = new Set(full.incoming.map((i) => i.from));
    expect(admitRequest(full, incoming(ann, msgId(1), T0), T0, allKnown).next?.incoming[0]).toEqual(full.incoming[1]);
  });

  it('forgets the drop count once a person saw it, unless more were dropped after', () => {
    const full = filled({ incoming: MAX_INCOMING });
    const one = after(full, admitRequest(full, incoming(ann, msgId(1), T0), T0));
    const seen = one.dropped!;
    expect(clearDropped(one, seen).next).not.toHaveProperty('dropped');
    expect(pairingFileSchema.parse(clearDropped(one, seen).next)).toEqual(clearDropped(one, seen).next);
    const two = after(one, admitRequest(one, incoming(ben, msgId(2), T0 + 1), T0 + 1));
    expect(clearDropped(two, seen)).toEqual({ next: undefined, result: undefined });
    expect(clearDropped(frozen(emptyPairing()), seen)).toEqual({ next: undefined, result: undefined });
  });

  it(`does not evict at ${MAX_INCOMING} when a key replaces its own request or repeats one`, () => {
    const full = filled({ incoming: MAX_INCOMING });
    const replacing = { key: fillerKey('in', 3), fingerprint: fillerFingerprint(3) };
    // Only by a newer request: the filler's was signed at T0 - 1000.
    expect(admitRequest(full, incoming(replacing, msgId(1), T0, T0 - 1000), T0)).toEqual({ next: undefined, result: 'duplicate' });
    // A replay of an open request changes nothing either.
    expect(admitRequest(full, full.incoming[0]!, T0)).toEqual({ next: undefined, result: 'duplicate' });
    const change = admitRequest(full, incoming(replacing, msgId(1), T0), T0);
    expect(change.result).toBe('replaced');
    // Every other key keeps its request; the replaced one moves to the end (it is now the newest).
    expect(change.next?.incoming).toEqual([...full.incoming.filter((i) => i.from !== replacing.key), incoming(replacing, msgId(1), T0)]);
    // The oldest key replacing its own does not evict itself or anyone.
    const oldest = { key: fillerKey('in', 0), fingerprint: fillerFingerprint(0) };
    const own = admitRequest(full, incoming(oldest, msgId(2), T0), T0);
    expect(own).toEqual({ next: { ...full, incoming: [...full.incoming.slice(1), incoming(oldest, msgId(2), T0)] }, result: 'replaced' });
    // A key that replaced its own is no longer the oldest: a new key evicts the one after it.
    const replaced = after(full, own);
    const next = admitRequest(replaced, incoming(ann, msgId(3), T0 + 1), T0 + 1);
    expect(next.result).toBe('evicted');
    expect(findIncoming(next.next!, oldest.fingerprint)).toEqual(incoming(oldest, msgId(2), T0));
    expect(findIncoming(next.next!, fillerFingerprint(1))).toBeUndefined();
  });

  it('does not remember an evicted request: its replay is a new request again and evicts in turn (DESIGN.md "Pairing", bounded memory)', () => {
    // A decision: eviction writes no handled entry, so a relay that kept the evicted
    // envelope can bring it back while the gate still admits it.
    const full = filled({ incoming: MAX_INCOMING });
    const evicted = after(full, admitRequest(full, incoming(ann, msgId(1), T0), T0));
    const replay = { ...full.incoming[0]!, received_at: T0 + 1 };
    const change = admitRequest(evicted, replay, T0 + 1);
    expect(change).toEqual({ next: { ...evicted, incoming: [...evicted.incoming.slice(1), replay], dropped: { count: 2, since: T0, last_at: T0 + 1 } }, result: 'evicted' });
  });
});

describe('findIncoming and checkControlRoom', () => {
  it('finds the open request by exact fingerprint', () => {
    const data = after(emptyPairing(), admitRequest(frozen(emptyPairing()), incoming(ann, msgId(1), T0), T0));
    expect(findIncoming(data, ann.fingerprint)).toEqual(incoming(ann, msgId(1), T0));
    expect(findIncoming(data, ben.fingerprint)).toBeUndefined();
  });

  it(`has room below ${MAX_CONTROL} control messages`, () => {
    expect(() => checkControlRoom(filled({ accepts: MAX_CONTROL - 1 }))).not.toThrow();
    throwsWith(() => checkControlRoom(filled({ accepts: MAX_CONTROL })), 'pairing_full');
    throwsWith(() => checkControlRoom(filled({ outgoing: MAX_OUTGOING, accepts: MAX_CONTROL - MAX_OUTGOING })), 'pairing_full');
  });
});

describe('commitAccept', () => {
  const open = incoming(ann, msgId(1), T0);
  const job = acceptJob(open, msgId(50), T0 + 10);
  const withOpen = frozen({ ...emptyPairing(), incoming: [open] });

  it('closes the request, queues the acceptance and remembers the request for HANDLED_MS', () => {
    const change = commitAccept(withOpen, open, job, T0 + 10);
    expect(change.result).toEqual({ queued: true });
    expect(change.next).toEqual({
      v: 1,
      outgoing: [],
      incoming: [],
      control: [job],
      handled: [{ from: ann.key, msg_id: msgId(1), outcome: 'accepted', until: T0 + 10 + HANDLED_MS }],
    });
  });

  it('is idempotent: a closed request changes nothing, and reports whether its acceptance still waits', () => {
    const accepted = after(withOpen, commitAccept(withOpen, open, job, T0 + 10));
    expect(commitAccept(accepted, open, job, T0 + 20)).toEqual({ next: undefined, result: { queued: true } });
    expect(commitAccept(accepted, open, { ...job, msg_id: msgId(51) }, T0 + 20)).toEqual({ next: undefined, result: { queued: false } });
    const sent = after(accepted, controlDone(accepted, msgId(50)));
    expect(commitAccept(sent, open, job, T0 + 20)).toEqual({ next: undefined, result: { queued: false } });
  });

  it('queues a retried acceptance once, even when its request was meanwhile forgotten and received again', () => {
    const accepted = after(withOpen, commitAccept(withOpen, open, job, T0 + 10));
    // HANDLED_MS later the request is forgotten; the same request arrives again while the job still waits.
    const later = T0 + 10 + HANDLED_MS;
    const again = after(accepted, admitRequest(accepted, open, later));
    expect(again.incoming).toEqual([open]);
    const retried = after(again, commitAccept(again, open, job, later));
    expect(retried.control).toEqual([job]);
    expect(retried.incoming).toEqual([]);
  });

  it('refuses when the control queue is full, changing nothing', () => {
    const full = frozen({ ...filled({ accepts: MAX_CONTROL }), incoming: [open] });
    const before = structuredClone(full);
    throwsWith(() => commitAccept(full, open, job, T0), 'pairing_full');
    expect(full).toEqual(before);
  });

  it('does not close a newer request from the same key', () => {
    const newer = incoming(ann, msgId(2), T0 + 5);
    const data = frozen({ ...emptyPairing(), incoming: [newer] });
    expect(commitAccept(data, open, job, T0 + 10)).toEqual({ next: undefined, result: { queued: false } });
  });

  it("does not touch another key's open request that carries the same id", () => {
    const mimic = incoming(ben, msgId(1), T0 + 1);
    const data = frozen({ ...emptyPairing(), incoming: [open, mimic] });
    const change = commitAccept(data, open, job, T0 + 10);
    expect(change.next?.incoming).toEqual([mimic]);
    const accepted = after(data, change);
    // Accepting the same request again changes nothing, the mimic included.
    expect(commitAccept(accepted, open, job, T0 + 20).next).toBeUndefined();
    // And a request that was only ever the mimic's is not closed by accepting the original.
    const onlyMimic = frozen({ ...emptyPairing(), incoming: [mimic] });
    expect(commitAccept(onlyMimic, open, job, T0 + 10).next).toBeUndefined();
  });
});

describe('reject', () => {
  const open = incoming(ann, msgId(1), T0);

  it('closes the request and remembers it for HANDLED_MS, so a replay changes nothing', () => {
    const data = frozen({ ...emptyPairing(), incoming: [open, incoming(ben, msgId(2), T0)] });
    const change = reject(data, ann.fingerprint, T0 + 10);
    expect(change.result).toEqual(open);
    expect(change.next?.incoming).toEqual([incoming(ben, msgId(2), T0)]);
    expect(change.next?.handled).toEqual([{ from: ann.key, msg_id: msgId(1), outcome: 'rejected', until: T0 + 10 + HANDLED_MS }]);
    const rejected = after(data, change);
    expect(admitRequest(rejected, open, T0 + 20)).toEqual({ next: undefined, result: 'duplicate' });
    expect(wasHandled(rejected, ann.key, msgId(1), T0 + 10 + HANDLED_MS - 1)).toBe(true);
    expect(wasHandled(rejected, ann.key, msgId(1), T0 + 10 + HANDLED_MS)).toBe(false);
  });

  it('refuses a fingerprint with no open request', () => {
    const data = frozen({ ...emptyPairing(), incoming: [open] });
    const err = throwsWith(() => reject(data, ben.fingerprint, T0), 'unknown_request');
    expect(err.message).toContain(ben.fingerprint);
    throwsWith(() => reject(data, ann.fingerprint.toUpperCase(), T0), 'unknown_request');
  });

  it("does not touch another key's open request that carries the same id", () => {
    const mimic = incoming(ben, msgId(1), T0 + 1);
    const data = frozen({ ...emptyPairing(), incoming: [open, mimic] });
    const change = reject(data, ben.fingerprint, T0 + 10);
    expect(change.result).toEqual(mimic);
    expect(change.next?.incoming).toEqual([open]);
  });
});

describe('matchAccept', () => {
  const { text: _a, ...toAnn } = request(ann.key, msgId(1), T0);
  const { text: _b, ...toBen } = request(ben.key, msgId(2), T0);
  const data = frozen({ ...emptyPairing(), outgoing: [toAnn, toBen] });
  const table: Array<[string, string, string | undefined, Outgoing | undefined]> = [
    ['in_reply_to names the request', ann.key, msgId(1), toAnn],
    ['no in_reply_to, key has a request', ann.key, undefined, toAnn],
    ["in_reply_to names another key's request", ann.key, msgId(2), undefined],
    ['in_reply_to names nothing', ann.key, msgId(3), undefined],
    ['a key without a request', cat.key, undefined, undefined],
    ['a key without a request naming one', cat.key, msgId(1), undefined],
  ];
  for (const [label, from, inReplyTo, expected] of table) {
    it(label, () => expect(matchAccept(data, from, inReplyTo)).toEqual(expected));
  }
  it('matches nothing when nothing is open', () => expect(matchAccept(frozen(emptyPairing()), ann.key, undefined)).toBeUndefined());
});

describe('commitAccepted and wasHandled', () => {
  const { text: _t, ...toAnn } = request(ann.key, msgId(1), T0);
  const { text: _u, ...toBen } = request(ben.key, msgId(2), T0);
  const data = frozen({ ...emptyPairing(), outgoing: [toAnn, toBen] });

  it('closes the request and remembers the acceptance', () => {
    const change = commitAccepted(data, toAnn, msgId(60), undefined, T0 + 5);
    expect(change.next?.outgoing).toEqual([toBen]);
    expect(change.next?.handled).toEqual([{ from: ann.key, msg_id: msgId(60), outcome: 'confirmed', until: T0 + 5 + HANDLED_MS }]);
    const next = after(data, change);
    expect(wasHandled(next, ann.key, msgId(60), T0 + 5)).toBe(true);
    expect(wasHandled(next, ben.key, msgId(60), T0 + 5)).toBe(false);
    expect(wasHandled(next, ann.key, msgId(1), T0 + 5)).toBe(false);
    expect(matchAccept(next, ann.key, undefined)).toBeUndefined();
  });

  it('keeps a request whose petname meanwhile names another key open, marked with the conflict', () => {
    const change = commitAccepted(data, toAnn, msgId(60), 'petname taken', T0 + 5);
    expect(change.next?.outgoing).toEqual([{ ...toAnn, conflict: 'petname taken' }, toBen]);
    expect(change.next?.handled).toEqual([{ from: ann.key, msg_id: msgId(60), outcome: 'confirmed', until: T0 + 5 + HANDLED_MS }]);
  });

  it('prunes expired handled entries when it writes', () => {
    const old = frozen({ ...data, handled: [{ from: cat.key, msg_id: msgId(9), outcome: 'rejected', until: T0 }] });
    expect(commitAccepted(old, toAnn, msgId(60), undefined, T0).next?.handled.map((h) => h.msg_id)).toEqual([msgId(60)]);
  });

  describe("the request's own pair_request job", () => {
    // Both requests planned (their pair_request jobs queued), and an acceptance to ann queued
    // too (ann had also asked us): only the job with the request's msg_id goes.
    const planned = after(emptyPairing(), planRequest(frozen(emptyPairing()), request(ann.key, msgId(1), T0)));
    const both = after(planned, planRequest(planned, request(ben.key, msgId(2), T0)));
    const acceptance: ControlJob = { msg_id: msgId(70), kind: 'pair_accept', to: ann.key, session: 's', text: 'my name', in_reply_to: msgId(71), created_at: T0 };
    const queued = frozen({ ...both, control: [...both.control, acceptance] });
    const [annJob, benJob] = queued.control as [ControlJob, ControlJob, ControlJob];
    const taken = after(queued, controlDone(queued, msgId(1)));
    const table: Array<[string, PairingData, Outgoing, string | undefined, ControlJob[], Outgoing[]]> = [
      ['is dropped when the accept arrives while it still waits for a relay', queued, toAnn, undefined, [benJob, acceptance], [toBen]],
      ["is dropped for the other request too, and only its own", queued, toBen, undefined, [annJob, acceptance], [toAnn]],
      ['is not needed when a relay already took it: the queue stays as it is', taken, toAnn, undefined, [benJob, acceptance], [toBen]],
      ['stays queued when the accept conflicts, since the request stays open', queued, toAnn, 'petname taken', [annJob, benJob, acceptance], [{ ...toAnn, conflict: 'petname taken' }, toBen]],
      ['stays queued through a conflict after a relay took it', taken, toAnn, 'petname taken', [benJob, acceptance], [{ ...toAnn, conflict: 'petname taken' }, toBen]],
    ];
    for (const [label, data, answered, conflict, control, outgoing] of table) {
      it(label, () => {
        expect(data.outgoing).toEqual([toAnn, toBen]);
        const change = commitAccepted(data, answered, msgId(60), conflict, T0 + 5);
        expect(change.next).toEqual({
          v: 1,
          outgoing,
          incoming: [],
          control,
          handled: [{ from: answered.to, msg_id: msgId(60), outcome: 'confirmed', until: T0 + 5 + HANDLED_MS }],
        });
      });
    }

    it('drops it after a conflict once a later accept closes the request', () => {
      const conflicted = after(queued, commitAccepted(queued, toAnn, msgId(60), 'petname taken', T0 + 5));
      const open = matchAccept(conflicted, ann.key, msgId(1));
      expect(open).toEqual({ ...toAnn, conflict: 'petname taken' });
      const closed = after(conflicted, commitAccepted(conflicted, open!, msgId(61), undefined, T0 + 6));
      expect(closed.control).toEqual([benJob, acceptance]);
      expect(closed.outgoing).toEqual([toBen]);
    });
  });
});

describe('controlDone', () => {
  it('removes exactly the accepted control message', () => {
    const data = filled({ outgoing: 3 });
    const change = controlDone(data, msgId(100_001));
    expect(change.next?.control.map((c) => c.msg_id)).toEqual([msgId(100_000), msgId(100_002)]);
    expect(change.next?.outgoing).toEqual(data.outgoing);
  });

  it('changes nothing for an unknown id', () => {
    expect(controlDone(filled({ outgoing: 3 }), msgId(5))).toEqual({ next: undefined, result: undefined });
  });
});

describe('bounds', () => {
  it('are the documented numbers', () => {
    expect([MAX_OUTGOING, MAX_INCOMING, MAX_CONTROL, HANDLED_MS]).toEqual([64, 64, 128, 7 * DAY + 60_000 + 1]);
    // The gate's freshness window, 7 days in the past and 60 s in the future, both ends inclusive.
    expect(HANDLED_MS).toBe(MAX_PAST_MS + MAX_FUTURE_MS + 1);
  });
});

// ---------------------------------------------------------------------------------------
// The model: the rules as plain maps, written without reading the implementation's code.
// ---------------------------------------------------------------------------------------

interface Model {
  outgoing: Map<string, Outgoing>; // by `to`
  /** By `from`, in the order of the array: oldest first, a replaced request moving to the end. */
  incoming: Map<string, Incoming>;
  control: Map<string, ControlJob>; // by msg_id
  handled: Handled[];
  /** msg_ids a relay accepted (controlDone). */
  done: Set<string>;
}

function modelOf(data: PairingData): Model {
  return {
    outgoing: new Map(data.outgoing.map((o) => [o.to, o])),
    incoming: new Map(data.incoming.map((i) => [i.from, i])),
    control: new Map(data.control.map((c) => [c.msg_id, c])),
    handled: [...data.handled],
    done: new Set(data.outgoing.map((o) => o.request_id).filter((id) => !data.control.some((c) => c.msg_id === id))),
  };
}

const live = (handled: readonly Handled[], now: number): Handled[] => handled.filter((h) => h.until > now);
const modelHandled = (m: Model, from: string, id: string, now: number): boolean => live(m.handled, now).some((h) => h.from === from && h.msg_id === id);

function sortBy<T>(items: readonly T[], key: (item: T) => string): T[] {
  return [...items].sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
}

/** What must agree between the real data and the model (handled entries: the live ones). */
function view(outgoing: readonly Outgoing[], incoming: readonly Incoming[], control: readonly ControlJob[], handled: readonly Handled[], now: number) {
  return {
    outgoing: sortBy(outgoing, (o) => o.to),
    incoming: sortBy(incoming, (i) => i.from),
    control: sortBy(control, (c) => c.msg_id),
    handled: sortBy(live(handled, now), (h) => `${h.from} ${h.msg_id} ${h.outcome} ${h.until}`),
  };
}

type Op =
  | { op: 'plan'; target: number }
  /**
   * A request from pool[from] (from = pool.length: from the key of the oldest open request,
   * a filler's or the pool's; pool[0] when none is open). Its ts, when the key sends this id for the first time, is
   * set against the key's open request (older, equal or newer by `delta`; with none open,
   * against now), or now, or left out; a request sent before is replayed with its original ts.
   */
  | { op: 'admit'; from: number; id: number | 'fresh'; ts: 'older' | 'equal' | 'newer' | 'now' | 'none'; delta: number }
  | { op: 'reject'; pick: number; open: boolean }
  | { op: 'accept'; pick: number }
  | { op: 'acceptStale'; pick: number }
  | { op: 'acceptRetry' }
  | { op: 'answer'; pick: number; fromOpen: boolean; reply: 'match' | 'none' | 'other'; acceptId: number | 'fresh'; conflict: boolean }
  | { op: 'done'; pick: number; known: boolean }
  | { op: 'tick'; ms: number };

const POOL_IDS = 4;
const ACCEPT_IDS = 4;

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ op: fc.constant('plan' as const), target: fc.nat(99) }) },
  {
    weight: 5,
    arbitrary: fc.record({
      op: fc.constant('admit' as const),
      from: fc.nat(pool.length),
      id: fc.oneof({ weight: 3, arbitrary: fc.nat(POOL_IDS - 1) }, { weight: 2, arbitrary: fc.constant('fresh' as const) }),
      ts: fc.oneof({ weight: 6, arbitrary: fc.constantFrom('older' as const, 'equal' as const, 'newer' as const, 'now' as const) }, { weight: 1, arbitrary: fc.constant('none' as const) }),
      delta: fc.oneof(fc.constant(1), fc.integer({ min: 1, max: 2 * 60 * 60 * 1000 })),
    }),
  },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('reject' as const), pick: fc.nat(99), open: fc.boolean() }) },
  { weight: 3, arbitrary: fc.record({ op: fc.constant('accept' as const), pick: fc.nat(99) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('acceptStale' as const), pick: fc.nat(99) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('acceptRetry' as const) }) },
  {
    weight: 3,
    arbitrary: fc.record({
      op: fc.constant('answer' as const),
      pick: fc.nat(99),
      fromOpen: fc.boolean(),
      reply: fc.constantFrom('match' as const, 'none' as const, 'other' as const),
      acceptId: fc.oneof(fc.nat(ACCEPT_IDS - 1), fc.constant('fresh' as const)),
      conflict: fc.boolean(),
    }),
  },
  { weight: 3, arbitrary: fc.record({ op: fc.constant('done' as const), pick: fc.nat(199), known: fc.boolean() }) },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant('tick' as const),
      ms: fc.oneof(fc.integer({ min: 0, max: 60_000 }), fc.constantFrom(HANDLED_MS - 1, HANDLED_MS, HANDLED_MS + 1), fc.integer({ min: 0, max: 30 * 60 * 60 * 1000 })),
    }),
  },
);

const nearBound = (max: number) => fc.oneof(fc.constantFrom(0, 1, max - 1, max), fc.integer({ min: 0, max }));

const startArb = fc
  .record({ outgoing: nearBound(MAX_OUTGOING), queuedShare: fc.double({ min: 0, max: 1, noNaN: true }), incoming: nearBound(MAX_INCOMING), accepts: nearBound(MAX_CONTROL) })
  .map(({ outgoing, queuedShare, incoming, accepts }) => {
    const outgoingQueued = queuedShare > 0.7 ? outgoing : Math.floor(outgoing * queuedShare);
    return { outgoing, outgoingQueued, incoming, accepts: Math.min(accepts, MAX_CONTROL - outgoingQueued) };
  });

function checkInvariants(data: PairingData, m: Model, now: number, label: string): void {
  expect(data.outgoing.length, label).toBeLessThanOrEqual(MAX_OUTGOING);
  expect(data.incoming.length, label).toBeLessThanOrEqual(MAX_INCOMING);
  expect(data.control.length, label).toBeLessThanOrEqual(MAX_CONTROL);
  expect(new Set(data.outgoing.map((o) => o.to)).size, label).toBe(data.outgoing.length);
  expect(new Set(data.incoming.map((i) => i.from)).size, label).toBe(data.incoming.length);
  // The array's order is the model's: the first is the oldest, the one a new key evicts at the bound.
  expect(data.incoming.map((i) => i.from), label).toEqual([...m.incoming.keys()]);
  expect(new Set(data.control.map((c) => c.msg_id)).size, label).toBe(data.control.length);
  // Every open request had its pair_request queued, and it stays queued until a relay took it.
  // An accept without conflict closes the request and drops its job if still queued, so the
  // job never outlives its request (a conflicting accept leaves both).
  for (const o of data.outgoing) {
    const job = data.control.find((c) => c.msg_id === o.request_id);
    if (m.done.has(o.request_id)) expect(job, label).toBeUndefined();
    else expect(job, label).toMatchObject({ kind: 'pair_request', to: o.to, session: o.session, created_at: o.created_at });
  }
  const openTo = new Map(data.outgoing.map((o) => [o.request_id, o.to]));
  for (const c of data.control) {
    if (c.kind === 'pair_request') expect(openTo.get(c.msg_id), label).toBe(c.to);
  }
  expect(view(data.outgoing, data.incoming, data.control, data.handled, now), label).toEqual(
    view([...m.outgoing.values()], [...m.incoming.values()], [...m.control.values()], m.handled, now),
  );
}

describe('transitions agree with the model over random operation sequences', () => {
  // 400 sequences take about 14 s alone; on two cores shared with the whole suite and other
  // jobs they took over a minute once, so the bound is three.
  it('keeps every bound and invariant, refuses without change, and ignores replays', () => {
    let fullRefusals = 0;
    let replays = 0;
    let evictions = 0;
    let replacedAtBound = 0;
    let forgotten = 0;
    let shared = 0;
    let conflicts = 0;
    let notNewer = 0;
    let swapBacks = 0;
    let newer = 0;
    let bare = 0;
    let answeredQueued = 0;
    let answeredSent = 0;
    let resends = 0;
    fc.assert(
      fc.property(startArb, fc.array(opArb, { maxLength: 80, size: 'max' }), (start, ops) => {
        let data = filled(start);
        const m = modelOf(data);
        let now = T0;
        let fresh = 0;
        const seenIncoming: Incoming[] = [];
        /** The ts each (key, request id) was first signed with: a replay carries it again. */
        const signed = new Map<string, number | undefined>();
        let lastAccept: { request: Incoming; job: ControlJob } | undefined;
        const nextId = () => msgId(1_000_000 + fresh++);

        /** Runs a transition that may be refused: a refusal must be pairing_full and leave everything as it was. */
        const attempt = <R>(run: () => Change<R>, expectFull: boolean, label: string): Change<R> | undefined => {
          const before = structuredClone(data);
          if (expectFull) {
            throwsWith(run, 'pairing_full');
            expect(data, label).toEqual(before);
            fullRefusals++;
            return undefined;
          }
          return run();
        };

        for (const [step, op] of ops.entries()) {
          const label = `step ${step}: ${JSON.stringify(op)}`;
          switch (op.op) {
            case 'plan': {
              const targets = [...pool.map((p) => p.key), ...sortBy([...m.outgoing.keys()], (k) => k)];
              const to = targets[op.target % targets.length]!;
              const req = request(to, nextId(), now);
              const open = m.outgoing.get(to);
              // An open request a relay took already, neither accepted nor in conflict, is queued again (same id).
              const resend = open !== undefined && !m.control.has(open.request_id) && open.accepted === undefined && open.conflict === undefined;
              const refuse = (open === undefined && (m.outgoing.size >= MAX_OUTGOING || m.control.size >= MAX_CONTROL)) || (resend && m.control.size >= MAX_CONTROL);
              const change = attempt(() => planRequest(data, req), refuse, label);
              if (change === undefined) break;
              if (open !== undefined && resend) {
                expect(change.result, label).toEqual({ outgoing: open, repeated: true, resent: true });
                m.control.set(open.request_id, { msg_id: open.request_id, kind: 'pair_request', to, session: open.session, text: req.text, created_at: open.created_at });
                m.done.delete(open.request_id);
                resends++;
              } else if (open !== undefined) {
                expect(change, label).toEqual({ next: undefined, result: { outgoing: open, repeated: true, resent: false } });
              } else {
                const { text, ...outgoing } = req;
                expect(change.result, label).toEqual({ outgoing, repeated: false, resent: false });
                m.outgoing.set(to, outgoing);
                m.control.set(outgoing.request_id, { msg_id: outgoing.request_id, kind: 'pair_request', to, session: outgoing.session, text, created_at: now });
              }
              data = after(data, change);
              break;
            }
            case 'admit': {
              const oldest = m.incoming.values().next().value;
              const from = op.from < pool.length ? pool[op.from]! : oldest !== undefined ? { key: oldest.from, fingerprint: oldest.fingerprint } : pool[0]!;
              const id = op.id === 'fresh' ? nextId() : msgId(op.id + 1);
              const open = m.incoming.get(from.key);
              const sentBefore = signed.has(`${from.key} ${id}`);
              let ts: number | undefined;
              if (sentBefore) ts = signed.get(`${from.key} ${id}`);
              else {
                const base = open === undefined ? now : (open.ts ?? 0);
                ts = { older: base - op.delta, equal: base, newer: base + op.delta, now, none: undefined }[op.ts];
                signed.set(`${from.key} ${id}`, ts);
              }
              const req = ts === undefined ? withoutTs(incoming(from, id, now)) : incoming(from, id, now, ts);
              if (ts === undefined) bare++;
              // The same request (handled, or the open one) is a replay; another one from a key
              // with an open request replaces it only when strictly newer (no ts counts as 0),
              // and moves to the end; a new key at the bound evicts the oldest (the first).
              const dup = modelHandled(m, from.key, id, now) || open?.request_id === id;
              const older = !dup && open !== undefined && (req.ts ?? 0) <= (open.ts ?? 0);
              const expected = dup || older ? 'duplicate' : open !== undefined ? 'replaced' : m.incoming.size >= MAX_INCOMING ? 'evicted' : 'stored';
              const change = admitRequest(data, req, now);
              expect(change.result, label).toBe(expected);
              if (expected === 'duplicate') {
                expect(change.next, label).toBeUndefined();
                if (dup) replays++;
                else {
                  notNewer++;
                  // A request this key sent before, replaced since: a relay swapping it back.
                  if (sentBefore) swapBacks++;
                }
              } else {
                if (expected === 'replaced') {
                  newer++;
                  if (m.incoming.size >= MAX_INCOMING) replacedAtBound++;
                  m.incoming.delete(from.key);
                }
                if (expected === 'evicted') {
                  evictions++;
                  // The oldest from a key this session did not ask; the oldest of all when every one is asked.
                  const victim = [...m.incoming.values()].find((i) => !m.outgoing.has(i.from)) ?? oldest!;
                  m.incoming.delete(victim.from);
                  const before = data.dropped;
                  expect(change.next?.dropped, label).toEqual({ count: (before?.count ?? 0) + 1, since: before?.since ?? now, last_at: now });
                }
                // Handled more than HANDLED_MS ago: forgotten, so the same request is admitted again.
                if (m.handled.some((h) => h.from === from.key && h.msg_id === id)) forgotten++;
                expect(change.next?.handled.every((h) => h.until > now), label).toBe(true);
                m.incoming.set(from.key, req);
                seenIncoming.push(req);
              }
              data = after(data, change);
              break;
            }
            case 'reject': {
              const open = sortBy([...m.incoming.values()], (i) => i.from);
              const fingerprint = op.open && open.length > 0 ? open[op.pick % open.length]!.fingerprint : pool[op.pick % pool.length]!.fingerprint;
              const target = open.find((i) => i.fingerprint === fingerprint);
              if (target === undefined) {
                const before = structuredClone(data);
                throwsWith(() => reject(data, fingerprint, now), 'unknown_request');
                expect(data, label).toEqual(before);
                break;
              }
              const change = reject(data, fingerprint, now);
              expect(change.result, label).toEqual(target);
              m.incoming.delete(target.from);
              m.handled.push({ from: target.from, msg_id: target.request_id, outcome: 'rejected', until: now + HANDLED_MS });
              data = after(data, change);
              break;
            }
            case 'accept':
            case 'acceptStale':
            case 'acceptRetry': {
              let req: Incoming | undefined;
              let job: ControlJob | undefined;
              if (op.op === 'accept') {
                const open = sortBy([...m.incoming.values()], (i) => i.from);
                req = open.length > 0 ? open[op.pick % open.length] : undefined;
                // The operator's path: findIncoming, then the room check, then commitAccept.
                if (req !== undefined) expect(findIncoming(data, req.fingerprint), label).toEqual(req);
              } else if (op.op === 'acceptStale') {
                req = seenIncoming.length > 0 ? seenIncoming[op.pick % seenIncoming.length] : undefined;
              } else {
                req = lastAccept?.request;
                job = lastAccept?.job;
              }
              if (req === undefined) break;
              job ??= acceptJob(req, nextId(), now);
              lastAccept = { request: req, job };
              const stillOpen = m.incoming.get(req.from)?.request_id === req.request_id;
              if ([...m.incoming.values()].some((i) => i.request_id === req.request_id && i.from !== req.from)) shared++;
              const change = attempt(() => commitAccept(data, req, job, now), stillOpen && m.control.size >= MAX_CONTROL, label);
              if (change === undefined) break;
              if (!stillOpen) {
                expect(change, label).toEqual({ next: undefined, result: { queued: m.control.has(job.msg_id) } });
              } else {
                expect(change.result, label).toEqual({ queued: true });
                m.incoming.delete(req.from);
                m.control.set(job.msg_id, job);
                m.handled.push({ from: req.from, msg_id: req.request_id, outcome: 'accepted', until: now + HANDLED_MS });
              }
              data = after(data, change);
              break;
            }
            case 'answer': {
              const open = sortBy([...m.outgoing.values()], (o) => o.to);
              const from = op.fromOpen && open.length > 0 ? open[op.pick % open.length]!.to : pool[op.pick % pool.length]!.key;
              const mine = m.outgoing.get(from);
              const inReplyTo = op.reply === 'none' ? undefined : op.reply === 'match' && mine !== undefined ? mine.request_id : msgId(999);
              const acceptId = op.acceptId === 'fresh' ? nextId() : msgId(2_000_000 + op.acceptId);
              // The receiving side's path: a handled acceptance is a replay, then match, then commit.
              const handled = wasHandled(data, from, acceptId, now);
              expect(handled, label).toBe(modelHandled(m, from, acceptId, now));
              if (handled) {
                replays++;
                break;
              }
              const match = matchAccept(data, from, inReplyTo);
              const expected = mine !== undefined && (inReplyTo === undefined || inReplyTo === mine.request_id) ? mine : undefined;
              expect(match, label).toEqual(expected);
              if (match === undefined) break;
              const conflict = op.conflict ? `petname ${match.petname} already names another key` : undefined;
              const change = commitAccepted(data, match, acceptId, conflict, now);
              expect(change.next?.handled.every((h) => h.until > now), label).toBe(true);
              if (conflict === undefined) {
                // Answered: the request closes, and its pair_request need not go out any more.
                m.outgoing.delete(from);
                if (m.control.delete(match.request_id)) answeredQueued++;
                else answeredSent++;
              } else {
                conflicts++;
                m.outgoing.set(from, { ...match, conflict });
              }
              m.handled.push({ from, msg_id: acceptId, outcome: 'confirmed', until: now + HANDLED_MS });
              data = after(data, change);
              break;
            }
            case 'done': {
              const queued = sortBy([...m.control.keys()], (k) => k);
              const id = op.known && queued.length > 0 ? queued[op.pick % queued.length]! : msgId(3_000_000 + op.pick);
              const change = controlDone(data, id);
              if (m.control.has(id)) {
                m.control.delete(id);
                m.done.add(id);
              } else {
                expect(change, label).toEqual({ next: undefined, result: undefined });
              }
              data = after(data, change);
              break;
            }
            case 'tick':
              now += op.ms;
              break;
          }
          checkInvariants(data, m, now, label);
        }
      }),
      {
        numRuns: 400,
        // Counterexamples found earlier, kept: the same id from two keys; a retried acceptance
        // after HANDLED_MS. Then a relay swapping a replaced request back; an accept arriving
        // while the request's pair_request still waits, after a conflict.
        examples: [
          [
            { outgoing: 0, outgoingQueued: 0, incoming: 0, accepts: 0 },
            [{ op: 'admit', from: 0, id: 1, ts: 'now', delta: 1 }, { op: 'admit', from: 1, id: 1, ts: 'now', delta: 1 }, { op: 'accept', pick: 0 }],
          ],
          [
            { outgoing: 0, outgoingQueued: 0, incoming: 0, accepts: 0 },
            [
              { op: 'admit', from: 4, id: 1, ts: 'now', delta: 1 },
              { op: 'acceptStale', pick: 0 },
              { op: 'tick', ms: HANDLED_MS },
              { op: 'admit', from: 4, id: 1, ts: 'now', delta: 1 },
              { op: 'acceptRetry' },
            ],
          ],
          [
            { outgoing: 0, outgoingQueued: 0, incoming: 0, accepts: 0 },
            [
              { op: 'admit', from: 0, id: 0, ts: 'now', delta: 1 },
              { op: 'tick', ms: 10 },
              { op: 'admit', from: 0, id: 'fresh', ts: 'newer', delta: 1 },
              { op: 'admit', from: 0, id: 0, ts: 'newer', delta: 1 },
              { op: 'admit', from: 0, id: 'fresh', ts: 'equal', delta: 1 },
            ],
          ],
          [
            { outgoing: 0, outgoingQueued: 0, incoming: 0, accepts: 0 },
            [
              { op: 'plan', target: 0 },
              { op: 'answer', pick: 0, fromOpen: true, reply: 'match', acceptId: 0, conflict: true },
              { op: 'answer', pick: 0, fromOpen: true, reply: 'none', acceptId: 1, conflict: false },
            ],
          ],
        ],
      },
    );
    // The runs did reach the interesting places.
    expect(fullRefusals).toBeGreaterThan(0);
    expect(replays).toBeGreaterThan(0);
    expect(evictions).toBeGreaterThan(0);
    expect(replacedAtBound).toBeGreaterThan(0);
    expect(forgotten).toBeGreaterThan(0);
    expect(shared).toBeGreaterThan(0);
    expect(conflicts).toBeGreaterThan(0);
    expect(notNewer).toBeGreaterThan(0);
    expect(swapBacks).toBeGreaterThan(0);
    expect(newer).toBeGreaterThan(0);
    expect(bare).toBeGreaterThan(0);
    expect(answeredQueued).toBeGreaterThan(0);
    expect(answeredSent).toBeGreaterThan(0);
    expect(resends).toBeGreaterThan(0);
  }, 180_000);
});
