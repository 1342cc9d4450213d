/**
 * The gate's pairing cases (src/gate/decide.ts) against outstanding requests, with real
 * signatures: a stranger may knock with pair_request, and may answer with pair_accept
 * only a request of mine that went to its key (by in_reply_to, or by key when it names
 * none); a peer may knock again and answer my open request; my own key never pairs.
 */
import { describe, expect, it } from 'vitest';
import { wireOf, type WireEnvelope } from '../../src/envelope/envelope.js';
import { openEnvelope } from '../../src/envelope/open.js';
import { signEnvelope, type EnvelopeFields } from '../../src/envelope/sign.js';
import { decide, type GateContext, type OutstandingRequest } from '../../src/gate/decide.js';
import { newIdentity } from '../helpers/fixtures.js';

const NOW = 1_900_000_000_000;
const msgId = (n: number): string => n.toString(16).padStart(32, '0');

const me = newIdentity(50);
const peer = newIdentity(51);
const stranger = newIdentity(52);
const other = newIdentity(53);

const REQUEST = msgId(0xa1);
const OTHER_REQUEST = msgId(0xa2);
const TO_OTHER = msgId(0xa3);

/** Sealed (version 4) for my session, as a relay carries it. */
function envelope(from: typeof me, fields: Partial<EnvelopeFields>): WireEnvelope {
  return wireOf(signEnvelope(from.signingKey, { to: me.key, to_session: 'main', text: 'hi', ts: NOW, ...fields }));
}

function context(outstandingRequests: OutstandingRequest[]): GateContext {
  return { me: me.key, session: 'main', peers: new Map([[peer.key, 'pete']]), open: (wire) => openEnvelope(me.signingKey, wire), outstandingRequests, now: NOW, seen: () => false };
}

const toStranger: OutstandingRequest = { to: stranger.key, msg_id: REQUEST };
const toStrangerAgain: OutstandingRequest = { to: stranger.key, msg_id: OTHER_REQUEST };
const toOther: OutstandingRequest = { to: other.key, msg_id: TO_OTHER };
const toPeer: OutstandingRequest = { to: peer.key, msg_id: REQUEST };

type Case = [label: string, from: typeof me, fields: Partial<EnvelopeFields>, requests: OutstandingRequest[], expected: Record<string, unknown>];

const admittedAccept = { ok: true, admission: 'pair_accept', kind: 'pair_accept', sender: stranger.key };

const cases: Case[] = [
  ['stranger pair_accept answering my request', stranger, { kind: 'pair_accept', in_reply_to: REQUEST }, [toStranger], admittedAccept],
  ['stranger pair_accept answering one of several requests', stranger, { kind: 'pair_accept', in_reply_to: REQUEST }, [toOther, toStrangerAgain, toStranger], admittedAccept],
  ['stranger pair_accept without in_reply_to, a request went to its key', stranger, { kind: 'pair_accept' }, [toOther, toStranger], admittedAccept],
  ['stranger pair_accept naming another of my requests to it', stranger, { kind: 'pair_accept', in_reply_to: OTHER_REQUEST }, [toStranger], { ok: false, code: 'unsolicited_accept' }],
  ["stranger pair_accept naming my request to someone else", stranger, { kind: 'pair_accept', in_reply_to: TO_OTHER }, [toOther, toStranger], { ok: false, code: 'unsolicited_accept' }],
  ['stranger pair_accept naming an unknown id', stranger, { kind: 'pair_accept', in_reply_to: msgId(0xff) }, [toStranger], { ok: false, code: 'unsolicited_accept' }],
  ['stranger pair_accept without in_reply_to, no request to its key', stranger, { kind: 'pair_accept' }, [toOther], { ok: false, code: 'unsolicited_accept' }],
  ['stranger pair_accept with nothing outstanding', stranger, { kind: 'pair_accept', in_reply_to: REQUEST }, [], { ok: false, code: 'unsolicited_accept' }],
  ['stranger pair_accept without in_reply_to, nothing outstanding', stranger, { kind: 'pair_accept' }, [], { ok: false, code: 'unsolicited_accept' }],
  ['stranger pair_request', stranger, { kind: 'pair_request' }, [], { ok: true, admission: 'pair_request', kind: 'pair_request', sender: stranger.key }],
  ['stranger pair_request while I have a request to it', stranger, { kind: 'pair_request' }, [toStranger], { ok: true, admission: 'pair_request', kind: 'pair_request', sender: stranger.key }],
  ['stranger plain message', stranger, {}, [], { ok: false, code: 'not_allowlisted' }],
  ['stranger plain message while I have a request to it', stranger, { in_reply_to: REQUEST }, [toStranger], { ok: false, code: 'not_allowlisted' }],
  ['peer pair_accept answering my open request (added by hand meanwhile)', peer, { kind: 'pair_accept', in_reply_to: REQUEST }, [toPeer], { ok: true, admission: 'pair_accept', kind: 'pair_accept', sender: peer.key, petname: 'pete' }],
  ['peer pair_accept answering no request of mine', peer, { kind: 'pair_accept', in_reply_to: REQUEST }, [toOther], { ok: false, code: 'unexpected_pairing' }],
  ['peer pair_request (it may have removed me and asks again)', peer, { kind: 'pair_request' }, [], { ok: true, admission: 'pair_request', kind: 'pair_request', sender: peer.key, petname: 'pete' }],
  ['my own pair_request', me, { kind: 'pair_request' }, [], { ok: false, code: 'unexpected_pairing' }],
  ['my own pair_accept', me, { kind: 'pair_accept', in_reply_to: REQUEST }, [{ to: me.key, msg_id: REQUEST }], { ok: false, code: 'unexpected_pairing' }],
  ['peer plain message', peer, {}, [toPeer], { ok: true, admission: 'peer', kind: 'message', sender: peer.key, petname: 'pete' }],
];

