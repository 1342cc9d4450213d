/**
 * The mailbox's records and journal ops as they are written to disk (DESIGN.md, "The
 * mailbox on disk"). Every byte read back is validated by these schemas.
 */
import { z } from 'zod';
import { envelopeSchema } from '../envelope/envelope.js';
import { receiptSchema } from '../envelope/receipt.js';

export const RECORD_STATES = [
  'receiver_stored',
  'inbox_queued',
  'notification_sent',
  'host_queued',
  'delivery_failed',
  'delivery_unknown',
  'receiver_acknowledged',
] as const;
export type RecordState = (typeof RECORD_STATES)[number];

const stateEntrySchema = z.object({ state: z.enum(RECORD_STATES), at: z.number().int() });
export type StateEntry = z.infer<typeof stateEntrySchema>;


export const recordSchema = z.object({
  seq: z.number().int().min(0),
  envelope: envelopeSchema,
  peer: z.string().optional(),
  received_at: z.number().int(),
  size: z.number().int().min(0),
  superseded_by: z.string().optional(),
  states: z.array(stateEntrySchema).min(1),
});
export type StoredRecord = z.infer<typeof recordSchema>;

const tombstoneSchema = z.object({ sender: z.string(), msg_id: z.string(), until: z.number().int() });
export type Tombstone = z.infer<typeof tombstoneSchema>;

/** A sender whose oldest tombstones the count bound took: its messages signed at or before `until` − 7 days are refused (tombstones.ts). */
const floorSchema = z.object({ sender: z.string(), until: z.number().int() });
export type Floor = z.infer<typeof floorSchema>;

export const BOUNDS = ['records', 'bytes', 'sender_records', 'sender_bytes'] as const;

/**
 * The last time a bound refused a sender's mail, and since when it has (DESIGN.md "The
 * mailbox": "When a bound refuses"); gone once a message of that sender is admitted.
 */
const refusalSchema = z.object({ sender: z.string(), bound: z.enum(BOUNDS), since: z.number().int(), at: z.number().int() });
export type Refusal = z.infer<typeof refusalSchema>;

/** The current notice reservation (DESIGN.md "Notices: waking the host"): at most one per session; `covered` holds receipt keys. */
const reservationSchema = z.object({
  id: z.string(),
  at: z.number().int(),
  attempt: z.number().int().min(0),
  covered: z.array(z.string()),
});

/** The snapshot's data: everything the state holds. */
export const mailboxDataSchema = z.object({
  next_seq: z.number().int().min(0),
  records: z.array(recordSchema),
  tombstones: z.array(tombstoneSchema),
  notice: reservationSchema.nullable().default(null),
  // Added with the per-sender bounds (issue 35): a snapshot written before has neither.
  floors: z.array(floorSchema).default([]),
  refusals: z.array(refusalSchema).default([]),
});
export type MailboxData = z.infer<typeof mailboxDataSchema>;

/**
 * A message offered to the mailbox, exactly as offered: replaying it reproduces the same
 * decision. Journaled when it was stored, or when a bound refused it and that refusal is
 * news (state.ts). `rules: 2` marks an op decided with the senders' shares; one written
 * before them (no `rules`) was admitted without them and is replayed without them, so an
 * upgrade never drops a message that was already acknowledged to its relay.
 */
const storeOpSchema = z.object({
  op: z.literal('store'),
  at: z.number().int(),
  envelope: envelopeSchema,
  peer: z.string().optional(),
  rules: z.literal(2).optional(),
});

const ackOpSchema = z.object({
  op: z.literal('ack'),
  at: z.number().int(),
  receipts: z.array(receiptSchema).min(1),
});

/** A notice reservation was made: the host is about to be told about `covered`. */
const noticeReserveOpSchema = z.object({
  op: z.literal('notice_reserve'),
  at: z.number().int(),
  id: z.string().min(1).max(64),
  attempt: z.number().int().min(0),
  covered: z.array(receiptSchema),
});

/** What became of the reservation's notice (recorded on the records it covered). */
export const NOTICE_OUTCOMES = ['inbox_queued', 'notification_sent', 'host_queued', 'delivery_failed', 'delivery_unknown'] as const;
const noticeOutcomeOpSchema = z.object({
  op: z.literal('notice_outcome'),
  at: z.number().int(),
  id: z.string(),
  state: z.enum(NOTICE_OUTCOMES),
});

/** receive_messages with reset_notification: forget the reservation so a new notice may follow. */
const noticeResetOpSchema = z.object({ op: z.literal('notice_reset'), at: z.number().int() });

export const opSchema = z.discriminatedUnion('op', [storeOpSchema, ackOpSchema, noticeReserveOpSchema, noticeOutcomeOpSchema, noticeResetOpSchema]);
export type Op = z.infer<typeof opSchema>;
export type StoreOp = z.infer<typeof storeOpSchema>;
export type AckOp = z.infer<typeof ackOpSchema>;
export type NoticeReserveOp = z.infer<typeof noticeReserveOpSchema>;
export type NoticeOutcomeOp = z.infer<typeof noticeOutcomeOpSchema>;
export type NoticeOutcome = (typeof NOTICE_OUTCOMES)[number];
export type Reservation = z.infer<typeof reservationSchema>;
