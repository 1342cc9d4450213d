/**
 * The signed `ts` of a session's messages (docs/PROTOCOL.md, "Envelope"): strictly
 * increasing, so a receiver can put one sender's messages in the order they were sent
 * whatever order the relays delivered them in. It starts above every message still in
 * the outbox, so a restart does not go back; a burst in one millisecond runs ahead of
 * the wall clock by a millisecond per message.
 */

/**
 * How far ahead of the wall clock the timestamp may run. Half the receivers' 60 s
 * future bound: a clock that was set back further than this starts again from the wall
 * clock, because a message stamped beyond the bound would be refused as `from_future`.
 */
export const MAX_LEAD_MS = 30_000;

export function nextTimestamp(now: number, last: number): number {
  const next = Math.max(now, last + 1);
  return next - now > MAX_LEAD_MS ? now : next;
}

/** One sending process's clock; `last` is the newest timestamp it must stay above. */
export class SendClock {
  constructor(
    private last: number,
    private readonly now: () => number = Date.now,
  ) {}

  next(): number {
    this.last = nextTimestamp(this.now(), this.last);
    return this.last;
  }
}
