/**
 * What the mailbox's unread records hold: their count, and per sender the records and
 * bytes its share bounds (DESIGN.md "The mailbox": "One sender's share"; rules.ts
 * `admitToShare`). Both change together whenever a record becomes unread or stops being
 * unread, so the count `status` shows and the share admission checks never disagree.
 * No I/O.
 */
import type { StoredRecord } from './format.js';
import { isUnread } from './record-state.js';
import type { Holdings } from './rules.js';

export class UnreadHoldings {
  /** sender key → what its unread records hold: what its share bounds. */
  private readonly bySender = new Map<string, Holdings>();
  private total = 0;

  /** Unread records in the mailbox, from every sender. */
  get count(): number {
    return this.total;
  }

  /** Counts `record` in (`1`) or out (`-1`) of the unread records. */
  change(record: StoredRecord, sign: 1 | -1): void {
    this.total += sign;
    const sender = record.envelope.from;
    const held = this.of(sender);
    const next = { records: held.records + sign, bytes: held.bytes + sign * record.size };
    if (next.records === 0) this.bySender.delete(sender);
    else this.bySender.set(sender, next);
  }

  of(sender: string): Holdings {
    return this.bySender.get(sender) ?? { records: 0, bytes: 0 };
  }

  /** Each sender holding unread records, by key. */
  list(): { sender: string; unread: Holdings }[] {
    return [...this.bySender].map(([sender, unread]) => ({ sender, unread: { ...unread } })).sort((a, b) => (a.sender < b.sender ? -1 : a.sender > b.sender ? 1 : 0));
  }
}

/** What an arrival does to its sender's unread holdings: itself unless superseded on arrival, less the unread progress it supersedes. */
export function unreadChange(size: number, supersededOnArrival: boolean, superseded: readonly StoredRecord[]): Holdings {
  const change = supersededOnArrival ? { records: 0, bytes: 0 } : { records: 1, bytes: size };
  for (const older of superseded) {
    if (!isUnread(older)) continue;
    change.records--;
    change.bytes -= older.size;
  }
  return change;
}
