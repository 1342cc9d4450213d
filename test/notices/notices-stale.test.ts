/** Which inbox notices a listener shows (notices/stale.ts): a pure decision, tested exhaustively by case. */
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
