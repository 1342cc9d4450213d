/**
 * Whether a session's peers can find it: the one place the capacity run asks a relay for
 * sessions by key. Today the protocol has only `roster`, the relay's whole roster, so
 * each check costs the relay a reply the size of its roster (up to 1 MiB) and the asker
 * the parsing of it: N sessions checking cost N × roster, which grows with N² until the
 * roster's bound (4,096 entries, 1 MiB) stops it — and then the sessions past the bound
 * are not findable at all. When relays answer per-key queries, this function alone
 * changes.
 */
import { z } from 'zod';
import { verifiedAnnouncement } from '../../src/presence/announcement.js';
import type { RosterEntry } from '../../src/wire/frames.js';

/** What findPeers needs of a relay client (link/client.ts RelayClient has it). */
export interface RosterSource {
  /** The relay's roster entries, or undefined when it did not answer (refused, timed out, not connected). */
  rosterAnswer(): Promise<RosterEntry[] | undefined>;
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
 * Asks the relay which of `keys` it lists. Entries are filtered by key before any
 * signature is checked, so a check costs one verification per match, not one per entry;
 * a match whose signature does not verify does not count. Undefined when the relay did
 * not answer.
 */
export async function findPeers(client: RosterSource, keys: readonly string[], measure = false): Promise<Findings | undefined> {
  const entries = await client.rosterAnswer();
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
