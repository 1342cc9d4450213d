/**
 * The relay's memory of a connection's sends, for `after` (docs/PROTOCOL.md "Order through
 * refusals"; relay/send-chain.ts). The session's side: test/link/offer-ledger.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { MAX_REMEMBERED, SendChain } from '../../src/relay/send-chain.js';

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
