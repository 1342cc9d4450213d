/**
 * The inbound loop (src/agent/inbound.ts) on a real mailbox and replay index, against a
 * fake relay client: what it acknowledges, when, and what it holds and retries instead.
 * Where a test needs the clock (the backoff, a message from the future), it fakes the
 * timers: the loop's own file I/O does not wait on them.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Inbound, type InboundDeps } from '../../src/agent/inbound.js';
import type { Rejection } from '../../src/agent/rejected.js';
import { mailboxPath, replayPath } from '../../src/config/layout.js';
import { MAX_FUTURE_MS, MAX_HOLD_MS } from '../../src/gate/decide.js';
import { wireOf } from '../../src/envelope/envelope.js';
import { signEnvelope, type EnvelopeFields } from '../../src/envelope/sign.js';
import { Mailbox } from '../../src/mailbox/mailbox.js';
import { PeerTable } from '../../src/peers/peers.js';
import { ReplayIndex } from '../../src/replay/claims.js';
import { FakeRelayClient } from '../helpers/fake-relay-client.js';
import { eventually } from '../helpers/mcp.js';
import { message, newIdentity, tempDir } from '../helpers/fixtures.js';

const me = newIdentity(81);
const friend = newIdentity(82);
const stranger = newIdentity(83);
const peers = new PeerTable([{ petname: 'friend', key: friend.key, clear: true }]);
const route = `${me.key}#s1`;

let dir: { path: string; remove: () => Promise<void> };
let mailbox: Mailbox;
let replay: ReplayIndex;
let relay: FakeRelayClient;
let inbound: Inbound | undefined;
beforeEach(async () => {
  dir = await tempDir();
  mailbox = await Mailbox.open(mailboxPath(dir.path, me.key, 's1'));
  replay = await ReplayIndex.open(replayPath(dir.path, me.key));
  relay = new FakeRelayClient();
});
afterEach(async () => {
  vi.useRealTimers();
  inbound?.close();
  inbound = undefined;
  await mailbox.close();
  await replay.close();
  await dir.remove();
});

/** Session s1's inbound on the fake relay: the real mailbox and replay index, `friend` a peer; refusals collected. */
function start(deps: Partial<InboundDeps> = {}): { loop: Inbound; rejections: Rejection[] } {
  const rejections: Rejection[] = [];
  const loop = new Inbound({
    me,
    session: 's1',
    claim: (claim) => replay.claim(claim),
    mailbox,
    trust: async () => ({ table: peers, damaged: false }),
    outstanding: async () => [],
    pairing: async () => undefined,
    sticky: new Map(),
    rejected: async (entry) => void rejections.push(entry),
    ...deps,
  });
  loop.attach(relay.client, `${me.key}#s1`);
  inbound = loop;
  return { loop, rejections };
}

/** A message sealed for session s1 (version 4), as this implementation sends it; `message` makes a clear version 2 one. */
const sealed = (from: typeof me, to: typeof me, fields: Partial<EnvelopeFields> = {}) => wireOf(signEnvelope(from.signingKey, { to: to.key, to_session: 's1', text: 'hello', ...fields }));

const stored = async () => (await mailbox.all()).map((r) => r.envelope.text);
const acknowledged = (id: number) => eventually(async () => (relay.acked.includes(id) ? true : undefined), 10_000, `delivery ${id} acknowledged`);
const atLeast = (count: () => number, n: number, what: string) => eventually(async () => (count() >= n ? true : undefined), 10_000, what);

