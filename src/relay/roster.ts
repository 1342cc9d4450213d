/**
 * The relay's presence roster, in memory: the newest verified announcement per
 * `<key>#<session>`, with the time the relay received it. Announcements and goodbyes are
 * signed (presence/announcement.ts), so the roster can hide or withhold them but not
 * forge them; every reader verifies them again.
 *
 * A goodbye removes the entry when its ts is at least the announcement's, and is
 * remembered for as long as an entry would be, so a replay of an older announcement
 * cannot bring the session back. Entries not heard from for three days expire; past
 * 4,096 the stalest is evicted.
 */
import { formatRoute } from '../envelope/route.js';
import { verifiedAnnouncement, verifiedGoodbye, type Announcement } from '../presence/announcement.js';

export const ROSTER_RETAIN_MS = 3 * 24 * 60 * 60 * 1000;
export const ROSTER_MAX_ENTRIES = 4096;

export interface RosterLimits {
  maxEntries: number;
  retainMs: number;
}

export interface RosterEntry {
  announcement: Announcement;
  age_ms: number;
}

export type AnnounceOutcome = 'stored' | 'older' | 'invalid';
export type GoodbyeOutcome = 'removed' | 'noted' | 'invalid';

interface Heard<T> {
  value: T;
  receivedAt: number;
}

/** A map kept in receive order (re-inserted on update), so the stalest entry is first. */
class ReceiveOrder<T> {
  private readonly map = new Map<string, Heard<T>>();

  constructor(private readonly limits: RosterLimits) {}

  get(key: string): T | undefined {
    return this.map.get(key)?.value;
  }

  set(key: string, value: T, now: number): void {
    this.map.delete(key);
    this.map.set(key, { value, receivedAt: now });
    for (const oldest of this.map.keys()) {
      if (this.map.size <= this.limits.maxEntries) break;
      this.map.delete(oldest);
    }
  }

  delete(key: string): void {
    this.map.delete(key);
  }

  expire(now: number): void {
    for (const [key, heard] of this.map) {
      if (now - heard.receivedAt < this.limits.retainMs) break;
      this.map.delete(key);
    }
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

  constructor(
    private readonly now: () => number = Date.now,
    limits: RosterLimits = { maxEntries: ROSTER_MAX_ENTRIES, retainMs: ROSTER_RETAIN_MS },
  ) {
    this.entries = new ReceiveOrder(limits);
    this.goodbyes = new ReceiveOrder(limits);
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
    return 'removed';
  }

  /** Every live entry, most recently heard first. */
  list(): RosterEntry[] {
    const now = this.expire();
    return this.entries.newestFirst().map((e) => ({ announcement: e.value, age_ms: Math.max(0, now - e.receivedAt) }));
  }

  private expire(): number {
    const now = this.now();
    this.entries.expire(now);
    this.goodbyes.expire(now);
    return now;
  }
}
