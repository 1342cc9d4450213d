/**
 * Which inbox notices the listener still shows (a pure decision). A notice is a pointer
 * at unread mail; once that mail is acknowledged the pointer is noise, and a listener
 * that starts after a long gap (its first wait of a session, cursor at 0) would print
 * every notice the notifier's schedule ever wrote. So:
 * - a notice that names its mailbox is shown only while a message it covered is still
 *   unread: the mailbox's oldest unread attention message was stored by the notice's
 *   time (a notice covers exactly the unread attention messages stored by then);
 * - of the notices still live for one mailbox, only the newest is shown: it covers the
 *   older ones' unread messages too;
 * - a notice that names no mailbox (a pairing notice, or one written before notices
 *   named it) is shown as before: there is nothing to judge it by.
 */

/** What the decision reads of a notice (a Claude inbox record, say): when it was written and the mailbox it points at. */
export interface NoticePointer {
  at: number;
  mailbox?: { identity: string; session: string } | undefined;
}

/**
 * Per mailbox (`mailboxKey`): when its oldest unread attention message was stored, or
 * null when it has none. A mailbox missing here could not be read: its notices are shown
 * (re-showing a notice beats losing one).
 */
export type OldestUnread = ReadonlyMap<string, number | null>;

export function mailboxKey(mailbox: { identity: string; session: string }): string {
  return `${mailbox.identity} ${mailbox.session}`;
}

export function liveNotices<T extends NoticePointer>(records: readonly T[], oldestUnread: OldestUnread): T[] {
  const newest = new Map<string, T>();
  for (const record of records) {
    if (record.mailbox === undefined) continue;
    const key = mailboxKey(record.mailbox);
    const oldest = oldestUnread.get(key);
    if (oldest === undefined || (oldest !== null && oldest <= record.at)) newest.set(key, record);
  }
  return records.filter((r) => r.mailbox === undefined || newest.get(mailboxKey(r.mailbox)) === r);
}
