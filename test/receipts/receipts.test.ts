/**
 * Receipts, in pieces: the receipt text parser turns any string into entries or a typed
 * `bad_envelope` error, and the outbox records a receiver's report only for a message it
 * sent to that very receiver, once per state, durably across a reopen.
 */
import fc from 'fast-check';
import { z } from 'zod';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { signEnvelope } from '../../src/envelope/sign.js';
import { InterlinkError } from '../../src/errors.js';
import { Outbox, remoteState, shownState } from '../../src/outbox/outbox.js';
import { MAX_RECEIPT_ENTRIES, parseReceiptText, receiptEntrySchema, receiptText, type ReceiptEntry } from '../../src/receipts/receipts.js';
import { newIdentity, tempDir } from '../helpers/fixtures.js';

const me = newIdentity(91);
const bob = newIdentity(92);
const carol = newIdentity(93);

const entryArb: fc.Arbitrary<ReceiptEntry> = fc.record(
  {
    msg_id: fc.stringMatching(/^[0-9a-f]{32}$/),
    state: fc.constantFrom('receiver_stored', 'receiver_acknowledged', 'receiver_refused'),
    at: fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }),
    code: fc.constantFrom('stale', 'bad_seal', 'unsealed'),
  },
  { requiredKeys: ['msg_id', 'state', 'at'] },
);

describe('receipt text', () => {
  it('round-trips any list of entries', () => {
    fc.assert(
      fc.property(fc.array(entryArb, { minLength: 1, maxLength: 20 }), (entries) => {
        expect(parseReceiptText(receiptText(entries))).toEqual(entries);
      }),
      { numRuns: 200 },
    );
  });

  it('reads exactly what the schema of the protocol reads, into the same entries', () => {
    const schema = z.object({ receipts: z.array(receiptEntrySchema).min(1).max(MAX_RECEIPT_ENTRIES) });
    // Entries near the rules: every member sometimes broken, sometimes extra.
    const member = <T,>(good: fc.Arbitrary<T>) => fc.oneof(good, good, good, fc.constant(undefined), fc.constant(null), fc.string({ maxLength: 4 }), fc.integer(), fc.double());
    const entry = fc.record(
      {
        msg_id: member(fc.stringMatching(/^[0-9a-f]{32}$/)),
        state: member(fc.constantFrom('receiver_stored', 'receiver_acknowledged', 'receiver_refused', 'read')),
        at: member(fc.oneof(fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }), fc.constant(Number.MAX_SAFE_INTEGER + 1), fc.constant(-1), fc.constant(1.5))),
        code: member(fc.constantFrom('stale', 'bad_seal', 'unsealed', 'nope')),
        extra: fc.jsonValue(),
      },
      { requiredKeys: [] },
    );
    const body = fc.oneof(
      fc.record({ receipts: fc.oneof(fc.array(entry, { maxLength: 4 }), fc.jsonValue()), other: fc.jsonValue() }, { requiredKeys: ['receipts'] }),
      fc.jsonValue(),
    );
    fc.assert(
      fc.property(body, (data) => {
        const text = JSON.stringify(data) ?? 'null';
        const expected = schema.safeParse(JSON.parse(text));
        let got: ReceiptEntry[] | string;
        try {
          got = parseReceiptText(text);
        } catch (err) {
          got = (err as InterlinkError).code;
        }
        expect(got).toEqual(expected.success ? expected.data.receipts : 'bad_envelope');
        if (expected.success) expect((got as ReceiptEntry[]).map((e) => Object.keys(e))).toEqual(expected.data.receipts.map((e) => Object.keys(e)));
      }),
      { numRuns: 3_000 },
    );
  });

  it('turns anything else into a bad_envelope error', () => {
    const bad = (text: string) => {
      try {
        parseReceiptText(text);
        return undefined;
      } catch (err) {
        expect(err).toBeInstanceOf(InterlinkError);
        return (err as InterlinkError).code;
      }
    };
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.json()), (text) => {
        const code = bad(text);
        expect(code === undefined || code === 'bad_envelope').toBe(true);
      }),
      { numRuns: 500 },
    );
    for (const text of ['', 'null', '{}', '{"receipts":[]}', '{"receipts":[{"msg_id":"x","state":"receiver_stored","at":1}]}', '{"receipts":[{"msg_id":"' + 'a'.repeat(32) + '","state":"read","at":1}]}']) {
      expect(bad(text), text).toBe('bad_envelope');
    }
    const many = Array.from({ length: MAX_RECEIPT_ENTRIES + 1 }, () => ({ msg_id: 'a'.repeat(32), state: 'receiver_stored' as const, at: 1 }));
    expect(bad(receiptText(many))).toBe('bad_envelope');
  });
});

describe('the outbox records what receivers report', () => {
  let dir: { path: string; remove: () => Promise<void> };
  beforeEach(async () => {
    dir = await tempDir();
  });
  afterEach(async () => dir.remove());

  it('for its own messages to that receiver only, each state once, and keeps it across a reopen', async () => {
    const path = `${dir.path}/outbox.json`;
    const outbox = await Outbox.open(path);
    const toBob = signEnvelope(me.signingKey, { to: bob.key, to_session: 'b1', text: 'for bob' });
    await outbox.add(toBob, `${bob.key}#b1`);
    await outbox.markAccepted(toBob.msg_id, 'ws://r');

    // Carol reports on a message sent to bob; bob reports on a message nobody sent: nothing changes.
    expect(await outbox.recordRemote(carol.key, [{ msg_id: toBob.msg_id, state: 'receiver_acknowledged', at: 5 }])).toEqual({ applied: 0, ignored: 1 });
    expect(await outbox.recordRemote(bob.key, [{ msg_id: 'f'.repeat(32), state: 'receiver_stored', at: 5 }])).toEqual({ applied: 0, ignored: 1 });
    expect(shownState((await outbox.get(toBob.msg_id))!)).toBe('bus_accepted');

    expect(await outbox.recordRemote(bob.key, [{ msg_id: toBob.msg_id, state: 'receiver_stored', at: 10 }])).toEqual({ applied: 1, ignored: 0 });
    // Reported again (a redelivered receipt): still once.
    expect(await outbox.recordRemote(bob.key, [{ msg_id: toBob.msg_id, state: 'receiver_stored', at: 11 }])).toEqual({ applied: 0, ignored: 1 });
    expect(await outbox.recordRemote(bob.key, [{ msg_id: toBob.msg_id, state: 'receiver_acknowledged', at: 20 }])).toEqual({ applied: 1, ignored: 0 });
    await outbox.close();

    const reopened = await Outbox.open(path);
    const record = (await reopened.get(toBob.msg_id))!;
    expect(record.remote?.map((r) => [r.state, r.at])).toEqual([
      ['receiver_stored', 10],
      ['receiver_acknowledged', 20],
    ]);
    expect(remoteState(record)?.state).toBe('receiver_acknowledged');
    expect(shownState(record)).toBe('receiver_acknowledged');
    // The sender's own states are untouched.
    expect(record.states.map((s) => s.state)).toEqual(['pending', 'bus_accepted']);
    await reopened.close();
  });
});
