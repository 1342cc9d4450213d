/** The sticky table's seed from the stores: the newest session each peer was met at. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { newestSessions, type Sighting } from '../../src/agent/known-sessions.js';
import { formatRoute } from '../../src/envelope/route.js';

const keys = ['K1', 'K2', 'K3'];
const sightingArb: fc.Arbitrary<Sighting> = fc.record({ key: fc.constantFrom(...keys), session: fc.constantFrom('s1', 's2', 's3', 'me'), at: fc.integer({ min: 0, max: 50 }) });

describe('known sessions', () => {
  it('keeps, per peer, the session of its newest sighting (the later listed on a tie), never this session', () => {
    fc.assert(
      fc.property(fc.array(sightingArb, { maxLength: 12 }), (sightings) => {
        const me = formatRoute({ key: 'K1', session: 'me' });
        const table = newestSessions(sightings, me);
        for (const key of keys) {
          const mine = sightings.filter((s) => s.key === key && formatRoute(s) !== me);
          if (mine.length === 0) {
            expect(table.has(key)).toBe(false);
            continue;
          }
          const newest = Math.max(...mine.map((s) => s.at));
          expect(table.get(key)).toBe(mine.filter((s) => s.at === newest).at(-1)!.session);
        }
      }),
      { numRuns: 2_000 },
    );
  });
});
