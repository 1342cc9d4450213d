/** The notice schedule, exhaustively with a fake clock. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Reservation } from '../../src/mailbox/format.js';
import { decideNotice, holdFor } from '../../src/notices/schedule.js';

describe('notice schedule', () => {
  it('holds 30 s, then 60, 120, 240 and at most 300 s', () => {
    expect([0, 1, 2, 3, 4, 5, 50].map(holdFor)).toEqual([30_000, 60_000, 120_000, 240_000, 300_000, 300_000, 300_000]);
  });

  it('never wakes for nothing, reserves at once for the first message, and waits while a reservation holds', () => {
    expect(decideNotice({ now: 0, attention: [], reservation: undefined })).toEqual({ action: 'wait' });
    expect(decideNotice({ now: 0, attention: ['a 1'], reservation: undefined })).toEqual({ action: 'reserve', attempt: 0, covered: ['a 1'] });
    const held: Reservation = { id: 'n1', at: 1_000, attempt: 0, covered: ['a 1'] };
    expect(decideNotice({ now: 30_999, attention: ['a 1', 'a 2'], reservation: held })).toEqual({ action: 'wait', until: 31_000 });
    expect(decideNotice({ now: 31_000, attention: ['a 1', 'a 2'], reservation: held })).toEqual({ action: 'reserve', attempt: 1, covered: ['a 1', 'a 2'] });
  });

  it('over any clock, gives the retry times the spec lists while a message stays unread', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: 400_000 }), { minLength: 1, maxLength: 60 }), (steps) => {
        let now = 0;
        let reservation: Reservation | undefined;
        const reservedAt: number[] = [];
        for (const step of steps) {
          const decision = decideNotice({ now, attention: ['peer m1'], reservation });
          if (decision.action === 'reserve') {
            expect(decision.attempt).toBe(reservedAt.length);
            if (reservation) expect(now - reservation.at).toBeGreaterThanOrEqual(holdFor(reservation.attempt));
            reservation = { id: `n${reservedAt.length}`, at: now, attempt: decision.attempt, covered: decision.covered };
            reservedAt.push(now);
          } else if (reservation) {
            expect(now - reservation.at).toBeLessThan(holdFor(reservation.attempt));
          }
          now += step;
        }
        // Gaps between reservations are never shorter than the schedule.
        for (let i = 1; i < reservedAt.length; i++) expect(reservedAt[i]! - reservedAt[i - 1]!).toBeGreaterThanOrEqual(holdFor(i - 1));
      }),
      { numRuns: 500 },
    );
  });
});
