/**
 * When receipts leave (agent/receipts.ts over the pure `receiptDue`): a quiet route hears
 * after the delay, a busy route at most once per interval, routes do not hold each other
 * up, a receipt no relay took is tried again with its entries in order, many entries go
 * in several receipts of at most RECEIPT_ENTRIES_SENT, `flush` sends
 * everything at once, and a peer marked clear is sent none. A refusal is owed durably
 * (in the rejected file) before `refused` resolves, routed by the refused message's sealed
 * reply route, offered again by a new sender (`resume`) and settled once a relay took it. A fake relay connection
 * records each send with its time; every wait is on a condition with a deadline.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { isSealed, wireOf, type SealedWire } from '../../src/envelope/envelope.js';
import { openEnvelope } from '../../src/envelope/open.js';
import { owedReceipts, oweReceipt } from '../../src/agent/rejected.js';
import type { Identity } from '../../src/identity/identity.js';
import { PeerTable } from '../../src/peers/peers.js';
import { RECEIPT_ENTRIES_SENT, ReceiptSender } from '../../src/agent/receipts.js';
import { parseReceiptText, receiptDue } from '../../src/receipts/receipts.js';
import { FakeRelayClient } from '../helpers/fake-relay-client.js';
import { message, newIdentity, tempDir } from '../helpers/fixtures.js';
import { eventually } from '../helpers/mcp.js';

const me = newIdentity(101);
const alice = newIdentity(102);
const carol = newIdentity(103);

const DELAY = 40;
const INTERVAL = 300;

describe('receiptDue', () => {
  it('is the delay after the first entry, and never sooner than the interval after the last receipt', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2 ** 40 }),
        fc.option(fc.integer({ min: 0, max: 2 ** 40 }), { nil: undefined }),
        fc.integer({ min: 0, max: 60_000 }),
        fc.integer({ min: 0, max: 60_000 }),
        (first, last, delay, interval) => {
          const due = receiptDue(first, last, delay, interval);
          expect(due).toBeGreaterThanOrEqual(first + delay);
          if (last !== undefined) expect(due).toBeGreaterThanOrEqual(last + interval);
          // Not a moment later than both rules ask.
          expect(due === first + delay || (last !== undefined && due === last + interval)).toBe(true);
        },
      ),
      { numRuns: 500 },
    );
  });
});

/** A relay connection that notes when each receipt reached it. */
class TimedRelay extends FakeRelayClient {
  readonly times: number[] = [];
  override async send(route: string, envelope: Parameters<FakeRelayClient['send']>[1]) {
    this.times.push(Date.now());
    return super.send(route, envelope);
  }
}

function sender(relay: FakeRelayClient, intervalMs = INTERVAL, table = new PeerTable([{ petname: 'alice', key: alice.key }, { petname: 'carol', key: carol.key }])): ReceiptSender {
  return new ReceiptSender({ identity: me, relays: [relay.client], trust: async () => ({ table }), sticky: new Map(), delayMs: DELAY, intervalMs });
}

/** An interval long beside the delay, so "well before the interval" has room on a loaded machine. */
const LONG_INTERVAL = 5_000;

/** A message from `from`'s session `session` to me, as the mailbox stored it. */
function from(who: Identity, session: string) {
  return message(who, me, { to_session: 'mine', reply_to: `${who.key}#${session}` });
}

/** The msg_ids a sent receipt reports, opened as its recipient would. */
function reported(relay: FakeRelayClient, index: number, reader: Identity): string[] {
  const wire = relay.sent[index]!.envelope as unknown as SealedWire;
  return parseReceiptText(openEnvelope(reader.signingKey, wire).text).map((e) => e.msg_id);
}

