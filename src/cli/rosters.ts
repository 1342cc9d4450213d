/**
 * The relays' rosters as `status` reads them: one short connection per relay, which reads
 * no route and records nothing (a relay key not yet recorded is not trusted here, since a
 * read-only command does not record one), and the verified sessions on them. From these
 * `status` counts the messages waiting on a relay for a session that is on no roster
 * (agent/awaiting.ts). A terminal command has seen no roster before, so it knows no last
 * sighting: each such message counts from its acceptance.
 */
import type { RosterSighting } from '../agent/awaiting.js';
import { presenceState } from '../agent/routing.js';
import { relayEndpoint } from '../config/relay-url.js';
import { formatRoute } from '../envelope/route.js';
import type { SigningKey } from '../identity/ed25519.js';
import { verifiedAnnouncement } from '../presence/announcement.js';
import { RelayClient } from '../link/client.js';
import { decideRelayKey, type RelayRecord, type RelayTrust } from '../link/known-relays.js';
import type { ClientTls } from '../wire/tls.js';
import { MAX_QUERY_KEYS } from '../wire/frames.js';

/** Trusts a pinned key or the one already recorded for the URL; never records. */
function recordedOnly(urls: readonly string[], records: Readonly<Record<string, RelayRecord>>): RelayTrust {
  const listed = urls.map(relayEndpoint);
  return {
    admit: (endpoint, key) => {
      const verdict = decideRelayKey(endpoint, key, listed, records);
      if (verdict.trusted && verdict.firstUse && endpoint.pin === undefined) return Promise.resolve({ trusted: false, refusal: { reason: 'unchecked', url: endpoint.url, error: 'no key recorded yet' } });
      return Promise.resolve(verdict);
    },
  };
}

/**
 * The verified sessions on the rosters of the relays in `ask` that answer within
 * `timeoutMs`. Only relays with a pinned or recorded key are asked: one never met has no
 * key to hold it to, and a read-only command does not record one.
 */
export async function readRosters(options: {
  urls: readonly string[];
  ask: readonly string[];
  key: SigningKey;
  /** Whose sessions to look for (this identity's and its peers'): a relay answers only those. */
  keys: readonly string[];
  records: Readonly<Record<string, RelayRecord>>;
  tls?: ClientTls;
  timeoutMs: number;
}): Promise<RosterSighting> {
  const trust = recordedOnly(options.urls, options.records);
  const known = options.ask.filter((url) => {
    const endpoint = relayEndpoint(url);
    return endpoint.pin !== undefined || options.records[endpoint.url] !== undefined;
  });
  const answers = await Promise.all(
    known.map(async (url) => {
      const client = new RelayClient({ url, key: options.key, routes: [], readOnConnect: false, logOutages: false, trust, requestTimeoutMs: options.timeoutMs, ...(options.tls !== undefined && { tls: options.tls }) });
      try {
        client.start();
        return (await client.ready(options.timeoutMs, { failFast: true })) ? await client.rosterAnswer({ keys: options.keys.slice(0, MAX_QUERY_KEYS) }) : undefined;
      } finally {
        client.close();
      }
    }),
  );
  const present = new Set<string>();
  for (const entry of answers.flatMap((a) => a ?? [])) {
    const a = verifiedAnnouncement(entry.announcement);
    if (a !== undefined && presenceState(entry.age_ms) !== undefined) present.add(formatRoute(a));
  }
  return { answered: answers.some((a) => a !== undefined), present, lastSeen: new Map() };
}
