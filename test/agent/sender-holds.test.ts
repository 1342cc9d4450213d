/**
 * The rule that keeps a sender's order while its share is full (agent/sender-holds.ts):
 * after one of its messages is refused and held, its later ones wait behind it, an
 * earlier one is tried, and admitting the held one hands back the rest to ask for.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { BEHIND_MS, HOLD_FORGET_MS, SenderHolds } from '../../src/agent/sender-holds.js';

const T = 1_000_000;

describe('SenderHolds', () => {
  it('tries everything while nothing is held', () => {
    const holds = new SenderHolds<string>();
    expect(holds.behind('alice', 'm1', 1, T, 'w1')).toBe(false);
    expect(holds.held('alice')).toBe(0);
  });

  it('holds a refused message; later ones of that sender wait, earlier ones and other senders are tried', () => {
    const holds = new SenderHolds<string>();
    holds.refused('alice', 'm5', 5, T, 'w5');
    expect(holds.behind('alice', 'm6', 6, T, 'w6')).toBe(true);
    expect(holds.behind('alice', 'm5', 5, T, 'w5')).toBe(false);
    expect(holds.behind('alice', 'm4', 4, T, 'w4')).toBe(false);
    expect(holds.behind('carol', 'c9', 9, T, 'c9')).toBe(false);
    expect(holds.held('alice')).toBe(2);
  });

  it('admitting the earliest hands back the rest, in signed order; admitting another hands back nothing', () => {
    const holds = new SenderHolds<string>();
    holds.refused('alice', 'm5', 5, T, 'w5');
    holds.behind('alice', 'm8', 8, T, 'w8');
    holds.behind('alice', 'm7', 7, T, 'w7');
    expect(holds.settled('alice', 'm7')).toEqual([]);
    holds.behind('alice', 'm7', 7, T, 'w7');
    expect(holds.settled('alice', 'm5')).toEqual(['w7', 'w8']);
    // m7 is the earliest now: tried; m8 still waits behind it.
    expect(holds.behind('alice', 'm7', 7, T, 'w7')).toBe(false);
    expect(holds.behind('alice', 'm8', 8, T, 'w8')).toBe(true);
  });

  it('asks for 1, 2, 4, 8, then 10 s while the earliest keeps being refused, and 1 s again after an admission', () => {
    const holds = new SenderHolds<string>();
    const delays = [1, 2, 3, 4, 5, 6].map(() => holds.refused('alice', 'm1', 1, T, 'w1'));
    expect(delays).toEqual([1_000, 2_000, 4_000, 8_000, 10_000, 10_000]);
    holds.refused('alice', 'm2', 2, T, 'w2');
    holds.settled('alice', 'm1');
    expect(holds.refused('alice', 'm2', 2, T, 'w2')).toBe(1_000);
  });

  it('forgets a hold not seen for HOLD_FORGET_MS, longer than any delay it asks for', () => {
    expect(HOLD_FORGET_MS).toBeGreaterThan(2 * BEHIND_MS);
    const holds = new SenderHolds<string>();
    holds.refused('alice', 'm1', 1, T, 'w1');
    expect(holds.behind('alice', 'm2', 2, T + HOLD_FORGET_MS - 1, 'w2')).toBe(true);
    expect(holds.behind('alice', 'm3', 3, T + HOLD_FORGET_MS + 1, 'w3')).toBe(true);
    // m1 is forgotten: m2 is the earliest held now, and is tried.
    expect(holds.behind('alice', 'm2', 2, T + HOLD_FORGET_MS + 1, 'w2')).toBe(false);
  });

  it('property: a message is tried only when no earlier message of its sender is held, whatever order they arrive in', () => {
    const op = fc.oneof(
      fc.record({ kind: fc.constant('arrive' as const), n: fc.integer({ min: 0, max: 20 }) }),
      fc.record({ kind: fc.constant('read' as const) }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 300 }), fc.integer({ min: 0, max: 5 }), (ops, share) => {
        const holds = new SenderHolds<number>();
        let room = share;
        const admitted = new Set<number>();
        const refused = new Set<number>();
        for (const o of ops) {
          if (o.kind === 'read') {
            room++;
            continue;
          }
          if (admitted.has(o.n) || holds.behind('alice', `m${o.n}`, o.n, T, o.n)) continue;
          expect([...refused].filter((m) => m < o.n)).toEqual([]);
          if (room === 0) {
            holds.refused('alice', `m${o.n}`, o.n, T, o.n);
            refused.add(o.n);
            continue;
          }
          room--;
          holds.settled('alice', `m${o.n}`);
          refused.delete(o.n);
          admitted.add(o.n);
        }
      }),
    );
  });
});
