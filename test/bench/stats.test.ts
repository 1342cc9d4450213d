/** How benchmark figures are printed where a check judges them (scripts/bench/stats.ts). */
import { describe, expect, it } from 'vitest';
import { formatRatio, formatRatioAgainst, formatRatioRange } from '../../scripts/bench/stats.js';

describe('a ratio beside its goal', () => {
  it('gets a third digit only when two would print the goal for a ratio on either side of it', () => {
    expect(formatRatioAgainst(0.897, 0.9)).toBe('0.897×');
    expect(formatRatioAgainst(0.9031, 0.9)).toBe('0.903×');
    expect(formatRatioAgainst(0.9, 0.9)).toBe('0.90×');
    expect(formatRatioAgainst(0.88, 0.9)).toBe('0.88×');
    expect(formatRatioAgainst(1.104, 1.1)).toBe('1.104×');
    expect(formatRatioAgainst(12.3, 4)).toBe('12.3×');
    expect(formatRatio(0.897)).toBe('0.90×');
  });
});

describe("the rounds' spread beside a median", () => {
  it('prints the lowest and highest ratio in any order of rounds, one ratio for one round or equal rounds, and a dash for none', () => {
    expect(formatRatioRange([0.72, 0.59, 0.81])).toBe('0.59–0.81×');
    expect(formatRatioRange([0.9])).toBe('0.90×');
    expect(formatRatioRange([1.2, 1.2])).toBe('1.20×');
    expect(formatRatioRange([0.95, 11.04])).toBe('0.95–11.0×');
    expect(formatRatioRange([])).toBe('–');
  });
});
