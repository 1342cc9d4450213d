/**
 * What the relay's durable queues write (DESIGN.md "The durable store"): the journal's ops
 * (`enq`, `ack`, `expire`) and the snapshot's data, one zod schema each, validated where
 * the files are read. The state they describe is `RelayQueueState` (queues.ts).
 */
import { z } from 'zod';
import { routeText as route } from '../envelope/route.js';

const at = z.number().int();
const id = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);
/** The JSON text of the `send` frame's payload object, delivered exactly as stored. */
const payload = z.string().refine((s) => s.startsWith('{') && s.endsWith('}'), 'must be the JSON text of an object');

/** The sender's address, as the relay keeps it: a keyed hash (storage.ts), never the address itself. */
const src = z.string().min(1).max(64);

const enqOpSchema = z.object({ op: z.literal('enq'), at, route, id, payload, src: src.optional() });
const ackOpSchema = z.object({ op: z.literal('ack'), at, route, ids: z.array(id).min(1) });
/** Every message accepted before `before` (relay clock) leaves; a route left empty goes with it. */
const expireOpSchema = z.object({ op: z.literal('expire'), at, before: at });
export const queueOpSchema = z.discriminatedUnion('op', [enqOpSchema, ackOpSchema, expireOpSchema]);
export type QueueOp = z.infer<typeof queueOpSchema>;
export type EnqueueOp = z.infer<typeof enqOpSchema>;
export type AckOp = z.infer<typeof ackOpSchema>;
export type ExpireOp = z.infer<typeof expireOpSchema>;

export const queuedSchema = z.object({ id, at, payload, src: src.optional() });
/** A queued message as the snapshot holds it. */
export type QueuedData = z.infer<typeof queuedSchema>;
/** The snapshot: the id counter and every queued message, per route in id order. */
export const queueDataSchema = z
  .object({ next_id: id, routes: z.array(z.object({ route, messages: z.array(queuedSchema).min(1) })) })
  .refine((data) => new Set(data.routes.map((r) => r.route)).size === data.routes.length, 'routes must be unique')
  .refine(
    (data) => data.routes.every((r) => r.messages.every((m, i) => m.id < data.next_id && (i === 0 || m.id > r.messages[i - 1]!.id))),
    'message ids must increase within a route and stay below next_id',
  );
export type QueueData = z.infer<typeof queueDataSchema>;

