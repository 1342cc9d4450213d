/**
 * The trust gate, table-tested against a reference written here from the rules
 * (DESIGN.md "The trust gate", PROTOCOL.md "Receiving: the trust gate"): every check is evaluated on its own, and the verdict must be the first
 * failure in the fixed order signature → recipient (key, then the signed session of a
 * version 3 envelope) → kind → authorization → freshness → replay. Envelopes are really signed; invalid signatures are really invalid.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isSealed, wireOf, type Envelope, type SealedWire, type WireEnvelope } from '../../src/envelope/envelope.js';
import { openEnvelope } from '../../src/envelope/open.js';
import { signEnvelope } from '../../src/envelope/sign.js';
import { signedBytes } from '../../src/envelope/signed-bytes.js';
import { MAX_FUTURE_MS, MAX_HOLD_MS, MAX_PAST_MS, decide, type Admission, type GateContext, type OutstandingRequest, type RejectCode } from '../../src/gate/decide.js';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { generateSigningKey, signBytes, type SigningKey } from '../../src/identity/ed25519.js';

const MINUTE = 60_000;
const DAY = 24 * 60 * MINUTE;
const WINDOW = 7 * DAY;
const NOW = 1_900_000_000_000;

interface Party {
  signingKey: SigningKey;
  key: string;
}

function newParty(): Party {
  const signingKey = generateSigningKey();
  return { signingKey, key: encodeBase64url(signingKey.publicKey) };
}

const me = newParty();
const peer = newParty();
const stranger = newParty();
const elsewhere = newParty();
const PEER_NAME = 'alice';

/**
 * Envelope fields are always well formed; a bad signature comes from editing a signed
 * field: the text of a clear envelope, one byte of a sealed one's ciphertext.
 */
function tamper(envelope: WireEnvelope): WireEnvelope {
  if (!isSealed(envelope)) return { ...envelope, text: `${envelope.text} (edited in transit)` };
  const bytes = Buffer.from(envelope.sealed, 'base64url');
  bytes[20] = bytes[20]! ^ 1;
  return { ...envelope, sealed: bytes.toString('base64url') };
}

/**
 * A body sealed for `elsewhere`, signed by `sender` in an envelope to `to`: the signature
 * holds, the seal does not open for `to` (what a sender that spliced a body, or a bug, makes).
 */
function splice(sender: Party, envelope: SealedWire): SealedWire {
  const foreign = wireOf(signEnvelope(sender.signingKey, { to: elsewhere.key, to_session: envelope.to_session, text: 'for someone else', ts: envelope.ts, msg_id: envelope.msg_id, kind: envelope.kind })) as SealedWire;
  const unsigned = { ...envelope, sealed: foreign.sealed };
  const { sig: _sig, ...fields } = unsigned;
  return { ...unsigned, sig: signBytes(sender.signingKey, signedBytes(fields)).toString('base64url') };
}

const open = (wire: SealedWire): Envelope => openEnvelope(me.signingKey, wire);

const msgId = (n: number): string => n.toString(16).padStart(32, '0');
const REQUEST_ID = msgId(0xaaa);
const OTHER_ID = msgId(0xbbb);

// ---------------------------------------------------------------------------------------
// Reference: each check on its own, then the first failure in the documented order.
// ---------------------------------------------------------------------------------------

const ORDER: readonly RejectCode[] = [
  'bad_signature',
  'wrong_recipient',
  'wrong_session',
  'unsupported_kind',
  'bad_seal',
  'unsealed',
  'not_allowlisted',
  'unexpected_pairing',
  'unsolicited_accept',
  'from_future',
  'stale',
  'replay',
];

interface Facts {
  signatureValid: boolean;
  from: string;
  to: string;
  /** The signed target session (versions 3 and 4), or undefined (version 2). */
  toSession: string | undefined;
  sealed: boolean;
  /** Whether a sealed body opens for me. */
  opens: boolean;
  /** Whether the sender is a peer marked clear. */
  clearAllowed: boolean;
  session: string;
  kind: string;
  ts: number;
  msgId: string;
  inReplyTo: string | undefined;
  me: string;
  peers: ReadonlyMap<string, string>;
  requests: readonly OutstandingRequest[];
  now: number;
  seen: boolean;
}

