/**
 * Whether a session's peers can find it: the one place the capacity run asks a relay for
 * sessions by key, as a session does — a roster query naming its peer's key (relay
 * protocol revision 4), answered with that key's entries alone, so a check costs what it
 * finds, not what the roster holds.
 */
import { z } from 'zod';
import { verifiedAnnouncement } from '../../src/presence/announcement.js';
import { MAX_QUERY_KEYS, type RosterEntry, type RosterQuery } from '../../src/wire/frames.js';

/** What findPeers needs of a relay client (link/client.ts RelayClient has it). */
export interface RosterSource {
  /** What a roster query finds, or undefined when the relay did not answer (refused, timed out, not connected). */
  rosterAnswer(query: RosterQuery): Promise<RosterEntry[] | undefined>;
}

export interface Findings {
  /** The keys asked for that have a verified announcement on the relay's roster. */
  found: Set<string>;
  /** How many entries the relay sent to answer. */
  entries: number;
  /** The JSON size of those entries, when `measure` asked for it (costly on a full roster). */
  bytes?: number;
}

const keyed = z.object({ key: z.string() });

/**
 * Asks the relay which of `keys` (at most MAX_QUERY_KEYS) it lists. Entries are filtered
 * by key before any signature is checked (a relay may answer more than asked), so a check
 * costs one verification per match; a match whose signature does not verify does not
 * count. Undefined when the relay did not answer.
 */
export async function findPeers(client: RosterSource, keys: readonly string[], measure = false): Promise<Findings | undefined> {
  const entries = await client.rosterAnswer({ keys: keys.slice(0, MAX_QUERY_KEYS) });
  if (entries === undefined) return undefined;
  const wanted = new Set(keys);
  const found = new Set<string>();
  for (const entry of entries) {
    const claimed = keyed.safeParse(entry.announcement);
    if (!claimed.success || !wanted.has(claimed.data.key)) continue;
    const announcement = verifiedAnnouncement(entry.announcement);
    if (announcement !== undefined && wanted.has(announcement.key)) found.add(announcement.key);
  }
  return { found, entries: entries.length, ...(measure && { bytes: Buffer.byteLength(JSON.stringify(entries), 'utf8') }) };
}
