/**
 * The relay's presence roster, in memory: the newest verified announcement per
 * `<key>#<session>`, with the time the relay received it. Announcements and goodbyes are
 * signed (presence/announcement.ts), so the roster can hide or withhold them but not
 * forge them; every reader verifies them again.
 *
 * A goodbye removes the entry when its ts is at least the announcement's, and is
 * remembered for as long as an entry would be, so a replay of an older announcement
 * cannot bring the session back. Entries not heard from for three days expire; past the
 * entry and byte bounds, which grow with the relay's connection capacity (server.ts
 * `rosterLimits`), the stalest are evicted. Readers ask for the entries of the keys they
 * care about (roster-index.ts), never for all of them.
 */
import { formatRoute } from '../envelope/route.js';
import { verifiedAnnouncement, verifiedGoodbye, type Announcement } from '../presence/announcement.js';
import { MAX_SESSIONS_PER_KEY, RosterIndex, type RosterQuery } from './roster-index.js';

export const ROSTER_RETAIN_MS = 3 * 24 * 60 * 60 * 1000;
/** Entries kept per connection the relay may hold (at least ROSTER_MIN_ENTRIES): sessions come and go within the three days. */
export const ROSTER_ENTRIES_PER_CONNECTION = 4;
export const ROSTER_MIN_ENTRIES = 4096;
/**
 * The JSON bytes of the announcements kept, per entry on average (goodbyes count their
 * route and ts). An announcement is at most about 10 KiB (128 readers), typically 500 to
 * 1,000 bytes.
 */
export const ROSTER_BYTES_PER_ENTRY = 2048;

export interface RosterLimits {
  maxEntries: number;
  retainMs: number;
  maxBytes: number;
}

/** The bounds of a relay that may hold `maxConnections` connections (or of `maxEntries` entries, when set). */
export function rosterLimits(maxConnections: number, maxEntries?: number): RosterLimits {
  const entries = maxEntries ?? Math.max(ROSTER_MIN_ENTRIES, ROSTER_ENTRIES_PER_CONNECTION * maxConnections);
  return { maxEntries: entries, retainMs: ROSTER_RETAIN_MS, maxBytes: entries * ROSTER_BYTES_PER_ENTRY };
}

export const DEFAULT_ROSTER_LIMITS: RosterLimits = rosterLimits(1024);

/** A query's entries, freshest first per key and at most MAX_SESSIONS_PER_KEY of each: `heard` gives an entry and when it was received. */
export function queryEntries(
  found: Map<string, Set<string>>,
  heard: (route: string) => { announcement: Announcement; receivedAt: number; text?: string } | undefined,
  now: number,
): RosterEntry[] {
  const entries: RosterEntry[] = [];
  for (const routes of found.values()) {
    const mine = [...routes].flatMap((route) => heard(route) ?? []);
    mine.sort((a, b) => b.receivedAt - a.receivedAt);
    for (const h of mine.slice(0, MAX_SESSIONS_PER_KEY)) {
      entries.push({ announcement: h.announcement, age_ms: Math.max(0, now - h.receivedAt), ...(h.text !== undefined && { text: h.text }) });
    }
  }
  return entries;
}

export interface RosterEntry {
  announcement: Announcement;
  age_ms: number;
  /** The announcement's JSON, kept from when it was stored: a reply copies it instead of serializing again (frame-text.ts). */
  text?: string;
}

export type AnnounceOutcome = 'stored' | 'older' | 'invalid';
export type GoodbyeOutcome = 'removed' | 'noted' | 'invalid';

interface Heard<T> {
  value: T;
  receivedAt: number;
  bytes: number;
  /** The value's JSON, for announcements (what a reply sends). */
  text?: string;
}

/** A map kept in receive order (re-inserted on update), so the stalest entry is first; bounded in entries and bytes. */
class ReceiveOrder<T> {
  private readonly map = new Map<string, Heard<T>>();
  private bytes = 0;

  constructor(
    private readonly limits: RosterLimits,
    /** The bytes a value counts, and its JSON when it is kept for replies. */
    private readonly sizeOf: (key: string, value: T) => { bytes: number; text?: string },
    private readonly removed: (key: string, value: T) => void = () => undefined,
  ) {}

  get(key: string): T | undefined {
    return this.map.get(key)?.value;
  }

  heard(key: string): Heard<T> | undefined {
    return this.map.get(key);
  }

  set(key: string, value: T, now: number): void {
    this.delete(key);
    const { bytes, text } = this.sizeOf(key, value);
    this.map.set(key, { value, receivedAt: now, bytes, ...(text !== undefined && { text }) });
    this.bytes += bytes;
    for (const oldest of this.map.keys()) {
      if (this.map.size <= this.limits.maxEntries && this.bytes <= this.limits.maxBytes) break;
      this.delete(oldest);
    }
  }

  delete(key: string): void {
    const heard = this.map.get(key);
    if (heard === undefined) return;
    this.map.delete(key);
    this.bytes -= heard.bytes;
    this.removed(key, heard.value);
  }