type Expected =
  | { ok: false; code: RejectCode }
  | { ok: true; admission: Admission; kind: string; sender: string; petname?: string };

function authorizationFailure(f: Facts): RejectCode | undefined {
  const answersMine = f.requests.some((r) => r.to === f.from && (f.inReplyTo === undefined || f.inReplyTo === r.msg_id));
  if (f.from === f.me) return f.kind === 'message' || f.kind === 'receipt' ? undefined : 'unexpected_pairing';
  // A peer may knock again (it may have removed me), and answer my open request.
  if (f.peers.has(f.from)) return f.kind === 'pair_accept' && !answersMine ? 'unexpected_pairing' : undefined;
  if (f.kind === 'message' || f.kind === 'receipt') return 'not_allowlisted';
  if (f.kind === 'pair_request') return undefined;
  return answersMine ? undefined : 'unsolicited_accept';
}

function failures(f: Facts): Set<RejectCode> {
  const found = new Set<RejectCode>();
  if (!f.signatureValid) found.add('bad_signature');
  if (f.to !== f.me) found.add('wrong_recipient');
  if (f.toSession !== undefined && f.toSession !== f.session) found.add('wrong_session');
  if (f.sealed && !f.opens) found.add('bad_seal');
  if (!f.sealed && !f.clearAllowed) found.add('unsealed');
  if (!['message', 'pair_request', 'pair_accept', 'receipt'].includes(f.kind)) found.add('unsupported_kind');
  else {
    const auth = authorizationFailure(f);
    if (auth !== undefined) found.add(auth);
  }
  if (f.ts - f.now > MINUTE) found.add('from_future');
  if (f.now - f.ts > WINDOW) found.add('stale');
  if (f.seen) found.add('replay');
  return found;
}

/** What the reference judges: the envelope's own fields, whether its signature holds, and the receiver's context. */
function factsOf(
  envelope: WireEnvelope,
  signatureValid: boolean,
  context: Pick<Facts, 'peers' | 'requests' | 'now' | 'seen'> & { opens?: boolean; clearAllowed?: boolean; inReplyTo?: string },
): Facts {
  const { opens = true, clearAllowed = false, inReplyTo = isSealed(envelope) ? undefined : envelope.in_reply_to, ...rest } = context;
  return {
    signatureValid,
    from: envelope.from,
    to: envelope.to,
    toSession: envelope.to_session,
    sealed: isSealed(envelope),
    opens: isSealed(envelope) && opens,
    clearAllowed,
    session: SESSION,
    kind: envelope.kind,
    ts: envelope.ts,
    msgId: envelope.msg_id,
    inReplyTo,
    me: me.key,
    ...rest,
  };
}

function expectedVerdict(f: Facts): { verdict: Expected; consultsSeen: boolean } {
  const found = failures(f);
  const first = ORDER.find((code) => found.has(code));
  const consultsSeen = first === undefined || first === 'replay';
  if (first !== undefined) return { verdict: { ok: false, code: first }, consultsSeen };
  const admission: Admission = f.kind !== 'message' ? (f.kind as Admission) : f.from === f.me ? 'self' : 'peer';
  // A receipt from a peer carries its petname, like a message.
  const petname = f.from !== f.me ? f.peers.get(f.from) : undefined;
  const verdict: Expected = { ok: true, admission, kind: f.kind, sender: f.from, ...(petname !== undefined && { petname }) };
  return { verdict, consultsSeen };
}

/**
 * The verdict without its human-readable reason and without the admitted envelope, which
 * are checked separately: the envelope must be the message as signed, its body opened.
 */
function shape(verdict: ReturnType<typeof decide>, text?: string): Expected {
  if (!verdict.ok) {
    expect(verdict.reason.length).toBeGreaterThan(0);
    return { ok: false, code: verdict.code };
  }
  const { envelope, ...rest } = verdict;
  if (text !== undefined) expect(envelope.text).toBe(text);
  expect(envelope.from).toBe(verdict.sender);
  return rest;
}

// ---------------------------------------------------------------------------------------
// The exhaustive table.
// ---------------------------------------------------------------------------------------

