/**
 * When to wake the host (DESIGN.md "Notices: waking the host", Schedule), as a pure function.
 *
 * There is one notice reservation per session. A reservation covers the attention-worthy
 * unread messages (everything but progress) at the time it is made, and holds for 30 s;
 * while attention-worthy messages remain unread, the next reservations follow after 60,
 * 120, 240 and then at most 300 s. Messages that arrive while a reservation is
 * outstanding wait for it (a host may already be reading them). A reservation ends when
 * everything it covered is acknowledged or superseded; the next one starts the
 * schedule again.
 */
import type { Reservation } from '../mailbox/format.js';

/** How long reservation number `attempt` (0 = the first) holds before the next may be made. */
export function holdFor(attempt: number): number {
  const steps = [30_000, 60_000, 120_000, 240_000];
  return attempt < steps.length ? steps[attempt]! : 300_000;
}

/** `covered`: the receipts of the attention-worthy messages the new reservation points at. */
export type NoticeDecision<R> = { action: 'wait'; until?: number } | { action: 'reserve'; attempt: number; covered: R[] };

/** Of the current reservation only its time and attempt count; what it covered does not. */
export function decideNotice<R>(input: { now: number; attention: readonly R[]; reservation: Pick<Reservation, 'at' | 'attempt'> | undefined }): NoticeDecision<R> {
  const { now, attention, reservation } = input;
  if (attention.length === 0) return { action: 'wait' };
  if (reservation !== undefined) {
    const until = reservation.at + holdFor(reservation.attempt);
    if (now < until) return { action: 'wait', until };
    return { action: 'reserve', attempt: reservation.attempt + 1, covered: [...attention] };
  }
  return { action: 'reserve', attempt: 0, covered: [...attention] };
}
