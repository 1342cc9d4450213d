/**
 * The rejected file (agent/rejected.ts): the pure rules for the `receiver_refused` receipts
 * a session owes, and their round trip through a real file beside the refusals it lists.
 */
import fc from 'fast-check';
import { readFile, writeFile, mkdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MAX_OWED, oweReceipt, owedReceipts, peekRejections, receiptsSent, recordRejection, withOwed, withoutOwed, type OwedReceipt } from '../../src/agent/rejected.js';
import { tempDir } from '../helpers/fixtures.js';

const owed = (to: string, msgId: string, at = 1): OwedReceipt => ({ to, session: 's1', msg_id: msgId, code: 'stale', at });

const arbitraryOwed = fc.record({ to: fc.constantFrom('A', 'B'), msg_id: fc.constantFrom('m1', 'm2', 'm3', 'm4'), at: fc.nat() }).map((e) => owed(e.to, e.msg_id, e.at));

describe('owed receipts (pure)', () => {
  it('owes one receipt per sender and msg_id, in the order refused', () => {
    fc.assert(
      fc.property(fc.array(arbitraryOwed, { maxLength: 20 }), (entries) => {
        let list: OwedReceipt[] = [];
        for (const entry of entries) list = withOwed(list, entry) ?? list;
        const keys = list.map((e) => `${e.to} ${e.msg_id}`);
        expect(new Set(keys).size).toBe(keys.length);
        // Each first refusal is kept, in order; a repeat changes nothing.
        const firsts = entries.filter((e, i) => entries.findIndex((f) => f.to === e.to && f.msg_id === e.msg_id) === i);
        expect(list).toEqual(firsts);
      }),
    );
  });

  it(`keeps the newest ${MAX_OWED}`, () => {
    let list: OwedReceipt[] = [];
    for (let i = 0; i < MAX_OWED + 5; i++) list = withOwed(list, owed('A', `m${i}`))!;
    expect(list).toHaveLength(MAX_OWED);
    expect(list[0]!.msg_id).toBe('m5');
  });

  it('settles exactly the receipts a relay accepted, and says when none of them was owed', () => {
    fc.assert(
      fc.property(fc.array(arbitraryOwed, { maxLength: 10 }), fc.array(arbitraryOwed, { maxLength: 5 }), (entries, sent) => {
        const list = entries.reduce<OwedReceipt[]>((acc, e) => withOwed(acc, e) ?? acc, []);
        const next = withoutOwed(list, sent);
        const isSent = (e: OwedReceipt) => sent.some((s) => s.to === e.to && s.msg_id === e.msg_id);
        if (!list.some(isSent)) expect(next).toBeUndefined();
        else expect(next).toEqual(list.filter((e) => !isSent(e)));
      }),
    );
  });
});

describe('owed receipts on disk', () => {
  let dir: { path: string; remove: () => Promise<void> };
  let path: string;
  beforeEach(async () => {
    dir = await tempDir('interlink-rejected-');
    path = join(dir.path, 'rejected', 'ID', 's1.json');
  });
  afterEach(() => dir.remove());

  it('are durable beside the refusals, and each write keeps the other list', async () => {
    await recordRejection(path, { from: 'A', msg_id: 'm1', code: 'stale', reason: 'old', at: 1, ts: 0 });
    await oweReceipt(path, owed('A', 'm1'));
    await oweReceipt(path, owed('A', 'm2'));
    await recordRejection(path, { from: 'A', msg_id: 'm2', code: 'stale', reason: 'old', at: 2, ts: 0 });
    expect((await owedReceipts(path)).map((e) => e.msg_id)).toEqual(['m1', 'm2']);
    await receiptsSent(path, [{ to: 'A', msg_id: 'm1' }]);
    expect((await owedReceipts(path)).map((e) => e.msg_id)).toEqual(['m2']);
    expect(await peekRejections(path)).toHaveLength(2);
  });

  it('reads a file written before receipts were owed as owing nothing', async () => {
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, JSON.stringify({ v: 1, rejected: [{ from: 'A', msg_id: 'm1', code: 'stale', reason: 'old', at: 1, ts: 0 }] }));
    expect(await owedReceipts(path)).toEqual([]);
    await oweReceipt(path, owed('A', 'm1'));
    const text = JSON.parse(await readFile(path, 'utf8')) as { rejected: unknown[]; owed: unknown[] };
    expect([text.rejected.length, text.owed.length]).toEqual([1, 1]);
  });
});