describe('ReceiptSender', () => {
  it('batches a quiet route after the delay, then sends a busy route at most once per interval', async () => {
    const relay = new TimedRelay();
    const receipts = sender(relay);
    const started = Date.now();
    const first = [from(alice, 'a1'), from(alice, 'a1'), from(alice, 'a1')];
    for (const m of first) receipts.stored(m);
    await eventually(async () => (relay.sent.length === 1 ? true : undefined), 5_000, 'the first receipt');
    expect(relay.times[0]! - started).toBeGreaterThanOrEqual(DELAY);
    expect(relay.sent[0]!.route).toBe(`${alice.key}#a1`);
    expect(reported(relay, 0, alice)).toEqual(first.map((m) => m.msg_id));

    const second = from(alice, 'a1');
    receipts.stored(second);
    await eventually(async () => (relay.sent.length === 2 ? true : undefined), 5_000, 'the second receipt');
    expect(relay.times[1]! - relay.times[0]!).toBeGreaterThanOrEqual(INTERVAL);
    expect(reported(relay, 1, alice)).toEqual([second.msg_id]);
    await receipts.close();
  });

  it('does not hold one route back for another route\'s interval', async () => {
    const relay = new TimedRelay();
    const receipts = sender(relay, LONG_INTERVAL);
    receipts.stored(from(alice, 'a1'));
    await eventually(async () => (relay.sent.length === 1 ? true : undefined), 5_000, 'alice\'s receipt');
    const noted = Date.now();
    receipts.stored(from(alice, 'a2'));
    receipts.stored(from(carol, 'c1'));
    await eventually(async () => (relay.sent.length === 3 ? true : undefined), 5_000, 'the other routes\' receipts');
    expect(relay.sent.slice(1).map((s) => s.route).sort()).toEqual([`${alice.key}#a2`, `${carol.key}#c1`].sort());
    // Both came after their own delay, well before alice#a1's interval would allow it another.
    expect(Math.max(...relay.times.slice(1)) - noted).toBeLessThan(LONG_INTERVAL);
    await receipts.close();
  });

  it('tries a receipt no relay took again, with its entries in order, ahead of later ones', async () => {
    const relay = new TimedRelay();
    relay.answer('queue_full');
    const receipts = sender(relay);
    const early = [from(alice, 'a1'), from(alice, 'a1')];
    for (const m of early) receipts.stored(m);
    await eventually(async () => (relay.sent.length === 1 ? true : undefined), 5_000, 'the refused receipt');
    const late = from(alice, 'a1');
    receipts.stored(late);
    await eventually(async () => (relay.sent.length === 2 ? true : undefined), 5_000, 'the retry');
    expect(reported(relay, 1, alice)).toEqual([...early, late].map((m) => m.msg_id));
    await receipts.close();
  });

  it(`sends a busy route's entries in receipts of at most ${RECEIPT_ENTRIES_SENT}, in the order they were noted`, async () => {
    const relay = new TimedRelay();
    const receipts = new ReceiptSender({ identity: me, relays: [relay.client], trust: async () => ({ table: new PeerTable([{ petname: 'alice', key: alice.key }]) }), sticky: new Map(), delayMs: 60_000, intervalMs: 60_000 });
    const stored = Array.from({ length: 2 * RECEIPT_ENTRIES_SENT + 3 }, () => from(alice, 'a1'));
    for (const m of stored) receipts.stored(m);
    await receipts.flush();
    expect(relay.sent.map((_, i) => reported(relay, i, alice).length)).toEqual([RECEIPT_ENTRIES_SENT, RECEIPT_ENTRIES_SENT, 3]);
    expect(relay.sent.flatMap((_, i) => reported(relay, i, alice))).toEqual(stored.map((m) => m.msg_id));
    await receipts.close();
  });

  it('sends everything waiting at flush, due or not, and nothing to a peer marked clear', async () => {
    const relay = new TimedRelay();
    const table = new PeerTable([{ petname: 'alice', key: alice.key }, { petname: 'carol', key: carol.key, clear: true }]);
    const receipts = new ReceiptSender({ identity: me, relays: [relay.client], trust: async () => ({ table }), sticky: new Map(), delayMs: 60_000, intervalMs: 60_000 });
    const m = from(alice, 'a1');
    receipts.stored(m);
    receipts.stored(from(carol, 'c1'));
    await receipts.flush();
    expect(relay.sent.map((s) => s.route)).toEqual([`${alice.key}#a1`]);
    expect(reported(relay, 0, alice)).toEqual([m.msg_id]);
    await receipts.close();
    expect(relay.sent).toHaveLength(1);
  });
});

