/**
 * The inbound loop against a fake relay client: deliveries are judged concurrently, yet
 * reach the mailbox in the order the relay sent them, and a delivery the mailbox could
 * not take is retried without holding up the ones after it.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Inbound, type InboundDeps } from '../../src/agent/inbound.js';
import { replayPath } from '../../src/config/layout.js';
import { ReplayIndex } from '../../src/replay/claims.js';
import { Mailbox } from '../../src/mailbox/mailbox.js';
import { PeerTable } from '../../src/peers/peers.js';
import { FakeRelayClient } from '../helpers/fake-relay-client.js';
import { eventually } from '../helpers/mcp.js';
import { message, newIdentity, tempDir } from '../helpers/fixtures.js';

const me = newIdentity(51);
const senders = [newIdentity(52), newIdentity(53)];
const table = new PeerTable(senders.map((s, i) => ({ petname: `p${i}`, key: s.key, clear: true as const })));

let dir: { path: string; remove: () => Promise<void> };
let mailbox: Mailbox;
let replay: ReplayIndex;
let inbound: Inbound | undefined;
beforeEach(async () => {
  dir = await tempDir();
  mailbox = await Mailbox.open(join(dir.path, 'mailbox', me.key, 's1.json'));
  replay = await ReplayIndex.open(replayPath(dir.path, me.key));
});
afterEach(async () => {
  inbound?.close();
  await mailbox.close();
  await replay.close();
  await dir.remove();
});

/** Session s1's inbound with this test's trust source and the real replay index. */
function inboundWith(trust: InboundDeps['trust']): Inbound {
  return new Inbound({ me, session: 's1', claim: (c) => replay.claim(c), mailbox, trust, outstanding: async () => [], pairing: async () => undefined, sticky: new Map() });
}

describe('inbound order', () => {
  it('stores deliveries in the order the relay sent them when the first one takes longest to judge', async () => {
    // The first judgement waits until every other delivery has been judged.
    const count = 6;
    let judged = 0;
    let releaseFirst!: () => void;
    const firstHeld = new Promise<void>((resolve) => (releaseFirst = resolve));
    const trust = async () => {
      const mine = judged++;
      if (mine === count - 1) releaseFirst();
      if (mine === 0) await firstHeld;
      return { table, damaged: false };
    };
    inbound = inboundWith(trust);
    const relay = new FakeRelayClient();
    inbound.attach(relay.client, `${me.key}#s1`);
    const sent = Array.from({ length: count }, (_, i) => message(senders[i % 2]!, me, { text: `m${i}` }));
    sent.forEach((envelope, i) => relay.deliver(`${me.key}#s1`, envelope, i));
    await inbound.settled();
    expect((await mailbox.all()).map((r) => r.envelope.text)).toEqual(sent.map((e) => e.text));
    expect([...relay.acked].sort()).toEqual(sent.map((_, i) => i));
  });

  it('retries a delivery the mailbox refused without holding up the ones after it', async () => {
    let failures = 1;
    const trust = async () => {
      if (failures-- > 0) throw new Error('peers.json unreadable');
      return { table, damaged: false };
    };
    inbound = inboundWith(trust);
    const relay = new FakeRelayClient();
    inbound.attach(relay.client, `${me.key}#s1`);
    const now = Date.now();
    const sent = [0, 1, 2].map((i) => message(senders[0]!, me, { text: `m${i}`, ts: now + i }));
    sent.forEach((envelope, i) => relay.deliver(`${me.key}#s1`, envelope, i));
    await eventually(async () => (relay.acked.length === 3 ? true : undefined), 10_000, 'all three acknowledged');
    // m0 arrived last; it is still fetched first, in the order its sender signed it.
    expect((await mailbox.all()).map((r) => r.envelope.text)).toEqual(['m1', 'm2', 'm0']);
    expect((await mailbox.fetch()).messages.map((r) => r.envelope.text)).toEqual(['m0', 'm1', 'm2']);
  });
});
