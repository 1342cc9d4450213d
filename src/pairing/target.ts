/**
 * Which identity and session a `request_pair {target}` means, as a pure function over
 * the verified roster. A target is a full public key, an exact fingerprint, or a name a
 * session announces (matched against its sealed announcement's name tag, so a stranger's
 * name is found by whoever knows it, never read off the roster); a name several
 * identities use is ambiguous and needs the full key.
 * The request goes to a live session of that identity if there is one, else an away one
 * (the freshest); with none on the roster it is refused rather than sent nowhere.
 *
 * A relay without a store keeps its roster in memory only: after it restarts, an identity
 * is on it again only once one of its processes connects and announces (any session, or
 * `interlink-mcp pair list` on its machine). The refusals say so, since "no match" right
 * after such a restart is not a wrong name (issue 37).
 */
import { InterlinkError } from '../errors.js';
import { fingerprintOf, normalizeFingerprint, parsePublicKey } from '../identity/identity.js';
import type { RosterQuery } from '../wire/frames.js';
import { nameBucket } from '../presence/private.js';

export interface RosterView {
  key: string;
  session: string;
  /** The announced name, where this identity may read it (a peer's, or its own). */
  name?: string;
  /** Whether the session announces this name. */
  named: (name: string) => boolean;
  state: 'live' | 'away';
  age_ms: number;
}

export interface ResolvedTarget {
  key: string;
  session: string;
  /** The name its chosen session announces (unverified), where this identity may read it. */
  name?: string;
  /** How the person named it: by a roster name (which a relay could fake), or by key or fingerprint. */
  by: 'name' | 'key' | 'fingerprint';
}

/** Why a known identity can be missing from the rosters, and what its person does about it. */
const NOT_ANNOUNCING =
  'An identity is on a roster only while a session of it announces there, and a relay that restarted without a store (--db) has forgotten every announcement until each identity connects again: ' +
  'ask the other person to start any session, or to run `interlink-mcp pair list` on their machine (it announces their identity and leaves it on the roster).';

function isPublicKey(text: string): boolean {
  try {
    parsePublicKey(text);
    return true;
  } catch {
    return false;
  }
}

/** What the relays are asked for a target: its key, its fingerprint, or the sessions that announce it as a name. */
export function targetQuery(target: string): RosterQuery {
  if (isPublicKey(target)) return { keys: [target] };
  const fingerprint = normalizeFingerprint(target);
  if (fingerprint !== undefined) return { fingerprints: [fingerprint] };
  return { name_bucket: nameBucket(target) };
}

export function resolveTarget(target: string, roster: readonly RosterView[], me: string, session?: string): ResolvedTarget {
  let keys: string[];
  let by: ResolvedTarget['by'] = 'name';
  if (isPublicKey(target)) {
    keys = [target];
    by = 'key';
  } else if (normalizeFingerprint(target) !== undefined) {
    const fingerprint = normalizeFingerprint(target);
    keys = [...new Set(roster.filter((r) => fingerprintOf(parsePublicKey(r.key)) === fingerprint).map((r) => r.key))];
    by = 'fingerprint';
  } else {
    keys = [...new Set(roster.filter((r) => r.named(target)).map((r) => r.key))];
    if (keys.length > 1) {
      const list = keys.map((k) => fingerprintOf(parsePublicKey(k))).join(', ');
      throw new InterlinkError('ambiguous_target', `several identities announce the name ${JSON.stringify(target)} (fingerprints ${list}); pass the full public key of the one you mean`);
    }
  }
  const key = keys[0];
  if (key === undefined) {
    throw new InterlinkError(
      'unknown_target',
      `no identity on the relay rosters matches ${JSON.stringify(target)} now. ` +
        `${NOT_ANNOUNCING} Else check the name they announce (INTERLINK_NAME), or use their full key from \`interlink-mcp whoami\``,
      undefined,
      { hint: { tool: 'then call request_pair again', cli: 'then run `interlink-mcp pair request` again' } },
    );
  }
  if (key === me) throw new InterlinkError('unknown_target', 'that is this identity; its sessions already trust each other');
  const sessions = roster.filter((r) => r.key === key && (session === undefined || r.session === session)).sort((a, b) => a.age_ms - b.age_ms);
  const chosen = sessions.find((s) => s.state === 'live') ?? sessions.find((s) => s.state === 'away');
  if (chosen === undefined) {
    throw new InterlinkError(
      'no_route',
      session === undefined
        ? `no session of that identity is on any relay roster now. ${NOT_ANNOUNCING} Then ask again`
        : `session ${session} of that identity is not on any relay roster now: it is not running, or has not announced itself since a relay restarted`,
    );
  }
  return { key, session: chosen.session, ...(chosen.name !== undefined && { name: chosen.name }), by };
}
