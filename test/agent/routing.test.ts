/** The routing rule, exhaustively over small rosters, against its statement in words. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { AWAY_MS, LIVE_MS, awaitsRoster, chooseSession, presenceState, type SessionView } from '../../src/agent/routing.js';

const sessionArb = fc.record({ session: fc.constantFrom('alpha', 'alps', 'beta', 'b2', 'gamma', 'cli', 'cl9'), state: fc.constantFrom<'live' | 'away'>('live', 'away') });
const rosterArb: fc.Arbitrary<SessionView[]> = fc.uniqueArray(sessionArb, { selector: (s) => s.session, maxLength: 5 });
const nameArb = fc.constantFrom('alpha', 'alps', 'al', 'b', 'beta', 'gamma', 'delta', 'a', 'cli', 'c', 'cl9');

/**
 * The rule as the spec states it, written independently of the implementation. The
 * `pair` command's session `cli` is not there for mail: as if it were not on the roster.
 * With no roster answer (no relay answers) the roster is unknown: a hint is an exact id,
 * else the sticky session, else nothing.
 */
function reference(hint: string | undefined, stickyIn: string | undefined, everyone: SessionView[], answered: boolean): string | 'error' {
  const sessions = answered ? everyone.filter((s) => s.session !== 'cli') : [];
  const sticky = stickyIn === 'cli' ? undefined : stickyIn;
  if (!answered && hint === undefined) return sticky ?? 'error';
  if (hint !== undefined) {
    if (hint === 'cli') return 'error';
    if (sessions.some((s) => s.session === hint)) return hint;
    const prefixed = sessions.filter((s) => s.session.startsWith(hint));
    if (prefixed.length === 1) return prefixed[0]!.session;
    if (prefixed.length > 1) return 'error';
    return hint;
  }
  if (sticky !== undefined && sessions.some((s) => s.session === sticky)) return sticky;
  const live = sessions.filter((s) => s.state === 'live');
  if (live.length === 1) return live[0]!.session;
  if (live.length === 0) {
    const away = sessions.filter((s) => s.state === 'away');
    if (away.length === 1) return away[0]!.session;
  }
  if (sessions.length === 0 && sticky !== undefined) return sticky;
  return 'error';
}

describe('routing', () => {
  it('chooses the session the rule names, or lists the candidates', () => {
    fc.assert(
      fc.property(fc.option(nameArb, { nil: undefined }), fc.option(nameArb, { nil: undefined }), rosterArb, fc.boolean(), (hint, sticky, sessions, answered) => {
        const decision = chooseSession({ sessions, answered, ...(hint !== undefined && { hint }), ...(sticky !== undefined && { sticky }) });
        const expected = reference(hint, sticky, sessions, answered);
        if (expected === 'error') {
          expect(decision.ok).toBe(false);
          if (!decision.ok) expect(decision.candidates.every((c) => sessions.includes(c) && c.session !== 'cli')).toBe(true);
        } else {
          expect(decision).toMatchObject({ ok: true, session: expected });
        }
      }),
      { numRuns: 4_000 },
    );
  });

  it('never sends agent mail to the pair command\'s session', () => {
    const cliLive = { session: 'cli', state: 'live' as const };
    const agent = { session: 'd1', state: 'live' as const };
    expect(chooseSession({ answered: true, sessions: [cliLive, agent] })).toMatchObject({ ok: true, session: 'd1', reason: 'single_live' });
    expect(chooseSession({ answered: true, sessions: [cliLive] })).toMatchObject({ ok: false, reason: 'no_session', candidates: [] });
    expect(chooseSession({ answered: true, sticky: 'cli', sessions: [cliLive, { session: 'd1', state: 'away' }] })).toMatchObject({ ok: true, session: 'd1', reason: 'single_away' });
    expect(chooseSession({ answered: true, hint: 'cli', sessions: [cliLive, agent] })).toMatchObject({ ok: false, reason: 'pairing_session' });
    expect(chooseSession({ answered: true, hint: 'c', sessions: [cliLive, { session: 'c7', state: 'away' }] })).toMatchObject({ ok: true, session: 'c7', reason: 'prefix' });
  });

  it('names why it chose', () => {
    const roster: SessionView[] = [
      { session: 'alpha', state: 'live' },
      { session: 'beta', state: 'away' },
    ];
    expect(chooseSession({ answered: true, hint: 'alpha', sessions: roster })).toMatchObject({ reason: 'exact' });
    expect(chooseSession({ answered: true, hint: 'be', sessions: roster })).toMatchObject({ reason: 'prefix', session: 'beta' });
    expect(chooseSession({ answered: true, hint: 'zeta', sessions: roster })).toMatchObject({ reason: 'offline_exact', session: 'zeta' });
    expect(chooseSession({ answered: true, sticky: 'beta', sessions: roster })).toMatchObject({ reason: 'sticky' });
    expect(chooseSession({ answered: true, sessions: roster })).toMatchObject({ reason: 'single_live', session: 'alpha' });
    expect(chooseSession({ answered: true, sessions: [roster[1]!] })).toMatchObject({ reason: 'single_away' });
    expect(chooseSession({ answered: true, sticky: 'old', sessions: [] })).toMatchObject({ reason: 'sticky_gone', session: 'old' });
    expect(chooseSession({ answered: true, sessions: [] })).toMatchObject({ ok: false, reason: 'no_session' });
    expect(chooseSession({ answered: true, hint: 'a', sessions: [roster[0]!, { session: 'alps', state: 'away' }] })).toMatchObject({ ok: false, reason: 'ambiguous' });
  });

  it('with no relay answering, routes only to a hint or a session known from history, and says so', () => {
    const roster: SessionView[] = [{ session: 'alpha', state: 'live' }];
    expect(chooseSession({ answered: false, sticky: 'old', sessions: roster })).toMatchObject({ ok: true, session: 'old', reason: 'sticky_unanswered' });
    expect(chooseSession({ answered: false, sessions: roster })).toMatchObject({ ok: false, reason: 'no_relay', candidates: [] });
    expect(chooseSession({ answered: false, hint: 'al', sessions: roster })).toMatchObject({ ok: true, session: 'al', reason: 'offline_exact' });
    expect(chooseSession({ answered: false, hint: 'cli', sessions: [] })).toMatchObject({ ok: false, reason: 'pairing_session' });
  });

  it('asks the rosters again exactly while none answered, or while none of the peer\'s sessions is on them and no exact one was named', () => {
    fc.assert(
      fc.property(fc.option(nameArb, { nil: undefined }), fc.option(nameArb, { nil: undefined }), rosterArb, fc.boolean(), (hint, sticky, sessions, answered) => {
        const decision = chooseSession({ sessions, answered, ...(hint !== undefined && { hint }), ...(sticky !== undefined && { sticky }) });
        const mail = sessions.filter((s) => s.session !== 'cli');
        // Answered: only `no_session` and `sticky_gone`, which need no hint and none of the peer's sessions on the roster.
        const expected = answered ? hint === undefined && mail.length === 0 : hint !== 'cli';
        expect(awaitsRoster(decision, answered)).toBe(expected);
      }),
      { numRuns: 4_000 },
    );
  });

  it('calls a session live under 90 s of silence, away up to 3 days, then gone', () => {
    expect(presenceState(0)).toBe('live');
    expect(presenceState(LIVE_MS - 1)).toBe('live');
    expect(presenceState(LIVE_MS)).toBe('away');
    expect(presenceState(AWAY_MS - 1)).toBe('away');
    expect(presenceState(AWAY_MS)).toBeUndefined();
  });
});
