/**
 * The session's notice reservation, as the mailbox state holds it (DESIGN.md "Notices":
 * "Reservation state"): which unread messages the notice in flight covers, what became of
 * the notice on those messages, and its end once none of them is unread any more. It
 * changes only by the journaled ops `notice_reserve`, `notice_outcome` and `notice_reset`,
 * and when an arrival or an acknowledgement leaves nothing it covered unread. No I/O.
 */
import { receiptKey } from '../envelope/receipt.js';
import type { NoticeOutcomeOp, NoticeReserveOp, Reservation, StoredRecord } from './format.js';
import { isUnread } from './record-state.js';

/** Whether a notice op changed anything (and so must be journaled). */
export interface NoticeChange {
  notice: boolean;
}

/** The mailbox's records by receipt key: what a reservation covers. */
type Records = ReadonlyMap<string, StoredRecord>;

export class NoticeReservation {
  constructor(private current: Reservation | undefined = undefined) {}

  /** The current reservation, if one is outstanding. */
  get value(): Reservation | undefined {
    return this.current;
  }

  reserve(op: NoticeReserveOp): NoticeChange {
    this.current = { id: op.id, at: op.at, attempt: op.attempt, covered: op.covered.map(receiptKey) };
    return { notice: true };
  }

  /** Records the notice's fate on the covered messages that are still unread. */
  recordOutcome(op: NoticeOutcomeOp, records: Records): NoticeChange {
    if (this.current?.id !== op.id) return { notice: false };
    let changed = false;
    for (const key of this.current.covered) {
      const record = records.get(key);
      if (record === undefined || !isUnread(record)) continue;
      record.states.push({ state: op.state, at: op.at });
      changed = true;
    }
    return { notice: changed };
  }

  reset(): NoticeChange {
    const had = this.current !== undefined;
    this.current = undefined;
    return { notice: had };
  }

  /** A reservation ends once everything it covered is acknowledged, superseded or gone. */
  releaseIfDone(records: Records): void {
    if (this.current === undefined) return;
    const open = this.current.covered.some((key) => {
      const record = records.get(key);
      return record !== undefined && isUnread(record);
    });
    if (!open) this.current = undefined;
  }
}
