/**
 * The session's memory of what it offered on its connection, for `after` (docs/PROTOCOL.md
 * "Order through refusals"; link/offer-ledger.ts).
 */
import { describe, expect, it } from 'vitest';
import { OfferLedger } from '../../src/link/offer-ledger.js';

describe('OfferLedger (the session)', () => {
  it('follows a pending send by its ref, an accepted one without a condition, and never a refused or unknown one', () => {
    const ledger = new OfferLedger();
    expect(ledger.follow('m1')).toEqual({ refuse: expect.stringMatching(/not on offer on this connection/) });
    ledger.offered('m1', '7');
    expect(ledger.follow('m1')).toEqual({ after: '7' });
    ledger.answered('m1', '7', true);
    expect(ledger.follow('m1')).toEqual({});
    ledger.offered('m2', '8');
    ledger.answered('m2', '8', false);
    expect(ledger.follow('m2')).toEqual({ refuse: expect.stringMatching(/was refused on this connection/) });
  });

  it('an answer to an earlier offer of the same message does not speak for the latest', () => {
    const ledger = new OfferLedger();
    ledger.offered('m1', '1');
    ledger.offered('m1', '2');
    ledger.answered('m1', '1', false);
    expect(ledger.follow('m1')).toEqual({ after: '2' });
  });

  it('forgets everything with the connection', () => {
    const ledger = new OfferLedger();
    ledger.offered('m1', '1');
    ledger.clear();
    expect(ledger.follow('m1')).toHaveProperty('refuse');
  });
});