type SenderRole = 'me' | 'peer' | 'stranger';
type Outstanding = 'none' | 'matching' | 'other' | 'no_in_reply_to' | 'to_someone_else';

const SENDERS: Record<SenderRole, Party> = { me, peer, stranger };
const KINDS = ['message', 'pair_request', 'pair_accept', 'receipt', 'goodbye'] as const;
const OUTSTANDING: readonly Outstanding[] = ['none', 'matching', 'other', 'no_in_reply_to', 'to_someone_else'];
const SESSION = 'main';
/**
 * Version 2 (no signed session, clear); for this session and for a sibling: version 4
 * (sealed), version 4 with a body sealed for someone else (spliced), and version 3 (clear).
 */
const FORMS = [
  { target: undefined, form: 'v2' },
  ...[SESSION, 'sibling'].flatMap((target) => (['v4', 'spliced', 'v3'] as const).map((form) => ({ target, form }))),
] as const;
const TS_OFFSETS = [0, MINUTE, MINUTE + 1, 10 * MINUTE + 1, -WINDOW, -WINDOW - 1] as const;

function requestsFor(outstanding: Outstanding, sender: Party): { requests: OutstandingRequest[]; inReplyTo?: string } {
  switch (outstanding) {
    case 'none':
      return { requests: [], inReplyTo: REQUEST_ID };
    case 'matching':
      return { requests: [{ to: sender.key, msg_id: REQUEST_ID }], inReplyTo: REQUEST_ID };
    case 'other':
      return { requests: [{ to: sender.key, msg_id: REQUEST_ID }], inReplyTo: OTHER_ID };
    case 'no_in_reply_to':
      return { requests: [{ to: sender.key, msg_id: REQUEST_ID }] };
    case 'to_someone_else':
      return { requests: [{ to: elsewhere.key, msg_id: REQUEST_ID }], inReplyTo: REQUEST_ID };
  }
}

describe('decide: every combination of sender, kind, outstanding request, clock, replay, signature and recipient', () => {
  const peers = new Map([[peer.key, PEER_NAME]]);

  for (const role of Object.keys(SENDERS) as SenderRole[]) {
    for (const kind of KINDS) {
      it(`${role} sending ${kind}`, () => {
        const sender = SENDERS[role];
        let cases = 0;
        for (const outstanding of OUTSTANDING) {
          const { requests, inReplyTo } = requestsFor(outstanding, sender);
          for (const offset of TS_OFFSETS) {
            for (const [toMe, { target, form }] of [true, false].flatMap((m) => FORMS.map((f) => [m, f] as const))) {
              const signed = wireOf(
                signEnvelope(sender.signingKey, {
                  to: toMe ? me.key : elsewhere.key,
                  ...(target !== undefined && { to_session: target }),
                  ...(form === 'v3' && { version: 3 as const }),
                  text: 'hello',
                  kind,
                  ts: NOW + offset,
                  msg_id: msgId(cases + 1),
                  ...(inReplyTo !== undefined && { in_reply_to: inReplyTo }),
                }),
              );
              const formed = form === 'spliced' ? splice(sender, signed as SealedWire) : signed;
              for (const signatureValid of [true, false]) {
                const envelope = signatureValid ? formed : tamper(formed);
                for (const clearAllowed of [false, true]) {
                  for (const seen of [true, false]) {
                    const seenCalls: Array<[string, string]> = [];
                    const ctx: GateContext = {
                      me: me.key,
                      session: SESSION,
                      peers,
                      clear: new Set(clearAllowed ? [sender.key] : []),
                      open,
                      outstandingRequests: requests,
                      now: NOW,
                      seen: (from, id) => {
                        seenCalls.push([from, id]);
                        return seen;
                      },
                    };
                    // A body sealed for someone else opens only for them; one sealed to
                    // `elsewhere` (toMe false) does not open for me either.
                    const opens = form === 'v4' && toMe;
                    const facts = factsOf(envelope, signatureValid, { peers, requests, now: NOW, seen, opens, clearAllowed, ...(inReplyTo !== undefined && { inReplyTo }) });
                    const { verdict, consultsSeen } = expectedVerdict(facts);
                    const label = JSON.stringify({ role, kind, outstanding, offset, toMe, target, form, signatureValid, clearAllowed, seen });
                    expect(shape(decide(envelope, ctx), 'hello'), label).toStrictEqual(verdict);
                    expect(seenCalls, `seen calls for ${label}`).toEqual(consultsSeen ? [[sender.key, envelope.msg_id]] : []);
                    cases++;
                  }
                }
              }
            }
          }
        }
        expect(cases).toBe(OUTSTANDING.length * TS_OFFSETS.length * 2 * FORMS.length * 2 * 2 * 2);
      });
    }
  }
});