describe('ReceiptSender: refusals owed across restarts', () => {
  const table = new PeerTable([{ petname: 'alice', key: alice.key }, { petname: 'carol', key: carol.key, clear: true }]);
  const owing = (relay: FakeRelayClient, owedPath: string) =>
    new ReceiptSender({ identity: me, relays: [relay.client], trust: async () => ({ table }), sticky: new Map(), delayMs: 60_000, intervalMs: 60_000, owedPath });

  /** The receipt entries sent, opened as alice would. */
  function entries(relay: FakeRelayClient): { msg_id: string; state: string; code?: string }[] {
    return relay.sent.flatMap((s) => parseReceiptText(openEnvelope(alice.signingKey, s.envelope as unknown as SealedWire).text));
  }

  it('owes a refusal before refused() resolves, routed by the sealed reply route with no earlier message from the sender, and settles it once a relay took it', async () => {
    const dir = await tempDir('interlink-owed-');
    try {
      const path = join(dir.path, 'rejected.json');
      const relay = new TimedRelay();
      const receipts = owing(relay, path);
      const stale = wireOf(message(alice, me, { to_session: 'mine', reply_to: `${alice.key}#a7` }));
      expect(isSealed(stale)).toBe(true);
      await receipts.refused(stale, 'stale', 1234);
      expect(await owedReceipts(path)).toEqual([{ to: alice.key, session: 'a7', msg_id: stale.msg_id, code: 'stale', at: 1234 }]);
      await receipts.flush();
      expect(relay.sent.map((s) => s.route)).toEqual([`${alice.key}#a7`]);
      expect(entries(relay)).toEqual([{ msg_id: stale.msg_id, state: 'receiver_refused', at: 1234, code: 'stale' }]);
      expect(await owedReceipts(path)).toEqual([]);
      await receipts.close();
    } finally {
      await dir.remove();
    }
  });

  it('offers what an earlier process owed when a new one resumes, and keeps owing it while no relay takes it', async () => {
    const dir = await tempDir('interlink-owed-');
    try {
      const path = join(dir.path, 'rejected.json');
      const debt = { to: alice.key, session: 'a1', msg_id: from(alice, 'a1').msg_id, code: 'stale' as const, at: 99 };
      await oweReceipt(path, debt);
      const relay = new TimedRelay();
      relay.answer('queue_full');
      const receipts = owing(relay, path);
      await receipts.resume();
      await receipts.flush();
      expect(relay.sent).toHaveLength(1);
      expect(await owedReceipts(path)).toEqual([debt]);
      await receipts.flush();
      expect(entries(relay).map((e) => e.msg_id)).toEqual([debt.msg_id, debt.msg_id]);
      expect(await owedReceipts(path)).toEqual([]);
      await receipts.close();
    } finally {
      await dir.remove();
    }
  });

  it("adopts what an ended session owed: owed in the heir's file first, settled in the ended one's, then sent", async () => {
    const dir = await tempDir('interlink-owed-');
    try {
      const ended = join(dir.path, 'rejected-ended.json');
      const mine = join(dir.path, 'rejected-mine.json');
      const debt = { to: alice.key, session: 'a1', msg_id: from(alice, 'a1').msg_id, code: 'stale' as const, at: 99 };
      await oweReceipt(ended, debt);
      const relay = new TimedRelay();
      relay.answer('queue_full');
      const receipts = owing(relay, mine);
      await receipts.adopt(ended);
      expect(await owedReceipts(ended)).toEqual([]);
      expect(await owedReceipts(mine)).toEqual([debt]);
      // Refused by the relay: still owed, in the heir's file, until one takes it.
      await receipts.flush();
      expect(await owedReceipts(mine)).toEqual([debt]);
      await receipts.flush();
      expect(entries(relay).map((e) => e.msg_id)).toEqual([debt.msg_id, debt.msg_id]);
      expect(await owedReceipts(mine)).toEqual([]);
      await receipts.close();
    } finally {
      await dir.remove();
    }
  });

  it('owes nothing to a peer marked clear (it cannot read a receipt) or for a refusal it cannot act on', async () => {
    const dir = await tempDir('interlink-owed-');
    try {
      const path = join(dir.path, 'rejected.json');
      const receipts = owing(new TimedRelay(), path);
      await receipts.refused(wireOf(message(carol, me, { reply_to: `${carol.key}#c1` })), 'stale');
      await receipts.refused(wireOf(message(alice, me, { to_session: 'mine', reply_to: `${alice.key}#a1` })), 'replay');
      expect(await owedReceipts(path)).toEqual([]);
      await receipts.close();
    } finally {
      await dir.remove();
    }
  });
});
