/**
 * `awaiting_session`: what the sender sees of a message a relay accepted for a session
 * that is on no relay roster (it said goodbye, was silent past the away window, or never
 * announced). Pure, and a view: it is computed when asked, from the outbox record and the
 * rosters as they answer now, and never recorded, because it stops being true the moment
 * the session (or one taking its mail) shows up.
 *
 * It applies to a sealed (version 4) message while the sender's own state is
 * `bus_accepted` and the receiver reported nothing yet; a report (`receiver_stored`, …)
 * says more and replaces it. Without any roster answer nothing can be said, so the state
 * stays `bus_accepted`. A receipt lost in a receiver's crash leaves a message the receiver
 * did store looking like this once that session left the rosters: a receipt is a report,
 * not a guarantee (README "The demo").
 *
 * `since_at` is the later of the acceptance and the last time this session saw the
 * target on a roster: the message has waited for an absent session at least since then.
 * Sightings are remembered while the session runs; after a restart a target not seen
 * since counts from the acceptance.
 */
import { parseRoute } from '../envelope/route.js';
import { shownState, type OutboxRecord } from '../outbox/outbox.js';

export const AWAITING_SESSION = 'awaiting_session';

/** What the rosters say now: whether any answered, the routes on them, and when each route was last seen on one. */
export interface RosterSighting {
  answered: boolean;
  present: ReadonlySet<string>;
  lastSeen: ReadonlyMap<string, number>;
}

export interface Awaiting {
  session: string;
  since_at: number;
  note: string;
}

/** Where the message waits and who takes it, in the words an agent and a person read. */
export function awaitingNote(session: string): string {
  return `the relay holds it for session ${session}, which is on no relay roster (it ended, or has not started yet); a live session of the recipient's identity takes it when one runs`;
}

export function awaitingOf(record: OutboxRecord, roster: RosterSighting): Awaiting | undefined {
  // Only a sealed (version 4) message's receiver sends receipts: for a clear one (a peer
  // marked clear, the benchmark), silence says nothing about where it is.
  if (record.envelope.v !== 4) return undefined;
  if (!roster.answered || shownState(record) !== 'bus_accepted' || roster.present.has(record.route)) return undefined;
  const session = parseRoute(record.route)?.session;
  if (session === undefined) return undefined;
  const accepted = record.states.find((s) => s.state === 'bus_accepted')?.at ?? record.created_at;
  const seen = roster.lastSeen.get(record.route);
  return { session, since_at: seen === undefined ? accepted : Math.max(accepted, seen), note: awaitingNote(session) };
}
