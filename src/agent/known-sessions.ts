/**
 * The sessions of each peer this session knows from its own stores, which survive a
 * restart: the mailbox (each admitted message's signed reply session) and the outbox
 * (each message's target session). At start the newest of them per peer seeds the sticky
 * table, so a restarted session that meets no relay still routes to a peer that wrote to
 * it, or that it wrote to, before (routing.ts `sticky_unanswered`).
 */
import { replyToSession } from '../envelope/envelope.js';
import { formatRoute, parseRoute } from '../envelope/route.js';
import type { Mailbox } from '../mailbox/mailbox.js';
import type { Outbox } from '../outbox/outbox.js';

/** One sighting of a peer's session in the stores, at this machine's clock. */
export interface Sighting {
  key: string;
  session: string;
  at: number;
}

/** The newest session per peer key; the excluded route (this session itself) is never one. */
export function newestSessions(sightings: Iterable<Sighting>, excluded: string): Map<string, string> {
  const newest = new Map<string, Sighting>();
  for (const s of sightings) {
    if (formatRoute(s) === excluded) continue;
    const seen = newest.get(s.key);
    if (seen === undefined || s.at >= seen.at) newest.set(s.key, s);
  }
  return new Map([...newest].map(([key, s]) => [key, s.session]));
}

/** Every peer session the mailbox and outbox name: where each admitted message said to reply, and where each sent one went. */
export async function storedSightings(mailbox: Mailbox, outbox: Outbox): Promise<Sighting[]> {
  const inbound = (await mailbox.all()).flatMap((r) => {
    const session = replyToSession(r.envelope);
    return session === undefined ? [] : [{ key: r.envelope.from, session, at: r.received_at }];
  });
  const outbound = (await outbox.all()).flatMap((r) => {
    const route = parseRoute(r.route);
    return route === undefined ? [] : [{ ...route, at: r.created_at }];
  });
  return [...inbound, ...outbound];
}
