/**
 * What the capacity run's parent and its worker processes tell each other over the fork
 * channel: one schema per direction, checked where each message arrives, so a worker
 * that says something unexpected stops the run with a sentence instead of a wrong figure.
 */
import { z } from 'zod';

const count = z.number().int().min(0);
const ms = z.number().min(0);

// ---- parent → worker ----

/**
 * Sessions `first` … `first + count - 1` of the run (global indices: a pair is an even
 * index and the next one, so `first` and `count` are even and a pair never spans two
 * workers). `relays` pin the keys the relays proved to the parent.
 */
export const planMessage = z.object({
  type: z.literal('plan'),
  relays: z.array(z.string()).min(1),
  first: count,
  count: count,
  rate: z.number().min(0).max(1),
  rampPerSecond: z.number().positive(),
  rosterSample: z.number().min(0).max(1),
});
export type PlanMessage = z.infer<typeof planMessage>;

export const parentMessage = z.discriminatedUnion('type', [
  planMessage,
  z.object({ type: z.literal('roster') }),
  z.object({ type: z.literal('traffic'), durationMs: ms, drainMs: ms }),
  z.object({ type: z.literal('stop') }),
]);
export type ParentMessage = z.infer<typeof parentMessage>;

// ---- worker → parent ----

export const rosterResult = z.object({
  /** Sessions that asked. */
  checked: count,
  /** Sessions that got a roster answer (the relay may refuse one `rate_limited`). */
  answered: count,
  /** Sessions that found their pair, its announcement verified, in any pass. */
  found: count,
  /**
   * Those that found it on their first request: at any one moment, the share of sessions
   * a peer can find (a roster past its bound lists only the most recently heard, so later
   * passes find others as announcements are renewed).
   */
  foundFirst: count,
  /** Roster requests made in all, retries included. */
  requests: count,
  /** The most entries one roster answer held. */
  entriesMax: count,
  /** The JSON size of the largest answer's entries. */
  bytesMax: count,
});
export type RosterResult = z.infer<typeof rosterResult>;

export const trafficResult = z.object({
  sent: count,
  accepted: count,
  /** Refused sends by refusal code. */
  refused: z.record(z.string(), count),
  /** Sends the relay never answered (timeout, or the connection dropped). */
  unanswered: count,
  delivered: count,
  duplicates: count,
  /** Accepted and not delivered when the drain ended. */
  lost: count,
  /** Deliveries the trust gate refused, by code. */
  rejected: z.record(z.string(), count),
  receiptsSent: count,
  receiptsAccepted: count,
  receiptsDelivered: count,
  /** Messages a receipt reported back to their sender. */
  receipted: count,
  /** Milliseconds, sender side, one per delivered message (bounded sample). */
  acceptToDeliver: z.array(ms),
  sendToAccept: z.array(ms),
  /** Deliveries that reached the receiver before the sender read `accepted` (counted as 0 above). */
  deliveredFirst: count,
});
export type TrafficResult = z.infer<typeof trafficResult>;

export const workerMessage = z.discriminatedUnion('type', [
  z.object({ type: z.literal('progress'), connected: count }),
  /** `troubles`: why connection attempts failed, with counts (once per outage of a session). */
  z.object({ type: z.literal('ramped'), connected: count, failed: count, troubles: z.record(z.string(), count) }),
  z.object({ type: z.literal('rostered'), result: rosterResult }),
  z.object({ type: z.literal('report'), result: trafficResult, disconnects: count, connected: count, troubles: z.record(z.string(), count) }),
  z.object({ type: z.literal('error'), message: z.string() }),
]);
export type WorkerMessage = z.infer<typeof workerMessage>;