  /** Removes what was heard more than `retainMs` ago; returns how many went. */
  expire(now: number): number {
    let removed = 0;
    for (const [key, heard] of this.map) {
      if (now - heard.receivedAt < this.limits.retainMs) break;
      this.delete(key);
      removed++;
    }
    return removed;
  }

  get size(): number {
    return this.map.size;
  }

  /** What the bound counts: the stored values' bytes. */
  get storedBytes(): number {
    return this.bytes;
  }

  /** Most recently received first. */
  newestFirst(): Heard<T>[] {
    return [...this.map.values()].reverse();
  }
}

export class Roster {
  private readonly entries: ReceiveOrder<Announcement>;
  private readonly index = new RosterIndex();
  /** ts of the last goodbye per route. */
  private readonly goodbyes: ReceiveOrder<number>;
  private changes = 0;
  private readonly retainMs: number;

  constructor(
    private readonly now: () => number = Date.now,
    limits: RosterLimits = DEFAULT_ROSTER_LIMITS,
  ) {
    this.retainMs = limits.retainMs;
    this.entries = new ReceiveOrder(
      limits,
      (_key, announcement) => {
        const text = JSON.stringify(announcement);
        return { bytes: Buffer.byteLength(text, 'utf8'), text };
      },
      (route, announcement) => this.index.remove(announcement, route),
    );
    this.goodbyes = new ReceiveOrder(limits, (key) => ({ bytes: Buffer.byteLength(key, 'utf8') + 8 }));
  }

  /** The JSON bytes of the announcements held. */
  get bytes(): number {
    return this.entries.storedBytes;
  }

  /** Changes whenever the entries do (an announcement stored, an entry removed or expired). */
  get version(): number {
    return this.changes;
  }

  /** Verifies and keeps `data` unless the roster holds a newer word from that session. */
  announce(data: unknown): AnnounceOutcome {
    const announcement = verifiedAnnouncement(data);
    if (announcement === undefined) return 'invalid';
    const now = this.expire();
    const key = formatRoute(announcement);
    const current = this.entries.get(key);
    const goodbye = this.goodbyes.get(key);
    if ((current !== undefined && current.ts > announcement.ts) || (goodbye !== undefined && goodbye >= announcement.ts)) return 'older';
    this.goodbyes.delete(key);
    this.entries.set(key, announcement, now);
    if (this.entries.get(key) !== undefined) this.index.add(announcement, key);
    this.changes++;
    return 'stored';
  }

  goodbye(data: unknown): GoodbyeOutcome {
    const goodbye = verifiedGoodbye(data);
    if (goodbye === undefined) return 'invalid';
    const now = this.expire();
    const key = formatRoute(goodbye);
    const previous = this.goodbyes.get(key);
    if (previous === undefined || goodbye.ts > previous) this.goodbyes.set(key, goodbye.ts, now);
    const current = this.entries.get(key);
    if (current === undefined || goodbye.ts < current.ts) return 'noted';
    this.entries.delete(key);
    this.changes++;
    return 'removed';
  }

  /**
   * An announcement heard before this process started (roster-file.ts), verified again
   * and kept with the time it was first received; call oldest first.
   */
  restore(data: unknown, receivedAt: number): void {
    const announcement = verifiedAnnouncement(data);
    if (announcement === undefined || this.now() - receivedAt >= this.retainMs) return;
    const key = formatRoute(announcement);
    const current = this.entries.get(key);
    if (current !== undefined && current.ts >= announcement.ts) return;
    this.entries.set(key, announcement, receivedAt);
    if (this.entries.get(key) !== undefined) this.index.add(announcement, key);
    this.changes++;
  }

  /** The entries with the times they were received, oldest first: what roster-file.ts keeps. */
  heard(): { announcement: Announcement; received_at: number }[] {
    this.expire();
    return this.entries.newestFirst().reverse().map((e) => ({ announcement: e.value, received_at: e.receivedAt }));
  }

  /** Every live entry, most recently heard first (for tests and the roster file, never a reply). */
  list(): RosterEntry[] {
    const now = this.expire();
    return this.entries.newestFirst().map((e) => ({ announcement: e.value, age_ms: Math.max(0, now - e.receivedAt) }));
  }

  /** The entries `query` finds (roster-index.ts). */
  query(query: RosterQuery): RosterEntry[] {
    const now = this.expire();
    const found = this.index.find(query);
    return queryEntries(found, (route) => {
      const h = this.entries.heard(route);
      return h === undefined ? undefined : { announcement: h.value, receivedAt: h.receivedAt, ...(h.text !== undefined && { text: h.text }) };
    }, now);
  }

  /** Entries held. */
  get size(): number {
    return this.entries.size;
  }

  private expire(): number {
    const now = this.now();
    if (this.entries.expire(now) > 0) this.changes++;
    this.goodbyes.expire(now);
    return now;
  }
}
