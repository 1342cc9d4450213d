/**
 * The relay's presence roster, in memory: the newest verified announcement per
 * `<key>#<session>`, with the time the relay received it. Announcements and goodbyes are
 * signed (presence/announcement.ts), so the roster can hide or withhold them but not
 * forge them; every reader verifies them again.
 *
 * A goodbye removes the entry when its ts is at least the announcement's, and is
 * remembered for as long as an entry would be, so a replay of an older announcement
 * cannot bring the session back. Entries not heard from for three days expire; past
 * 4,096 entries, or past 1 MiB of stored announcements, the stalest are evicted, so the
 * whole roster always fits in one roster frame.
 */
import { formatRoute } from '../envelope/route.js';
import { verifiedAnnouncement, verifiedGoodbye, type Announcement } from '../presence/announcement.js';

export const ROSTER_RETAIN_MS = 3 * 24 * 60 * 60 * 1000;
export const ROSTER_MAX_ENTRIES = 4096;
/**
 * The JSON bytes of the announcements kept (goodbyes count their route and ts). An
 * announcement is at most about 4.3 KiB, typically 300 to 500 bytes: 1 MiB holds a few
 * thousand sessions, and with each entry's `age_ms` stays well under the 2 MiB frame.
 */
export const ROSTER_MAX_BYTES = 1024 * 1024;

export interface RosterLimits {
  maxEntries: number;
  retainMs: number;
  maxBytes: number;
}

export const DEFAULT_ROSTER_LIMITS: RosterLimits = { maxEntries: ROSTER_MAX_ENTRIES, retainMs: ROSTER_RETAIN_MS, maxBytes: ROSTER_MAX_BYTES };

export interface RosterEntry {
  announcement: Announcement;
  age_ms: number;
}

export type AnnounceOutcome = 'stored' | 'older' | 'invalid';
export type GoodbyeOutcome = 'removed' | 'noted' | 'invalid';

interface Heard<T> {
  value: T;
  receivedAt: number;
  bytes: number;
}

/** A map kept in receive order (re-inserted on update), so the stalest entry is first; bounded in entries and bytes. */
class ReceiveOrder<T> {
  private readonly map = new Map<string, Heard<T>>();
  private bytes = 0;

  constructor(
    private readonly limits: RosterLimits,
    private readonly sizeOf: (key: string, value: T) => number,
  ) {}

  get(key: string): T | undefined {
    return this.map.get(key)?.value;
  }

  set(key: string, value: T, now: number): void {
    this.delete(key);
    const bytes = this.sizeOf(key, value);
    this.map.set(key, { value, receivedAt: now, bytes });
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
  /** ts of the last goodbye per route. */
  private readonly goodbyes: ReceiveOrder<number>;
  private changes = 0;
  private readonly retainMs: number;

  constructor(
    private readonly now: () => number = Date.now,
    limits: RosterLimits = DEFAULT_ROSTER_LIMITS,
  ) {
    this.retainMs = limits.retainMs;
    this.entries = new ReceiveOrder(limits, (_key, announcement) => Buffer.byteLength(JSON.stringify(announcement), 'utf8'));
    this.goodbyes = new ReceiveOrder(limits, (key) => Buffer.byteLength(key, 'utf8') + 8);
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
    this.changes++;
  }

  /** The entries with the times they were received, oldest first: what roster-file.ts keeps. */
  heard(): { announcement: Announcement; received_at: number }[] {
    this.expire();
    return this.entries.newestFirst().reverse().map((e) => ({ announcement: e.value, received_at: e.receivedAt }));
  }

  /** Every live entry, most recently heard first. */
  list(): RosterEntry[] {
    const now = this.expire();
    return this.entries.newestFirst().map((e) => ({ announcement: e.value, age_ms: Math.max(0, now - e.receivedAt) }));
  }

  private expire(): number {
    const now = this.now();
    if (this.entries.expire(now) > 0) this.changes++;
    this.goodbyes.expire(now);
    return now;
  }
}
