/**
 * Roster queries (docs/PROTOCOL.md "Presence"): a reader asks for the entries of the keys
 * it cares about — its own identity's, its peers', an identity it pairs with by key or
 * fingerprint — or of one name bucket (pairing by name: 12 bits of the name's hash, whose
 * few sessions the asker checks against their name tags), and gets those alone, never the
 * whole roster. Every roster (roster.ts in memory, postgres/roster.ts) keeps this index
 * beside its entries, so a query costs what it finds, not what the roster holds.
 */
import { fingerprintOf } from '../identity/identity.js';
import type { Announcement } from '../presence/announcement.js';
import type { RosterQuery } from '../wire/frames.js';

/** The freshest sessions of one key a reply holds; a key with more keeps its freshest. */
export const MAX_SESSIONS_PER_KEY = 32;

export type { RosterQuery };

/** Whether `query` names anything: a revision 3 request (none) asked for the whole roster. */
export function namesAnything(query: RosterQuery): boolean {
  return query.keys !== undefined || query.fingerprints !== undefined || query.name_bucket !== undefined;
}

/** The entries' routes by key, by fingerprint and by name bucket (version 3 announcements). */
export class RosterIndex {
  /** key → the routes (`<key>#<session>`) it has entries for */
  private readonly byKey = new Map<string, Set<string>>();
  private readonly byFingerprint = new Map<string, Set<string>>();
  /** name bucket → key → its routes announcing that bucket */
  private readonly byBucket = new Map<number, Map<string, Set<string>>>();

  add(announcement: Announcement, route: string): void {
    const key = announcement.key;
    let routes = this.byKey.get(key);
    if (routes === undefined) {
      routes = new Set();
      this.byKey.set(key, routes);
      const fingerprint = fingerprintOfText(key);
      if (fingerprint !== undefined) this.byFingerprint.set(fingerprint, (this.byFingerprint.get(fingerprint) ?? new Set()).add(key));
    }
    routes.add(route);
    const bucket = bucketOf(announcement);
    if (bucket === undefined) return;
    const keys = this.byBucket.get(bucket) ?? new Map<string, Set<string>>();
    keys.set(key, (keys.get(key) ?? new Set()).add(route));
    this.byBucket.set(bucket, keys);
  }

  remove(announcement: Announcement, route: string): void {
    const key = announcement.key;
    const bucket = bucketOf(announcement);
    const keys = bucket === undefined ? undefined : this.byBucket.get(bucket);
    const inBucket = keys?.get(key);
    if (inBucket?.delete(route) === true && inBucket.size === 0) {
      keys!.delete(key);
      if (keys!.size === 0) this.byBucket.delete(bucket!);
    }
    const routes = this.byKey.get(key);
    if (routes === undefined || !routes.delete(route) || routes.size > 0) return;
    this.byKey.delete(key);
    const fingerprint = fingerprintOfText(key);
    const sameFingerprint = fingerprint === undefined ? undefined : this.byFingerprint.get(fingerprint);
    sameFingerprint?.delete(key);
    if (sameFingerprint?.size === 0) this.byFingerprint.delete(fingerprint!);
  }

  clear(): void {
    this.byKey.clear();
    this.byFingerprint.clear();
    this.byBucket.clear();
  }

  /** The routes `query` finds, by key: every session of a named key or fingerprint, and the sessions that announce the name bucket. */
  find(query: RosterQuery): Map<string, Set<string>> {
    const found = new Map<string, Set<string>>();
    const take = (key: string) => {
      const routes = this.byKey.get(key);
      if (routes !== undefined) found.set(key, routes);
    };
    for (const key of query.keys ?? []) take(key);
    for (const fingerprint of query.fingerprints ?? []) for (const key of this.byFingerprint.get(fingerprint) ?? []) take(key);
    if (query.name_bucket !== undefined) {
      for (const [key, routes] of this.byBucket.get(query.name_bucket) ?? []) if (!found.has(key)) found.set(key, routes);
    }
    return found;
  }
}

function fingerprintOfText(key: string): string | undefined {
  const bytes = Buffer.from(key, 'base64url');
  return bytes.length === 32 ? fingerprintOf(bytes) : undefined;
}

function bucketOf(announcement: Announcement): number | undefined {
  return 'v' in announcement && announcement.v === 3 ? announcement.name_bucket : undefined;
}