describe('decide: order and side effects', () => {
  const peers = new Map([[peer.key, PEER_NAME]]);
  const throwingSeen = (): boolean => {
    throw new Error('the replay set must not be consulted here');
  };
  // Clear envelopes allowed from everyone here, so these version 2 cases reach the later steps.
  const base = { me: me.key, session: SESSION, peers, outstandingRequests: [], now: NOW, open, clear: new Set([me.key, peer.key, stranger.key, elsewhere.key]) };

  it("rejects a stranger's plain message before it costs a replay slot", () => {
    const envelope = signEnvelope(stranger.signingKey, { to: me.key, text: 'hi', ts: NOW });
    const verdict = decide(envelope, { ...base, seen: throwingSeen });
    expect(verdict).toMatchObject({ ok: false, code: 'not_allowlisted' });
  });

  it('never consults the replay set for an envelope rejected earlier', () => {
    const rejectedEarly: WireEnvelope[] = [
      tamper(signEnvelope(peer.signingKey, { to: me.key, text: 'hi', ts: NOW })),
      signEnvelope(peer.signingKey, { to: elsewhere.key, text: 'hi', ts: NOW }),
      signEnvelope(peer.signingKey, { to: me.key, to_session: 'sibling', text: 'hi', ts: NOW }),
      signEnvelope(peer.signingKey, { to: me.key, text: 'hi', ts: NOW, kind: 'goodbye' }),
      signEnvelope(peer.signingKey, { to: me.key, text: 'hi', ts: NOW, kind: 'pair_accept' }),
      signEnvelope(me.signingKey, { to: me.key, text: 'hi', ts: NOW, kind: 'pair_request' }),
      signEnvelope(stranger.signingKey, { to: me.key, text: 'hi', ts: NOW, kind: 'pair_accept' }),
      signEnvelope(peer.signingKey, { to: me.key, text: 'hi', ts: NOW + MINUTE + 1 }),
      signEnvelope(peer.signingKey, { to: me.key, text: 'hi', ts: NOW - WINDOW - 1 }),
    ];
    for (const envelope of rejectedEarly) expect(decide(envelope, { ...base, seen: throwingSeen }).ok).toBe(false);
  });

  it('checks the signature first, once, and before anything else is looked at', () => {
    const calls: string[] = [];
    const envelope = signEnvelope(stranger.signingKey, { to: elsewhere.key, text: 'hi', ts: NOW + DAY, kind: 'goodbye' });
    const verdict = decide(envelope, {
      ...base,
      seen: throwingSeen,
      verify: (e) => {
        calls.push(e.msg_id);
        return false;
      },
    });
    expect(verdict).toMatchObject({ ok: false, code: 'bad_signature' });
    expect(calls).toEqual([envelope.msg_id]);
  });

  it('identifies the sender by the signature, never by the claimed from', () => {
    // A stranger signs, then claims to be the peer: the signature no longer matches `from`.
    const signed = signEnvelope(stranger.signingKey, { to: me.key, text: 'trust me', ts: NOW });
    const forged: Envelope = { ...signed, from: peer.key };
    expect(decide(forged, { ...base, seen: () => false })).toMatchObject({ ok: false, code: 'bad_signature' });
    // The same signature under a different claimed recipient fails too.
    const redirected: Envelope = { ...signEnvelope(peer.signingKey, { to: elsewhere.key, text: 'x', ts: NOW }), to: me.key };
    expect(decide(redirected, { ...base, seen: () => false })).toMatchObject({ ok: false, code: 'bad_signature' });
  });

  it('takes the session from the signature: a version 3 envelope moved to another session fails, as does a stripped version', () => {
    const signed = signEnvelope(peer.signingKey, { to: me.key, to_session: 'sibling', text: 'x', ts: NOW, version: 3 });
    expect(decide(signed, { ...base, seen: () => false })).toMatchObject({ ok: false, code: 'wrong_session' });
    // A relay that rewrites the session (or the reply session) breaks the signature.
    const moved: Envelope = { ...signed, to_session: SESSION };
    expect(decide(moved, { ...base, seen: () => false })).toMatchObject({ ok: false, code: 'bad_signature' });
    const withReply = signEnvelope(peer.signingKey, { to: me.key, to_session: SESSION, text: 'x', ts: NOW, reply_to: `${peer.key}#desk`, version: 3 });
    expect(decide(withReply, { ...base, seen: () => false }).ok).toBe(true);
    expect(decide({ ...withReply, reply_to: `${peer.key}#elsewhere` }, { ...base, seen: () => false })).toMatchObject({ ok: false, code: 'bad_signature' });
    // Dropping `v` and `to_session` turns it into a version 2 envelope, whose domain differs.
    const { v: _v, to_session: _s, ...stripped } = withReply;
    expect(decide(stripped, { ...base, seen: () => false })).toMatchObject({ ok: false, code: 'bad_signature' });
  });

  it('takes the session, the reply session and the body of a version 4 envelope from what was signed and sealed', () => {
    const signed = wireOf(signEnvelope(peer.signingKey, { to: me.key, to_session: SESSION, text: 'sealed', ts: NOW, reply_to: `${peer.key}#desk`, task_id: 't1' })) as SealedWire;
    const sealedOnly = { ...base, clear: new Set<string>(), seen: () => false };
    const admitted = decide(signed, sealedOnly);
    expect(admitted.ok && admitted.envelope).toMatchObject({ text: 'sealed', reply_to: `${peer.key}#desk`, task_id: 't1', to_session: SESSION });
    // Moved to another session (or re-targeted, or re-timed): the signature no longer holds.
    for (const moved of [{ ...signed, to_session: 'sibling' }, { ...signed, to: elsewhere.key }, { ...signed, ts: NOW + 1 }, { ...signed, msg_id: msgId(77) }]) {
      expect(decide(moved, sealedOnly)).toMatchObject({ ok: false, code: 'bad_signature' });
    }
    // Clear fields a relay adds beside the seal are not the message: parsing drops them, and
    // even handed to the gate they are ignored for the sealed body.
    const decorated = { ...signed, text: 'relay text', reply_to: `${peer.key}#relay`, in_reply_to: msgId(5) } as unknown as SealedWire;
    const stillSealed = decide(decorated, sealedOnly);
    expect(stillSealed.ok && stillSealed.envelope).toMatchObject({ text: 'sealed', reply_to: `${peer.key}#desk` });
    expect(stillSealed.ok && stillSealed.envelope.in_reply_to).toBe(undefined);
    // A body spliced in from another sealed message of the same sender does not open here.
    expect(decide(splice(peer, signed), sealedOnly)).toMatchObject({ ok: false, code: 'bad_seal' });
    // Nor does one moved from a message for me to this one: the header is sealed with it.
    const other = wireOf(signEnvelope(peer.signingKey, { to: me.key, to_session: SESSION, text: 'other', ts: NOW + 5 })) as SealedWire;
    const swapped = { ...other, sealed: signed.sealed };
    const { sig: _sig, ...unsigned } = swapped;
    const resigned = { ...swapped, sig: signBytes(peer.signingKey, signedBytes(unsigned)).toString('base64url') };
    expect(decide(resigned, sealedOnly)).toMatchObject({ ok: false, code: 'bad_seal' });
  });

  it('refuses a clear envelope from a sender not marked clear, before authorization', () => {
    const sealedOnly = { ...base, clear: new Set<string>(), seen: () => false };
    for (const clear of [
      signEnvelope(peer.signingKey, { to: me.key, text: 'v2', ts: NOW }),
      signEnvelope(peer.signingKey, { to: me.key, to_session: SESSION, text: 'v3', ts: NOW, version: 3 }),
      signEnvelope(stranger.signingKey, { to: me.key, text: 'v2 knock', ts: NOW, kind: 'pair_request' }),
      signEnvelope(me.signingKey, { to: me.key, to_session: SESSION, text: 'old sibling', ts: NOW, version: 3 }),
    ]) {
      const verdict = decide(clear, sealedOnly);
      expect(verdict).toMatchObject({ ok: false, code: 'unsealed' });
      expect(!verdict.ok && verdict.reason).toContain('--clear');
    }
    expect(decide(signEnvelope(peer.signingKey, { to: me.key, text: 'v2', ts: NOW }), { ...sealedOnly, clear: new Set([peer.key]) }).ok).toBe(true);
  });

  it('admits with the petname for a peer and without one otherwise', () => {
    const seen = (): boolean => false;
    const fromPeer = decide(signEnvelope(peer.signingKey, { to: me.key, text: 'hi', ts: NOW }), { ...base, seen });
    expect(shape(fromPeer, 'hi')).toStrictEqual({ ok: true, admission: 'peer', kind: 'message', sender: peer.key, petname: PEER_NAME });
    const fromSelf = decide(signEnvelope(me.signingKey, { to: me.key, text: 'hi', ts: NOW }), { ...base, seen });
    expect(shape(fromSelf, 'hi')).toStrictEqual({ ok: true, admission: 'self', kind: 'message', sender: me.key });
    const knock = decide(signEnvelope(stranger.signingKey, { to: me.key, text: 'bob', ts: NOW, kind: 'pair_request' }), { ...base, seen });
    expect(shape(knock, 'bob')).toStrictEqual({ ok: true, admission: 'pair_request', kind: 'pair_request', sender: stranger.key });
    const answer = decide(
      signEnvelope(stranger.signingKey, { to: me.key, text: 'ok', ts: NOW, kind: 'pair_accept', in_reply_to: REQUEST_ID }),
      { ...base, outstandingRequests: [{ to: stranger.key, msg_id: REQUEST_ID }], seen },
    );
    expect(shape(answer, 'ok')).toStrictEqual({ ok: true, admission: 'pair_accept', kind: 'pair_accept', sender: stranger.key });
  });

  it('matches a pair_accept against any of several outstanding requests', () => {
    const requests = [
      { to: elsewhere.key, msg_id: msgId(1) },
      { to: stranger.key, msg_id: msgId(2) },
      { to: stranger.key, msg_id: msgId(3) },
    ];
    const accept = (inReplyTo: string): Envelope =>
      signEnvelope(stranger.signingKey, { to: me.key, text: 'ok', ts: NOW, kind: 'pair_accept', in_reply_to: inReplyTo });
    const ctx = { ...base, outstandingRequests: requests, seen: () => false };
    expect(decide(accept(msgId(3)), ctx).ok).toBe(true);
    expect(decide(accept(msgId(2)), ctx).ok).toBe(true);
    // msgId(1) was sent to someone else: an answer from the stranger does not match it.
    expect(decide(accept(msgId(1)), ctx)).toMatchObject({ ok: false, code: 'unsolicited_accept' });
  });
});

