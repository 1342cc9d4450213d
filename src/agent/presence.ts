/**
 * This session's presence: a signed announcement to every relay every 30 s (and at once
 * after each connect or summary change), a signed goodbye on clean exit, and the merged,
 * verified roster of everyone the relays know.
 */
import { formatRoute } from '../envelope/route.js';
import type { SigningKey } from '../identity/ed25519.js';
import { log } from '../log.js';
import { signAnnouncement, signGoodbye, verifiedAnnouncement, type Announcement } from '../presence/announcement.js';
import type { RelayClient } from '../relay/client.js';
import { presenceState, type PresenceState } from './routing.js';
import { messageOf } from '../errors.js';

export const ANNOUNCE_INTERVAL_MS = 30_000;
const ROSTER_CACHE_MS = 2_000;

export interface PresenceInfo {
  name: string;
  cwd: string;
  gitRoot: string;
  summary: string;
}

export interface RosterSession {
  key: string;
  session: string;
  name: string;
  cwd: string;
  git_root: string;
  summary: string;
  age_ms: number;
  state: PresenceState;
}

export class Presence {
  private timer: NodeJS.Timeout | undefined;
  private cached: { at: number; entries: RosterSession[] } | undefined;

  constructor(
    private readonly key: SigningKey,
    private readonly session: string,
    private readonly relays: readonly RelayClient[],
    private info: PresenceInfo,
    private readonly intervalMs = ANNOUNCE_INTERVAL_MS,
  ) {}

  start(): void {
    for (const relay of this.relays) relay.on('connected', () => relay.announce(this.announcement()));
    this.announce();
    this.timer = setInterval(() => this.announce(), this.intervalMs);
    this.timer.unref();
  }

  setSummary(summary: string): void {
    this.info = { ...this.info, summary };
    this.announce();
  }

  /** Verified sessions from every reachable relay; the freshest sighting of each wins. */
  async roster(options: { fresh?: boolean } = {}): Promise<RosterSession[]> {
    if (!options.fresh && this.cached && Date.now() - this.cached.at < ROSTER_CACHE_MS) return this.cached.entries;
    const answers = await Promise.all(this.relays.filter((r) => r.connected).map((r) => r.roster()));
    const best = new Map<string, RosterSession>();
    for (const entry of answers.flat()) {
      const a = verifiedAnnouncement(entry.announcement);
      if (a === undefined) continue;
      const state = presenceState(entry.age_ms);
      if (state === undefined) continue;
      const id = formatRoute(a);
      const seen = best.get(id);
      if (seen === undefined || entry.age_ms < seen.age_ms) best.set(id, view(a, entry.age_ms, state));
    }
    const entries = [...best.values()].sort((x, y) => x.age_ms - y.age_ms);
    this.cached = { at: Date.now(), entries };
    return entries;
  }

  /** Stops announcing without a goodbye: the session stays on the rosters as away. */
  stop(): void {
    clearInterval(this.timer);
  }

  async goodbye(): Promise<void> {
    clearInterval(this.timer);
    const goodbye = signGoodbye(this.key, this.session);
    await Promise.all(this.relays.map((r) => r.goodbye(goodbye)));
  }

  private announcement(): Announcement {
    return signAnnouncement(this.key, {
      name: this.info.name,
      session: this.session,
      cwd: this.info.cwd,
      git_root: this.info.gitRoot,
      summary: this.info.summary,
    });
  }

  private announce(): void {
    try {
      const announcement = this.announcement();
      for (const relay of this.relays) relay.announce(announcement);
      this.cached = undefined;
    } catch (err) {
      log.warn('announce_failed', { error: messageOf(err) });
    }
  }
}

function view(a: Announcement, ageMs: number, state: PresenceState): RosterSession {
  return { key: a.key, session: a.session, name: a.name, cwd: a.cwd, git_root: a.git_root, summary: a.summary, age_ms: ageMs, state };
}
