/**
 * Roster queries from the session's side (docs/PROTOCOL.md "Presence"): a session asks
 * each relay for the entries of the keys it cares about, never for the whole roster. A
 * relay older than revision 4 answers only the whole roster; what a query names is picked
 * from that answer here, so callers see the same either way (a name bucket is not picked:
 * the caller matches a name against each verified entry's tag, as it does for a bucket's).
 */
import { fingerprintOf } from '../identity/identity.js';
import type { RosterEntry, RosterQuery } from '../wire/frames.js';

/** The key an entry claims (unverified: the caller verifies every announcement). */
function claimedKey(entry: RosterEntry): string | undefined {
  const a = entry.announcement;
  return typeof a === 'object' && a !== null && 'key' in a && typeof a.key === 'string' ? a.key : undefined;
}

/**
 * Whether `query` asked for a session of `key`: the key named, or its fingerprint; any key
 * for a name bucket (the caller matches the name against the verified name tag).
 */
export function askedFor(query: RosterQuery): (key: string) => boolean {
  const keys = new Set(query.keys ?? []);
  const fingerprints = new Set(query.fingerprints ?? []);
  return (key) => {
    if (query.name_bucket !== undefined || keys.has(key)) return true;
    const bytes = Buffer.from(key, 'base64url');
    return fingerprints.size > 0 && bytes.length === 32 && fingerprints.has(fingerprintOf(bytes));
  };
}

/** The entries of a whole-roster answer that `query` names (all of them for a name bucket: the caller matches the name). */
export function pickEntries(entries: readonly RosterEntry[], query: RosterQuery): RosterEntry[] {
  const asked = askedFor(query);
  return entries.filter((entry) => {
    const key = claimedKey(entry);
    return key !== undefined && asked(key);
  });
}
