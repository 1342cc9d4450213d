/**
 * The mailbox's records and journal ops as they are written to disk (DESIGN.md, "The
 * mailbox on disk"). Every byte read back is validated by these schemas.
 */
import { z } from 'zod';
import { envelopeSchema } from '../envelope/envelope.js';

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

const receiptSchema = z.object({ sender: z.string(), msg_id: z.string() });
export type Receipt = z.infer<typeof receiptSchema>;

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

/** The snapshot's data: everything the state holds. */
export const mailboxDataSchema = z.object({
  next_seq: z.number().int().min(0),
  records: z.array(recordSchema),
  tombstones: z.array(tombstoneSchema),
});
export type MailboxData = z.infer<typeof mailboxDataSchema>;

/** A stored message, exactly as admitted: replaying it reproduces the same decision. */
const storeOpSchema = z.object({
  op: z.literal('store'),
  at: z.number().int(),
  envelope: envelopeSchema,
  peer: z.string().optional(),
});

const ackOpSchema = z.object({
  op: z.literal('ack'),
  at: z.number().int(),
  receipts: z.array(receiptSchema).min(1),
});

export const opSchema = z.discriminatedUnion('op', [storeOpSchema, ackOpSchema]);
export type Op = z.infer<typeof opSchema>;
export type StoreOp = z.infer<typeof storeOpSchema>;
export type AckOp = z.infer<typeof ackOpSchema>;