describe('decide with outstanding pairing requests', () => {
  for (const [label, from, fields, requests, expected] of cases) {
    it(label, () => {
      const verdict = decide(envelope(from, fields), context(requests));
      if (expected.ok === true) {
        const { envelope: admitted, ...rest } = verdict.ok ? verdict : { envelope: undefined };
        expect(rest).toStrictEqual(expected);
        expect(admitted?.text).toBe('hi');
      } else {
        expect(verdict).toMatchObject(expected);
        if (!verdict.ok) expect(verdict.reason.length).toBeGreaterThan(0);
      }
    });
  }

  it('checks freshness and replay after admitting a pairing message', () => {
    const accept = envelope(stranger, { kind: 'pair_accept', in_reply_to: REQUEST });
    expect(decide(accept, { ...context([toStranger]), seen: () => true })).toMatchObject({ ok: false, code: 'replay' });
    const old = envelope(stranger, { kind: 'pair_request', ts: NOW - 7 * 24 * 60 * 60 * 1000 - 1 });
    expect(decide(old, context([]))).toMatchObject({ ok: false, code: 'stale' });
    const ahead = envelope(stranger, { kind: 'pair_accept', in_reply_to: REQUEST, ts: NOW + 60_001 });
    expect(decide(ahead, context([toStranger]))).toMatchObject({ ok: false, code: 'from_future' });
    // Only trusted mail is held; a stranger's knock from the near future is refused, not held.
    const knock = envelope(stranger, { kind: 'pair_request', ts: NOW + 5 * 60_000 });
    expect(decide(knock, context([]))).toEqual({ ok: false, code: 'from_future', reason: expect.any(String) });
    const fromPeer = envelope(peer, { ts: NOW + 5 * 60_000 });
    expect(decide(fromPeer, context([]))).toMatchObject({ ok: false, code: 'from_future', due: NOW + 4 * 60_000 });
  });

  it('refuses an unsolicited accept before it costs a replay slot', () => {
    const accept = envelope(stranger, { kind: 'pair_accept', in_reply_to: OTHER_REQUEST });
    const verdict = decide(accept, {
      ...context([toStranger]),
      seen: () => {
        throw new Error('the replay set must not be consulted');
      },
    });
    expect(verdict).toMatchObject({ ok: false, code: 'unsolicited_accept' });
  });

  it('refuses an accept that another key signed but that claims to come from the stranger', () => {
    const signed = envelope(other, { kind: 'pair_accept', in_reply_to: REQUEST });
    expect(decide({ ...signed, from: stranger.key }, context([toStranger]))).toMatchObject({ ok: false, code: 'bad_signature' });
  });
});
