/** The outbound loop (src/agent/outbound.ts) on a real outbox, against fake relay clients. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Outbound } from '../../src/agent/outbound.js';
import { outboxPath } from '../../src/config/layout.js';
import { Outbox, outboundState, type OutboxRecord } from '../../src/outbox/outbox.js';
import { preferredOrder } from '../../src/link/relay-groups.js';
import { FakeRelayClient } from '../helpers/fake-relay-client.js';
import { eventually } from '../helpers/mcp.js';
import { message, newIdentity, tempDir } from '../helpers/fixtures.js';

const me = newIdentity(61);
const peer = newIdentity(62);

let dir: { path: string; remove: () => Promise<void> };
let outbox: Outbox;
let outbound: Outbound | undefined;
beforeEach(async () => {
  dir = await tempDir();
  outbox = await Outbox.open(outboxPath(dir.path, me.key, 's1'));
});
afterEach(async () => {
  await outbound?.stop();
  outbound = undefined;
  await outbox.close();
  await dir.remove();
});

function outboundVia(...relays: FakeRelayClient[]): Outbound {
  outbound = new Outbound(outbox, relays.map((r) => [r.client]));
  return outbound;
}

/** The route every queued message goes to. */
const RECIPIENT = `${peer.key}#main`;

async function queued(text = 'hello'): Promise<OutboxRecord> {
  return (await outbox.add(message(me, peer, { text }), RECIPIENT)).record;
}

async function record(msgId: string): Promise<OutboxRecord> {
  const found = await outbox.get(msgId);
  if (found === undefined) throw new Error(`${msgId} is not in the outbox`);
  return found;
}

/** Waits until no offer of the message is on its way (its outcome handled). */
function answered(loop: Outbound, msgId: string): Promise<true> {
  return eventually(async () => (loop.offering(msgId) ? undefined : true), 10_000, 'the offer to be answered');
}

const sentIds = (relay: FakeRelayClient) => relay.sent.map((s) => s.envelope.msg_id);

