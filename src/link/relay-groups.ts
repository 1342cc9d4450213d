/**
 * One relay at several addresses. Relay processes that share one database (docs/SCALING.md)
 * present one key; a person who lists them together pins that key on each URL
 * (`ws://r1#key=K,ws://r2#key=K`), and those URLs are then one relay to the session: a
 * message is offered to one of them, not to each (they would store it twice), and one of
 * them reads the session's route (each would deliver every message). The others stay
 * connected, so when the address in use drops, the next one carries on at once.
 *
 * Which address a session uses is a pure choice (`preferredOrder`): each address of a group
 * is scored by a hash of the session's route and the address, highest first (rendezvous
 * hashing). So the sessions of many agents spread over the relays without a balancer, one
 * session reads and sends through one relay while it answers, the order does not depend
 * on how a person happened to list the URLs (a sender and its recipient agree on the
 * recipient's address whatever their INTERLINK_URL orders), and an address added to or
 * removed from a group moves only the sessions that come to prefer it or preferred it.
 */
import { createHash } from 'node:crypto';
import { relayEndpoint, type RelayEndpoint } from '../config/relay-url.js';

/** What a group needs of a relay connection (RelayClient). */
export interface GroupMember {
  /** The URL, without its fragment (RelayClient.url): what orders a group's members. */
  readonly url: string;
  /** The relay this URL reaches: its pinned key, else the URL (RelayClient.relay). */
  readonly relay: string;
  readonly connected: boolean;
  readonly reads: boolean;
  read(): void;
  on(event: 'connected' | 'disconnected', listener: () => void): unknown;
}

/** Which relay a URL reaches: the key it pins, else the URL itself (pure). */
export function relayOf(endpoint: RelayEndpoint): string {
  return endpoint.pin ?? endpoint.url;
}

/** Whether each configured URL is the only address of its relay (pure): such a URL reads on every connection. */
export function soleAddresses(urls: readonly string[]): boolean[] {
  const relays = urls.map((url) => relayOf(relayEndpoint(url)));
  return relays.map((relay) => relays.filter((r) => r === relay).length === 1);
}

/** The members grouped by the relay they reach, groups in the order of their first member (pure). */
export function groupByRelay<T extends { relay: string }>(members: readonly T[]): T[][] {
  const groups = new Map<string, T[]>();
  for (const member of members) {
    const group = groups.get(member.relay);
    if (group === undefined) groups.set(member.relay, [member]);
    else group.push(member);
  }
  return [...groups.values()];
}

/**
 * One spelling of an address, for scoring (pure): the scheme and host in lower case, no
 * default port, no lone "/" path — so `WS://Relay.example:80/` and `ws://relay.example`
 * score alike, and a sender and its recipient who write one address differently still
 * agree on it. Two names of one host (a name and its IP) stay two spellings: telling
 * them apart needs the resolver. Text that is not a URL is taken as it is.
 */
export function canonicalAddress(address: string): string {
  let parsed: URL;
  try {
    parsed = new URL(address);
  } catch {
    return address;
  }
  const path = parsed.pathname === '/' ? '' : parsed.pathname;
  return `${parsed.protocol}//${parsed.host}${path}${parsed.search}`;
}

/** An address's score for a session (pure): a hash of both, as a number below 2^48; spellings of one address score alike. */
export function preference(seed: string, address: string): number {
  return createHash('sha256').update(seed).update('\n').update(canonicalAddress(address)).digest().readUIntBE(0, 6);
}

/**
 * The group's members in the order a session seeded by `seed` prefers them (pure): by
 * `preference(seed, address)`, highest first, ties in the order given. The same set of
 * addresses gives the same order however it is listed.
 */
export function preferredOrder<T extends { url: string }>(members: readonly T[], seed: string): T[] {
  if (members.length < 2) return [...members];
  return members
    .map((member, index) => ({ member, index, score: preference(seed, member.url) }))
    .sort((a, b) => b.score - a.score || a.index - b.index)
    .map((scored) => scored.member);
}

/**
 * The member that reads, given which are connected and which read now (pure): a connected
 * member that reads already keeps reading; otherwise the first connected one in order
 * starts; undefined when none needs to start. While `awaitFirst` (a session's start, until
 * its preferred address connected, failed or had `PREFERRED_GRACE_MS`), only the first in
 * order may start: the address that happened to answer first would otherwise read for
 * every session, and the sessions would not spread over the relay's addresses.
 */
export function electReader<T extends { connected: boolean; reads: boolean }>(ordered: readonly T[], awaitFirst = false): T | undefined {
  if (ordered.some((m) => m.connected && m.reads)) return undefined;
  if (awaitFirst) return ordered[0]?.connected === true ? ordered[0] : undefined;
  return ordered.find((m) => m.connected);
}

/** How long a session's start waits for its preferred address of a relay before reading through another. */
export const PREFERRED_GRACE_MS = 2_000;

/**
 * The member a message to the route `to` is offered to now (pure): the first connected one
 * in the order the recipient's session prefers (`preferredOrder` seeded by its route),
 * which is the address it reads through when it lists the same addresses (in any order)
 * and they are up. The relay process that reads the route then commits the message and
 * hands it to its reader itself, and no other relay process has to be told
 * (postgres/store.ts). Any member would do: they share one store.
 */
export function sendingMember<T extends { connected: boolean; url: string }>(group: readonly T[], to: string): T | undefined {
  return preferredOrder(group, to).find((m) => m.connected);
}

/** A session's relays, grouped; keeps one reader per group as connections come and go. */
export class RelayGroups<T extends GroupMember> {
  /** Each group's members in this session's preferred order. */
  readonly groups: readonly (readonly T[])[];

  constructor(members: readonly T[], seed: string) {
    this.groups = groupByRelay(members).map((group) => preferredOrder(group, seed));
  }

  /**
   * Elects a reader in each group of several addresses whenever one connects or drops (a
   * group of one reads by itself). At the start the preferred address gets its chance
   * first: until it connects, fails, or `graceMs` pass, no other address reads. Once a
   * reader is elected it keeps reading until it drops; a preferred address that comes back
   * later does not take over (no flapping between addresses).
   */
  start(graceMs = PREFERRED_GRACE_MS): void {
    for (const group of this.groups) {
      if (group.length < 2) continue;
      let awaitFirst = true;
      const elect = () => electReader(group, awaitFirst)?.read();
      const stopWaiting = () => {
        if (!awaitFirst) return;
        awaitFirst = false;
        elect();
      };
      // Unref'd: a session that stops meanwhile is not kept alive, and a late election on a closed client reads nothing.
      setTimeout(stopWaiting, graceMs).unref();
      group[0]!.on('disconnected', stopWaiting);
      for (const member of group) {
        member.on('connected', elect);
        member.on('disconnected', elect);
      }
    }
  }
}
