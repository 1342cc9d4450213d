/**
 * The two ledgers of `after` (docs/PROTOCOL.md "Order through refusals"): the relay's
 * memory of a connection's sends (send-chain.ts) and the session's memory of what it
 * offered on its connection (offer-ledger.ts).
 */
import { describe, expect, it } from 'vitest';
import { MAX_REMEMBERED, SendChain } from '../../src/relay/send-chain.js';
import { OfferLedger } from '../../src/relay/offer-ledger.js';

describe('SendChain (the relay)', () => {
  it('a later send learns the outcome once the earlier one is decided, not before', async () => {
    const chain = new SendChain();
    const settle = chain.begin('a');
    let learned: string | undefined;
    const waiting = chain.preceding('a').then((p) => (learned = p));
    await Promise.resolve();
    expect(learned).toBeUndefined();
    settle(false);
    await waiting;
    expect(learned).toBe('refused');
  });

  it('settles once: a second verdict changes nothing', async () => {
    const chain = new SendChain();
    const settle = chain.begin('a');
    settle(true);
    settle(false);
    expect(await chain.preceding('a')).toBe('accepted');
  });

  it('a ref never begun, or pushed out by MAX_REMEMBERED later ones, is unknown', async () => {
    const chain = new SendChain();
    expect(await chain.preceding('nope')).toBe('unknown');
    chain.begin('old')(true);
    for (let i = 0; i < MAX_REMEMBERED; i++) chain.begin(`r${i}`)(true);
    expect(await chain.preceding('old')).toBe('unknown');
    expect(await chain.preceding(`r${MAX_REMEMBERED - 1}`)).toBe('accepted');
  });

  it('a ref used again stands for its latest send', async () => {
    const chain = new SendChain();
    chain.begin('a')(false);
    chain.begin('a')(true);
    expect(await chain.preceding('a')).toBe('accepted');
  });
});

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
