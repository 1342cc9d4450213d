/** `awaiting_session` as a view of an outbox record and the rosters, against its statement in words. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { AWAITING_SESSION, awaitingOf, type RosterSighting } from '../../src/agent/awaiting.js';
import { formatRoute } from '../../src/envelope/route.js';
import { REMOTE_STATES } from '../../src/receipts/receipts.js';
import type { OutboxRecord } from '../../src/outbox/outbox.js';
import { message, newIdentity } from '../helpers/fixtures.js';

const alice = newIdentity(1);
const bob = newIdentity(2);
const route = formatRoute({ key: bob.key, session: 'bob-s1' });

const sealed = message(alice, bob, { to_session: 'bob-s1', reply_to: formatRoute({ key: alice.key, session: 'a' }) });
const clearOne = message(alice, bob);

function record(fields: { accepted?: number; remote?: (typeof REMOTE_STATES)[number]; clear?: boolean }): OutboxRecord {
  return {
    envelope: fields.clear === true ? clearOne : sealed,
    route,
    created_at: 1_000,
    states: [{ state: 'pending', at: 1_000 }, ...(fields.accepted !== undefined ? [{ state: 'bus_accepted' as const, at: fields.accepted }] : [])],
    accepted_by: fields.accepted !== undefined ? ['ws://127.0.0.1:1'] : [],
    ...(fields.remote !== undefined && { remote: [{ state: fields.remote, at: 3_000, received_at: 3_000 }] }),
  };
}

const sighting = (answered: boolean, present: boolean, lastSeen?: number): RosterSighting => ({
  answered,
  present: new Set(present ? [route] : []),
  lastSeen: new Map(lastSeen === undefined ? [] : [[route, lastSeen]]),
});

describe('awaiting_session', () => {
  it('is the name the contract and the docs use', () => {
    expect(AWAITING_SESSION).toBe('awaiting_session');
  });

  it('holds exactly for an accepted sealed message with no report, its session on no roster that answered', () => {
    fc.assert(
      fc.property(
        fc.option(fc.integer({ min: 1_000, max: 10_000 }), { nil: undefined }),
        fc.option(fc.constantFrom(...REMOTE_STATES), { nil: undefined }),
        fc.boolean(),
        fc.boolean(),
        fc.boolean(),
        fc.option(fc.integer({ min: 0, max: 20_000 }), { nil: undefined }),
        (accepted, remote, clear, answered, present, lastSeen) => {
          const r = record({ ...(accepted !== undefined && { accepted }), ...(remote !== undefined && { remote }), clear });
          const view = awaitingOf(r, sighting(answered, present, lastSeen));
          const holds = accepted !== undefined && remote === undefined && !clear && answered && !present;
          expect(view !== undefined).toBe(holds);
          if (view !== undefined) {
            // Since the later of the acceptance and the last sighting on a roster.
            expect(view.since_at).toBe(Math.max(accepted!, lastSeen ?? 0));
            expect(view.session).toBe('bob-s1');
            expect(view.note).toContain('bob-s1');
          }
        },
      ),
      { numRuns: 2_000 },
    );
  });

  it('counts from the acceptance when the session left the rosters before it', () => {
    expect(awaitingOf(record({ accepted: 5_000 }), sighting(true, false, 2_000))?.since_at).toBe(5_000);
    expect(awaitingOf(record({ accepted: 5_000 }), sighting(true, false, 8_000))?.since_at).toBe(8_000);
    expect(awaitingOf(record({ accepted: 5_000 }), sighting(true, false))?.since_at).toBe(5_000);
  });
});