// ---------------------------------------------------------------------------------------
// Random clocks, peer sets, requests and replay sets.
// ---------------------------------------------------------------------------------------

describe('decide: random contexts agree with the reference', () => {
  // parties[0] is me; the others are peers or strangers depending on the drawn peer set.
  const parties: Party[] = [me, newParty(), newParty(), newParty(), newParty(), newParty()];
  const ids = [msgId(1), msgId(2), msgId(3)];

  const scenario = fc.record({
    now: fc.integer({ min: 3 * MAX_PAST_MS, max: 2 ** 48 }),
    peerIndexes: fc.uniqueArray(fc.integer({ min: 1, max: parties.length - 1 }), { maxLength: parties.length - 1 }),
    sender: fc.integer({ min: 0, max: parties.length - 1 }),
    recipient: fc.integer({ min: 0, max: parties.length - 1 }),
    kind: fc.constantFrom('message', 'pair_request', 'pair_accept', 'receipt', 'goodbye', 'ping'),
    tsOffset: fc.oneof(
      fc.constantFrom(0, MAX_FUTURE_MS, MAX_FUTURE_MS + 1, -MAX_PAST_MS, -MAX_PAST_MS - 1),
      fc.integer({ min: -2 * MAX_PAST_MS, max: 2 * MAX_FUTURE_MS }),
    ),
    msgIdIndex: fc.integer({ min: 0, max: ids.length - 1 }),
    inReplyToIndex: fc.option(fc.integer({ min: 0, max: ids.length - 1 }), { nil: undefined }),
    requests: fc.array(fc.record({ to: fc.integer({ min: 0, max: parties.length - 1 }), id: fc.integer({ min: 0, max: ids.length - 1 }) }), {
      maxLength: 4,
    }),
    seenPairs: fc.uniqueArray(fc.tuple(fc.integer({ min: 0, max: parties.length - 1 }), fc.integer({ min: 0, max: ids.length - 1 })), {
      maxLength: 6,
    }),
    signatureValid: fc.boolean(),
  });

  it('returns the first failing check, and consults the replay set only when nothing earlier failed', () => {
    fc.assert(
      fc.property(scenario, (s) => {
        const sender = parties[s.sender]!;
        const peers = new Map(s.peerIndexes.map((i) => [parties[i]!.key, `peer-${i}`]));
        const requests = s.requests.map((r) => ({ to: parties[r.to]!.key, msg_id: ids[r.id]! }));
        const seenSet = new Set(s.seenPairs.map(([p, i]) => `${parties[p]!.key}/${ids[i]!}`));
        const inReplyTo = s.inReplyToIndex === undefined ? undefined : ids[s.inReplyToIndex]!;
        const signed = signEnvelope(sender.signingKey, {
          to: parties[s.recipient]!.key,
          text: 'random',
          kind: s.kind,
          ts: s.now + s.tsOffset,
          msg_id: ids[s.msgIdIndex]!,
          ...(inReplyTo !== undefined && { in_reply_to: inReplyTo }),
        });
        const envelope = s.signatureValid ? signed : tamper(signed);
        let seenCalls = 0;
        const verdict = decide(envelope, {
          me: me.key,
          session: SESSION,
          peers,
          clear: new Set(parties.map((p) => p.key)),
          open,
          outstandingRequests: requests,
          now: s.now,
          seen: (from, id) => {
            seenCalls++;
            return seenSet.has(`${from}/${id}`);
          },
        });
        const expected = expectedVerdict(factsOf(envelope, s.signatureValid, { peers, requests, now: s.now, seen: seenSet.has(`${sender.key}/${envelope.msg_id}`), clearAllowed: true }));
        expect(shape(verdict)).toStrictEqual(expected.verdict);
        expect(seenCalls).toBe(expected.consultsSeen ? 1 : 0);
      }),
      { numRuns: 400 },
    );
  });

  it('admits exactly the window [now - 7 days, now + 60 s] for a peer message, and holds one up to 10 min ahead', () => {
    fc.assert(
      fc.property(fc.integer({ min: 3 * MAX_PAST_MS, max: 2 ** 48 }), fc.integer({ min: -3 * MAX_PAST_MS, max: 3 * MAX_HOLD_MS }), (now, offset) => {
        const envelope = wireOf(signEnvelope(peer.signingKey, { to: me.key, to_session: SESSION, text: 'tick', ts: now + offset }));
        const verdict = decide(envelope, { me: me.key, session: SESSION, peers: new Map([[peer.key, PEER_NAME]]), open, outstandingRequests: [], now, seen: () => false });
        const inWindow = offset <= MAX_FUTURE_MS && offset >= -MAX_PAST_MS;
        expect(verdict.ok).toBe(inWindow);
        if (!verdict.ok) expect(verdict.code).toBe(offset > 0 ? 'from_future' : 'stale');
        // Ahead by at most 10 minutes: held until it is within 60 s, never refused for good.
        if (!verdict.ok && offset > 0) expect(verdict.due).toBe(offset <= MAX_HOLD_MS ? now + offset - MAX_FUTURE_MS : undefined);
      }),
      { numRuns: 300 },
    );
  });

  it('names the constants the rules name', () => {
    expect(MAX_FUTURE_MS).toBe(60_000);
    expect(MAX_PAST_MS).toBe(7 * 86_400_000);
    expect(MAX_HOLD_MS).toBe(600_000);
  });
});
