/**
 * What a stored record's states say (format.ts, `states`: each state a record reached, in
 * order): whether it is acknowledged, whether it is still unread, and where it stands now.
 * The mailbox state, reading and the CLI's `inbox` all ask the same questions, answered
 * here once.
 */
import type { RecordState, StoredRecord } from './format.js';

export function isAcknowledged(record: StoredRecord): boolean {
  return record.states.some((s) => s.state === 'receiver_acknowledged');
}

/** Unread: neither acknowledged nor superseded. Only these are fetched. */
export function isUnread(record: StoredRecord): boolean {
  return record.superseded_by === undefined && !isAcknowledged(record);
}

export function currentState(record: StoredRecord): RecordState {
  return record.states[record.states.length - 1]!.state;
}