describe('inbound loop', () => {
  it('retries a delivery whose storage failed with a backoff from 250 ms doubling to 30 s, and acknowledges it once stored', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const failures = 9;
    let claims = 0;
    let judged = 0;
    const { loop } = start({
      trust: async () => {
        judged++;
        return { table: peers, damaged: false };
      },
      claim: async (claim) => {
        if (++claims <= failures) throw new Error('no space left on device');
        return replay.claim(claim);
      },
    });
    const id = relay.deliver(route, message(friend, me, { text: 'kept' }));
    await loop.settled();
    // Each attempt judges the delivery first, at once when its timer fires.
    for (const delay of [250, 500, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000]) {
      const attempts = judged;
      expect(relay.acked).toEqual([]);
      vi.advanceTimersByTime(delay - 1);
      expect(judged).toBe(attempts);
      vi.advanceTimersByTime(1);
      expect(judged).toBe(attempts + 1);
      await loop.settled();
    }
    expect(claims).toBe(failures + 1);
    expect(relay.acked).toEqual([id]);
    expect(await stored()).toEqual(['kept']);
  });

  it('holds a message from an unknown key while peers.json is damaged, and refuses it once it is not', async () => {
    let damaged = true;
    let judged = 0;
    const { loop, rejections } = start({
      trust: async () => {
        judged++;
        return { table: peers, damaged };
      },
    });
    const unknown = relay.deliver(route, sealed(stranger, me, { text: 'knock' }));
    const known = relay.deliver(route, message(friend, me, { text: 'hi' }));
    await acknowledged(known);
    // Judged again after a retry, still damaged: still not acknowledged.
    await atLeast(() => judged, 3, 'the held message to be judged again');
    await loop.settled();
    expect(relay.acked).toEqual([known]);
    expect(rejections).toEqual([]);
    damaged = false;
    await acknowledged(unknown);
    expect(rejections.map((r) => [r.from, r.code])).toEqual([[stranger.key, 'not_allowlisted']]);
    expect(await stored()).toEqual(['hi']);
  });

  it('looks again at a message held for a damaged peers.json at least every 2 s, however long the damage lasts', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    let judged = 0;
    const { loop } = start({
      trust: async () => {
        judged++;
        return { table: peers, damaged: true };
      },
    });
    relay.deliver(route, sealed(stranger, me, { text: 'knock' }));
    await loop.settled();
    for (const delay of [250, 500, 1_000, 2_000, 2_000, 2_000, 2_000]) {
      const attempts = judged;
      vi.advanceTimersByTime(delay - 1);
      expect(judged).toBe(attempts);
      vi.advanceTimersByTime(1);
      expect(judged).toBe(attempts + 1);
      await loop.settled();
    }
    expect(relay.acked).toEqual([]);
  });

  it('holds a message from up to 10 minutes ahead without acknowledging it, and stores it when it is due', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
    let judged = 0;
    const { loop, rejections } = start({
      trust: async () => {
        judged++;
        return { table: peers, damaged: false };
      },
    });
    const ahead = 5 * 60_000;
    const id = relay.deliver(route, message(friend, me, { text: 'early', ts: Date.now() + ahead }));
    await loop.settled();
    expect(relay.acked).toEqual([]);
    expect(rejections).toEqual([]);
    expect(await stored()).toEqual([]);
    // Due once it is no more than MAX_FUTURE_MS ahead.
    vi.advanceTimersByTime(ahead - MAX_FUTURE_MS - 1);
    expect(judged).toBe(1);
    vi.advanceTimersByTime(1);
    expect(judged).toBe(2);
    await loop.settled();
    expect(relay.acked).toEqual([id]);
    expect(await stored()).toEqual(['early']);
  });

  it('refuses, records and acknowledges a message more than 10 minutes ahead', async () => {
    const { loop, rejections } = start();
    const id = relay.deliver(route, message(friend, me, { text: 'too early', ts: Date.now() + MAX_HOLD_MS + 60_000 }));
    await loop.settled();
    expect(relay.acked).toEqual([id]);
    expect(rejections.map((r) => r.code)).toEqual(['from_future']);
    expect(await stored()).toEqual([]);
  });

  it('records each refusal through `rejected` before acknowledging it, but not a bad signature or a bad envelope', async () => {
    const { loop, rejections } = start();
    const knock = sealed(stranger, me, { text: 'knock' });
    const ids = [relay.deliver(route, knock), relay.deliver(route, { ...message(friend, me), text: 'forged' }), relay.deliver(route, { not: 'an envelope' })];
    await loop.settled();
    expect([...relay.acked].sort()).toEqual([...ids].sort());
    expect(rejections).toEqual([expect.objectContaining({ from: stranger.key, msg_id: knock.msg_id, code: 'not_allowlisted', ts: knock.ts })]);
    expect(await stored()).toEqual([]);
  });

  it('does not acknowledge a refusal it could not record, and records it on a retry', async () => {
    let failures = 1;
    const rejections: Rejection[] = [];
    const { loop } = start({
      rejected: async (entry) => {
        if (failures-- > 0) throw new Error('no space left on device');
        rejections.push(entry);
      },
    });
    const id = relay.deliver(route, sealed(stranger, me));
    await loop.settled();
    expect(relay.acked).toEqual([]);
    await acknowledged(id);
    expect(rejections.map((r) => r.code)).toEqual(['not_allowlisted']);
  });

  it('acknowledges without storing a message another session of this identity already claimed, and records it as a replay', async () => {
    const { loop, rejections } = start();
    const m = message(friend, me, { text: 'replayed' });
    expect(await replay.claim({ from: m.from, msg_id: m.msg_id, ts: m.ts, session: 's2' })).toEqual({ outcome: 'claimed' });
    const id = relay.deliver(route, m);
    await loop.settled();
    expect(relay.acked).toEqual([id]);
    expect(rejections.map((r) => [r.msg_id, r.code])).toEqual([[m.msg_id, 'replay']]);
    expect(await stored()).toEqual([]);
  });

  it('claims a version 2 message in the shared index, but not a version 3 one, which only its signed session admits', async () => {
    const claimed: string[] = [];
    const { loop } = start({
      claim: async (claim) => {
        claimed.push(claim.msg_id);
        return replay.claim(claim);
      },
    });
    const v2 = message(friend, me, { text: 'v2' });
    const v3 = message(friend, me, { text: 'v3', to_session: 's1' });
    const elsewhere = message(friend, me, { text: 'for s2', to_session: 's2' });
    const ids = [relay.deliver(route, v2), relay.deliver(route, v3), relay.deliver(route, elsewhere)];
    await Promise.all(ids.map(acknowledged));
    expect(claimed).toEqual([v2.msg_id]);
    expect(await stored()).toEqual(['v2', 'v3']);
  });

  it('does not acknowledge a message while the replay index is full, and stores it once a claim succeeds', async () => {
    let full = true;
    let claims = 0;
    const { loop } = start({
      claim: async (claim) => {
        claims++;
        return full ? { outcome: 'full' } : replay.claim(claim);
      },
    });
    const id = relay.deliver(route, message(friend, me, { text: 'waiting' }));
    await atLeast(() => claims, 2, 'a second claim');
    await loop.settled();
    expect(relay.acked).toEqual([]);
    expect(await stored()).toEqual([]);
    full = false;
    await acknowledged(id);
    expect(await stored()).toEqual(['waiting']);
  });
});
