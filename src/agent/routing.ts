/**
 * Which session of a peer a message goes to, when the sender did not name one exactly.
 * Pure: it takes what the roster and the sticky table say and returns a decision.
 *
 *   1. a session hint: an exact id, or a unique prefix of a session on the roster;
 *   2. the sticky session (the one that peer last wrote from), if it is on the roster;
 *   3. the single live session;
 *   4. the single away session;
 *   5. the sticky session even though it is gone (its queue waits on the relay);
 *   otherwise an error listing the candidates.
 *
 * With no roster answer at all (no relay answers), the roster says nothing about who is
 * there: a hint is taken as an exact id, else the sticky session (known from this
 * identity's own history: mailbox, outbox, what arrived since start) is used and the
 * message waits in the outbox until a relay answers; with neither, `no_relay`.
 *
 * The `cli` session (the `pair` command's, DESIGN.md "Pairing") is never chosen: it is on
 * the rosters so that people can be asked to pair, and no agent reads its mail.
 */
export type PresenceState = 'live' | 'away';

export interface SessionView {
  session: string;
  state: PresenceState;
}

export type RouteReason = 'exact' | 'prefix' | 'offline_exact' | 'sticky' | 'single_live' | 'single_away' | 'sticky_gone' | 'sticky_unanswered';

export type RouteDecision =
  | { ok: true; session: string; reason: RouteReason }
  | { ok: false; reason: 'ambiguous' | 'no_session' | 'pairing_session' | 'no_relay'; candidates: SessionView[] };

export interface RouteInput {
  hint?: string;
  /** The session the peer last wrote from, or this session last wrote to (the sticky table). */
  sticky?: string;
  /** The peer's sessions on the rosters that answered. */
  sessions: readonly SessionView[];
  /** Whether any relay answered a roster request: without an answer the roster is unknown, not empty. */
  answered: boolean;
}

/** The session `interlink-mcp pair` runs as; reserved, so no agent session takes the id. */
export const PAIRING_SESSION = 'cli';

/** Whether agent mail may go to this session. */
export function isMailSession(session: string): boolean {
  return session !== PAIRING_SESSION;
}

export const LIVE_MS = 90_000;
export const AWAY_MS = 3 * 24 * 60 * 60 * 1000;

/** live under 90 s of silence, away up to 3 days, then gone (undefined). */
export function presenceState(ageMs: number): PresenceState | undefined {
  if (ageMs < LIVE_MS) return 'live';
  if (ageMs < AWAY_MS) return 'away';
  return undefined;
}

export function chooseSession(input: RouteInput): RouteDecision {
  const sessions = input.answered ? input.sessions.filter((s) => isMailSession(s.session)) : [];
  const sticky = input.sticky !== undefined && isMailSession(input.sticky) ? input.sticky : undefined;
  const { hint } = input;
  if (hint !== undefined) {
    if (!isMailSession(hint)) return { ok: false, reason: 'pairing_session', candidates: sessions };
    if (sessions.some((s) => s.session === hint)) return { ok: true, session: hint, reason: 'exact' };
    const matches = sessions.filter((s) => s.session.startsWith(hint));
    if (matches.length === 1) return { ok: true, session: matches[0]!.session, reason: 'prefix' };
    if (matches.length > 1) return { ok: false, reason: 'ambiguous', candidates: matches };
    // Not on the roster: store-and-forward to that exact id; the relay keeps it.
    return { ok: true, session: hint, reason: 'offline_exact' };
  }
  if (!input.answered) return sticky !== undefined ? { ok: true, session: sticky, reason: 'sticky_unanswered' } : { ok: false, reason: 'no_relay', candidates: [] };
  if (sticky !== undefined && sessions.some((s) => s.session === sticky)) return { ok: true, session: sticky, reason: 'sticky' };
  const live = sessions.filter((s) => s.state === 'live');
  if (live.length === 1) return { ok: true, session: live[0]!.session, reason: 'single_live' };
  const away = sessions.filter((s) => s.state === 'away');
  if (live.length === 0 && away.length === 1) return { ok: true, session: away[0]!.session, reason: 'single_away' };
  if (sessions.length === 0 && sticky !== undefined) return { ok: true, session: sticky, reason: 'sticky_gone' };
  return { ok: false, reason: sessions.length === 0 ? 'no_session' : 'ambiguous', candidates: [...sessions] };
}

/**
 * Whether a session that just started should ask the rosters again before taking this
 * decision: its relays may not have answered yet, and a peer that started with it may not
 * have announced yet. A decision made before any roster answered waits for one; after
 * one, a decision that found none of the peer's sessions (`no_session`, `sticky_gone`)
 * waits for the peer to show. One that found the peer on the roster, that more sessions
 * cannot make unambiguous, or that names an exact session (the target stays the same
 * whoever shows) is final.
 */
export function awaitsRoster(decision: RouteDecision, answered: boolean): boolean {
  if (!answered) return decision.ok || decision.reason === 'no_relay';
  return decision.ok ? decision.reason === 'sticky_gone' : decision.reason === 'no_session';
}