describe('outbound loop', () => {
  it('offers a pending message to every connected relay, records each acceptance, and offers it no more', async () => {
    const [a, b] = [new FakeRelayClient('ws://a'), new FakeRelayClient('ws://b')];
    const down = new FakeRelayClient('ws://down', { connected: false });
    const loop = outboundVia(a, b, down);
    const m = await queued();
    await loop.kick();
    expect(a.sent).toEqual([{ route: m.route, envelope: m.envelope }]);
    expect(b.sent).toEqual([{ route: m.route, envelope: m.envelope }]);
    expect(down.sent).toEqual([]);
    await eventually(async () => ((await record(m.envelope.msg_id)).accepted_by.length === 2 ? true : undefined), 10_000, 'both acceptances recorded');
    expect([...(await record(m.envelope.msg_id)).accepted_by].sort()).toEqual(['ws://a', 'ws://b']);
    expect(outboundState(await record(m.envelope.msg_id))).toBe('bus_accepted');
    await loop.kick();
    expect([sentIds(a), sentIds(b)]).toEqual([[m.envelope.msg_id], [m.envelope.msg_id]]);
  });

  it('offers a message a relay refused again on the next pass, until it is accepted', async () => {
    const a = new FakeRelayClient('ws://a');
    a.answer('queue_full', 'rate_limited');
    const loop = outboundVia(a);
    const m = await queued();
    for (let pass = 1; pass <= 2; pass++) {
      await loop.kick();
      await answered(loop, m.envelope.msg_id);
      expect(sentIds(a)).toHaveLength(pass);
      expect(outboundState(await record(m.envelope.msg_id))).toBe('pending');
    }
    await loop.kick();
    expect(sentIds(a)).toEqual(Array(3).fill(m.envelope.msg_id));
    await eventually(async () => (outboundState(await record(m.envelope.msg_id)) === 'bus_accepted' ? true : undefined), 10_000, 'the acceptance recorded');
  });

  it('keeps a message while one relay may still take it, and ends it as delivery_failed once every relay refused it for good', async () => {
    const [a, b] = [new FakeRelayClient('ws://a'), new FakeRelayClient('ws://b')];
    a.answer('too_large', 'too_large');
    b.answer('rate_limited', 'bad_frame');
    const loop = outboundVia(a, b);
    const m = await queued();
    await loop.kick();
    await answered(loop, m.envelope.msg_id);
    expect(outboundState(await record(m.envelope.msg_id))).toBe('pending');
    await loop.kick();
    await answered(loop, m.envelope.msg_id);
    const ended = await eventually(async () => {
      const r = await record(m.envelope.msg_id);
      return outboundState(r) === 'delivery_failed' ? r : undefined;
    }, 10_000, 'the message to end');
    expect(ended.states.at(-1)?.reason).toMatch(/^every relay refused it: (too_large|bad_frame): /);
    await loop.kick();
    expect([sentIds(a).length, sentIds(b).length]).toEqual([2, 2]);
  });

  it("holds a route's newer messages behind an older one the relay refused or left unanswered, offers them in send order once it is accepted, and offers other routes meanwhile", async () => {
    const a = new FakeRelayClient('ws://a');
    a.answer('queue_full', 'timeout');
    const loop = outboundVia(a);
    loop.start();
    const first = await queued('first');
    loop.offer(first);
    await answered(loop, first.envelope.msg_id);
    // A send while the first waits for its retry: offered no sooner than the first.
    const second = await queued('second');
    loop.offer(second);
    const other = (await outbox.add(message(me, peer, { text: 'other route' }), `${peer.key}#other`)).record;
    loop.offer(other);
    await eventually(async () => (outboundState(await record(second.envelope.msg_id)) === 'bus_accepted' ? true : undefined), 10_000, 'the second accepted');
    const ids = sentIds(a).filter((id) => id !== other.envelope.msg_id);
    expect(ids).toEqual([first.envelope.msg_id, first.envelope.msg_id, first.envelope.msg_id, second.envelope.msg_id]);
    expect(sentIds(a).indexOf(other.envelope.msg_id)).toBeLessThan(sentIds(a).indexOf(second.envelope.msg_id));
  });

  it('offers a message a send offered itself again within a second when the relay refused it for now, though the loop was idle', async () => {
    const a = new FakeRelayClient('ws://a');
    const loop = outboundVia(a);
    loop.start();
    await loop.kick();
    // What a send does: its own offer, outside the loop, whose next pass is 30 s away.
    a.answer('storage', 'timeout');
    const m = await queued();
    loop.offer(m);
    await eventually(async () => (outboundState(await record(m.envelope.msg_id)) === 'bus_accepted' ? true : undefined), 5_000, 'accepted at the third offer');
    expect(sentIds(a)).toEqual(Array(3).fill(m.envelope.msg_id));
  });

  it('records a message the relay accepted after the offer timed out as accepted, and offers it no more', async () => {
    const a = new FakeRelayClient('ws://a');
    a.answer('accept_late');
    const loop = outboundVia(a);
    const m = await queued();
    await loop.kick();
    await eventually(async () => (outboundState(await record(m.envelope.msg_id)) === 'bus_accepted' ? true : undefined), 5_000, 'the late acceptance recorded');
    expect((await record(m.envelope.msg_id)).accepted_by).toEqual(['ws://a']);
    await loop.kick();
    expect(sentIds(a)).toEqual([m.envelope.msg_id]);
  });

  it("offers a message to one address of a relay listed at several (one key pinned on each), the one the recipient's session reads through, and to the next once that one drops", async () => {
    const key = 'shared-relay-key';
    // Both orders of the same two addresses: which one is preferred follows from the recipient's route alone.
    for (const urls of [['ws://a', 'ws://b'], ['ws://b', 'ws://a']]) {
      const listed = urls.map((url) => new FakeRelayClient(url, { relay: key }));
      const [preferred, next] = preferredOrder(listed, RECIPIENT);
      const other = new FakeRelayClient('ws://other');
      outbound = new Outbound(outbox, [listed.map((r) => r.client), [other.client]]);
      const first = await queued('first');
      await outbound.kick();
      await answered(outbound, first.envelope.msg_id);
      expect([sentIds(preferred!), sentIds(next!), sentIds(other)]).toEqual([[first.envelope.msg_id], [], [first.envelope.msg_id]]);
      expect([...(await record(first.envelope.msg_id)).accepted_by].sort()).toEqual([preferred!.url, 'ws://other'].sort());
      // Accepted by one address of the relay: the other address is never offered it.
      preferred!.disconnect();
      await outbound.kick();
      expect(sentIds(next!)).toEqual([]);

      // The preferred address is gone: the next message goes to the other.
      const second = await queued('second');
      await outbound.kick();
      await answered(outbound, second.envelope.msg_id);
      expect([sentIds(preferred!), sentIds(next!)]).toEqual([[first.envelope.msg_id], [second.envelope.msg_id]]);
      expect((await record(second.envelope.msg_id)).accepted_by.sort()).toEqual([next!.url, 'ws://other'].sort());
      await outbound.stop();
    }
  });

  it('ends a message as delivery_failed once each relay refused it for good, counting a relay at several addresses once', async () => {
    const listed = [new FakeRelayClient('ws://a', { relay: 'k' }), new FakeRelayClient('ws://b', { relay: 'k' })];
    const [preferred, next] = preferredOrder(listed, RECIPIENT);
    preferred!.answer('too_large');
    outbound = new Outbound(outbox, [listed.map((r) => r.client)]);
    const m = await queued();
    await outbound.kick();
    const ended = await eventually(async () => {
      const r = await record(m.envelope.msg_id);
      return outboundState(r) === 'delivery_failed' ? r : undefined;
    }, 10_000, 'the message to end');
    expect(ended.states.at(-1)?.reason).toMatch(/^every relay refused it: too_large: /);
    expect(sentIds(next!)).toEqual([]);
  });

  it('sends nothing after stop, neither on a kick nor on a reconnect', async () => {
    const a = new FakeRelayClient('ws://a');
    const loop = outboundVia(a);
    const first = await queued('first');
    loop.start();
    await eventually(async () => (a.sent.length === 1 ? true : undefined), 10_000, 'the first message offered at start');
    await loop.stop();
    await queued('second');
    a.disconnect();
    a.connect();
    await loop.kick();
    expect(sentIds(a)).toEqual([first.envelope.msg_id]);
  });
});
