/** Which inbox notices a listener shows (notices/stale.ts): a pure decision, tested by case and against a reference model. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { InboxRecord } from '../../src/hosts/claude/inbox.js';
import { liveNotices, mailboxKey } from '../../src/notices/stale.js';

const A = { identity: 'A'.repeat(43), session: 'main' };
const B = { identity: 'A'.repeat(43), session: 'other' };

function notice(id: string, at: number, mailbox?: { identity: string; session: string }): InboxRecord {
  return { v: 1, kind: 'notice', notification_id: id, session: 'main', count: 1, at, text: id, ...(mailbox !== undefined && { mailbox }) };
}

const ids = (records: InboxRecord[]) => records.map((r) => r.notification_id);

describe('liveNotices', () => {
  it('drops every notice of a mailbox with nothing unread', () => {
    const records = [notice('n1', 10, A), notice('n2', 20, A)];
    expect(liveNotices(records, new Map([[mailboxKey(A), null]]))).toEqual([]);
  });

  it('drops a notice made before the oldest unread message arrived (it covered only acknowledged mail)', () => {
    const records = [notice('n1', 10, A), notice('n2', 20, A)];
    expect(ids(liveNotices(records, new Map([[mailboxKey(A), 15]])))).toEqual(['n2']);
  });

  it('shows only the newest live notice of a mailbox: it covers the older ones', () => {
    const records = [notice('n1', 10, A), notice('n2', 20, A), notice('n3', 30, A)];
    expect(ids(liveNotices(records, new Map([[mailboxKey(A), 5]])))).toEqual(['n3']);
  });

  it('judges each mailbox on its own', () => {
    const records = [notice('a1', 10, A), notice('b1', 11, B), notice('a2', 12, A)];
    expect(ids(liveNotices(records, new Map([[mailboxKey(A), null], [mailboxKey(B), 11]])))).toEqual(['b1']);
  });

  it('shows notices that name no mailbox (pairing notices, older records) as they are', () => {
    const records = [notice('p1', 10), notice('a1', 12, A), notice('p2', 13)];
    expect(ids(liveNotices(records, new Map([[mailboxKey(A), null]])))).toEqual(['p1', 'p2']);
  });

  it('shows the newest notice of a mailbox that could not be read (re-showing beats losing)', () => {
    const records = [notice('a1', 10, A), notice('a2', 12, A)];
    expect(ids(liveNotices(records, new Map()))).toEqual(['a2']);
  });
});

/** The rule spelled out one mailbox at a time: the last notice (in inbox order) that still covers unread mail, if any. */
function model(records: readonly InboxRecord[], oldest: ReadonlyMap<string, number | null>): InboxRecord[] {
  const keep = new Set<InboxRecord>(records.filter((r) => r.mailbox === undefined));
  for (const key of new Set(records.flatMap((r) => (r.mailbox === undefined ? [] : [mailboxKey(r.mailbox)])))) {
    const unread = oldest.get(key);
    const covering = records.filter((r) => r.mailbox !== undefined && mailboxKey(r.mailbox) === key && (unread === undefined || (unread !== null && unread <= r.at)));
    if (covering.length > 0) keep.add(covering[covering.length - 1]!);
  }
  return records.filter((r) => keep.has(r));
}

const MAILBOXES = [A, B, undefined] as const;
const arbitraryRecords = fc.array(
  fc.record({ at: fc.integer({ min: 0, max: 20 }), mailbox: fc.constantFrom(...MAILBOXES) }).map(({ at, mailbox }) => ({ at, mailbox })),
  { maxLength: 12 },
).map((rows) => rows.map((row, i) => notice(`n${i}`, row.at, row.mailbox)));
/** Per mailbox: unreadable (left out), nothing unread (null), or when its oldest unread message was stored. */
const arbitraryOldest = fc
  .record({ a: fc.option(fc.option(fc.integer({ min: 0, max: 21 }), { nil: null }), { nil: undefined }), b: fc.option(fc.option(fc.integer({ min: 0, max: 21 }), { nil: null }), { nil: undefined }) })
  .map(({ a, b }) => {
    const map = new Map<string, number | null>();
    if (a !== undefined) map.set(mailboxKey(A), a);
    if (b !== undefined) map.set(mailboxKey(B), b);
    return map;
  });

describe('liveNotices against the reference model', () => {
  it('shows exactly what the rule says, in inbox order', () => {
    fc.assert(
      fc.property(arbitraryRecords, arbitraryOldest, (records, oldest) => {
        expect(ids(liveNotices(records, oldest))).toEqual(ids(model(records, oldest)));
      }),
      { numRuns: 2_000 },
    );
  });

  it('never shows a mail notice of a mailbox with nothing unread, however new the notice (a wake costs a model turn)', () => {
    fc.assert(
      fc.property(arbitraryRecords, (records) => {
        const allRead = new Map([[mailboxKey(A), null], [mailboxKey(B), null]]);
        expect(liveNotices(records, allRead).every((r) => r.mailbox === undefined)).toBe(true);
      }),
    );
  });

  it('never drops every notice of a mailbox while one of them covers unread mail', () => {
    fc.assert(
      fc.property(arbitraryRecords, arbitraryOldest, (records, oldest) => {
        const shown = liveNotices(records, oldest);
        for (const mailbox of [A, B]) {
          const key = mailboxKey(mailbox);
          const unread = oldest.get(key);
          const covers = records.some((r) => r.mailbox === mailbox && (unread === undefined || (unread !== null && unread <= r.at)));
          expect(shown.filter((r) => r.mailbox === mailbox)).toHaveLength(covers ? 1 : 0);
        }
      }),
    );
  });
});
