/**
 * This session's presence: a signed announcement to every relay every 30 s (and at once
 * after each connect or summary change), a signed goodbye on clean exit, and the merged,
 * verified roster of the sessions it cares about: its own identity's and its peers' (and,
 * for pairing, whoever a key, fingerprint or name finds). A relay answers those alone
 * (relay/roster-index.ts); nobody is handed the whole roster.
 *
 * Announcements are version 2 (presence/private.ts): the name, cwd, git root and summary
 * are sealed to this identity's peers and its own sessions, so the roster shows a stranger
 * only a key and a session. What a peer announces is opened here; an older peer's clear
 * (version 1) announcement is shown in full only for a peer or this identity.
 */
import { formatRoute } from '../envelope/route.js';
import type { SigningKey } from '../identity/ed25519.js';
import { log } from '../log.js';
import { signAnnouncementV2, signAnnouncementV3, signGoodbye, verifiedAnnouncement, type Announcement, type AnnouncementV2, type AnnouncementV3 } from '../presence/announcement.js';
import { nameBucket, nameTag, openDetails, sealDetails, type Details } from '../presence/private.js';
import type { RelayClient } from '../link/client.js';
import type { RosterSighting } from './awaiting.js';
import { presenceState, type PresenceState } from './routing.js';
import { messageOf } from '../errors.js';
import { askedFor } from '../link/roster-query.js';
import { MAX_QUERY_KEYS, type RosterEntry, type RosterQuery } from '../wire/frames.js';

export const ANNOUNCE_INTERVAL_MS = 30_000;
const ROSTER_CACHE_MS = 2_000;

export interface PresenceInfo {
  name: string;
  cwd: string;
  gitRoot: string;
  summary: string;
}

/** A session on the roster; `name`, `cwd`, `git_root` and `summary` only where this identity may read them (a peer's, or its own). */
export interface RosterSession {
  key: string;
  session: string;
  name?: string;
  cwd?: string;
  git_root?: string;
  summary?: string;
  /** Tests a name against the announced one without reading it (pairing by name). */
  named: (name: string) => boolean;
  age_ms: number;
  state: PresenceState;
}

/** The merged roster, and how many relays answered for it. */
export interface RosterView {
  entries: RosterSession[];
  answered: number;
}

const OPENED_LIMIT = 4096;
const SIGHTINGS_LIMIT = 4096;

/** One relay asked for `query`, its keys split into queries of MAX_QUERY_KEYS; undefined unless every part was answered. */
async function askInParts(relay: RelayClient, query: RosterQuery): Promise<RosterEntry[] | undefined> {
  const keys = query.keys ?? [];
  if (keys.length <= MAX_QUERY_KEYS) return relay.rosterAnswer(query);
  const parts: RosterQuery[] = [];
  for (let i = 0; i < keys.length; i += MAX_QUERY_KEYS) parts.push({ keys: keys.slice(i, i + MAX_QUERY_KEYS) });
  if (query.fingerprints !== undefined || query.name_bucket !== undefined) {
    parts.push({ ...(query.fingerprints && { fingerprints: query.fingerprints }), ...(query.name_bucket !== undefined && { name_bucket: query.name_bucket }) });
  }
  const answers = await Promise.all(parts.map((part) => relay.rosterAnswer(part)));
  return answers.some((a) => a === undefined) ? undefined : answers.flatMap((a) => a ?? []);
}

function readersId(readers: Iterable<string>): string {
  return [...new Set(readers)].sort().join(' ');
}

export class Presence {
  private timer: NodeJS.Timeout | undefined;
  private cached: { at: number; view: RosterView } | undefined;
  /** The roster question under way that callers content with a cached view share. */
  private asking: Promise<RosterView> | undefined;
  /** route → when this session last saw it on a roster, in sighting order (awaiting.ts). */
  private readonly sightings = new Map<string, number>();
  /** sig → the details it opened to (undefined: not for this identity): each announcement is opened once. */
  private readonly opened = new Map<string, Details | undefined>();
  /** The readers the last announcement was sealed for (sorted, joined): a change announces again. */
  private announcedFor: string | undefined;

  /** `readers`: who may read this session's details: the peers' keys and this identity's own. */
  constructor(
    private readonly key: SigningKey,
    private readonly session: string,
    private readonly relays: readonly RelayClient[],
    private info: PresenceInfo,
    private readonly readers: () => Promise<readonly string[]>,
    private readonly intervalMs = ANNOUNCE_INTERVAL_MS,
  ) {}

  start(): void {
    for (const relay of this.relays) {
      relay.on('connected', () => {
        this.announcement().then(
          (a) => relay.announce(relay.queriesRoster ? a.v3 : a.v2),
          (err: unknown) => log.warn('announce_failed', { error: messageOf(err) }),
        );
      });
    }
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
    return (await this.rosterView(options)).entries;
  }

  /**
   * The merged roster of this identity's and its peers' sessions, and how many relays
   * answered for it: with none, the roster is unknown, not empty (routing.ts, awaiting.ts).
   */
  async rosterView(options: { fresh?: boolean } = {}): Promise<RosterView> {
    if (!options.fresh && this.cached && Date.now() - this.cached.at < ROSTER_CACHE_MS) return this.cached.view;
    // Callers that may take a cached view share the question under way (a message to
    // several routes each recipient at once): one query per relay, not one per recipient.
    if (!options.fresh && this.asking !== undefined) return this.asking;
    const asking = this.askRoster();
    if (!options.fresh) this.asking = asking;
    try {
      return await asking;
    } finally {
      if (this.asking === asking) this.asking = undefined;
    }
  }

  private async askRoster(): Promise<RosterView> {
    const readers = new Set(await this.readers());
    const view = await this.ask({ keys: [...readers] }, readers);
    this.cached = { at: Date.now(), view };
    return view;
  }

  /** Whatever `query` finds on the relays (pairing: a key, a fingerprint or a name bucket), verified; not cached. */
  async lookup(query: RosterQuery): Promise<RosterView> {
    return this.ask(query, new Set(await this.readers()));
  }

  /** Each connected relay asked for `query` (its keys MAX_QUERY_KEYS at a time), the answers verified and merged. */
  private async ask(query: RosterQuery, readers: ReadonlySet<string>): Promise<RosterView> {
    const answered = await Promise.all(this.relays.filter((r) => r.connected).map((r) => askInParts(r, query)));
    const answers = answered.filter((a) => a !== undefined);
    const now = Date.now();
    // A peer added or removed since the last announcement (here, or by another process):
    // announce again now rather than at the next interval, so a new peer reads the details.
    if (this.announcedFor !== undefined && readersId(readers) !== this.announcedFor) this.announce();
    const best = new Map<string, RosterSession>();
    const asked = askedFor(query);
    for (const entry of answers.flat()) {
      const a = verifiedAnnouncement(entry.announcement);
      // A relay may answer more than was asked (a lying one, or one older than revision 4): only what was asked is taken.
      if (a === undefined || !asked(a.key)) continue;
      const state = presenceState(entry.age_ms);
      if (state === undefined) continue;
      const id = formatRoute(a);
      this.noteSighting(id, now);
      const seen = best.get(id);
      if (seen === undefined || entry.age_ms < seen.age_ms) best.set(id, this.view(a, entry.age_ms, state, readers));
    }
    const entries = [...best.values()].sort((x, y) => x.age_ms - y.age_ms);
    return { entries, answered: answers.length };
  }

  /**
   * What `awaiting_session` is computed from: the roster (at most ROSTER_CACHE_MS old, so
   * an agent polling message_status does not ask the relays each time) and this session's
   * sightings.
   */
  async sighting(): Promise<RosterSighting> {
    const view = await this.rosterView();
    return { answered: view.answered > 0, present: new Set(view.entries.map((e) => formatRoute(e))), lastSeen: this.sightings };
  }

  /** When this session last saw `route` on a roster, if it did since start. */
  lastSeen(route: string): number | undefined {
    return this.sightings.get(route);
  }

  /** Whether a relay may still answer soon: one is connected, or one has not yet failed an attempt nor had its key refused. */
  reaching(): boolean {
    return this.relays.some((r) => r.connected || (!r.stopped && r.unreachable === undefined && r.untrusted === undefined));
  }

  /** When this session last saw a route on a roster; the oldest sighting goes first past the bound. */
  private noteSighting(route: string, at: number): void {
    this.sightings.delete(route);
    this.sightings.set(route, at);
    if (this.sightings.size > SIGHTINGS_LIMIT) this.sightings.delete(this.sightings.keys().next().value!);
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

  /** The announcement as version 3 (with its name bucket) and, for relays older than revision 4, which refuse that, as version 2. */
  private async announcement(): Promise<{ v3: AnnouncementV3; v2: AnnouncementV2 }> {
    const ts = Date.now();
    const details = { name: this.info.name, cwd: this.info.cwd, git_root: this.info.gitRoot, summary: this.info.summary };
    const readers = await this.readers();
    this.announcedFor = readersId(readers);
    const sealed = sealDetails(this.key, this.session, ts, details, readers);
    return {
      v3: signAnnouncementV3(this.key, { session: this.session, ts, ...sealed, name_bucket: nameBucket(details.name) }),
      v2: signAnnouncementV2(this.key, { session: this.session, ts, ...sealed }),
    };
  }

  private announce(): void {
    this.announcement().then(
      (announcement) => {
        for (const relay of this.relays) relay.announce(relay.queriesRoster ? announcement.v3 : announcement.v2);
        this.cached = undefined;
      },
      (err: unknown) => log.warn('announce_failed', { error: messageOf(err) }),
    );
  }

  /** What this identity may see of an announcement: details only where it is a reader. */
  private view(a: Announcement, ageMs: number, state: PresenceState, readers: ReadonlySet<string>): RosterSession {
    const base = { key: a.key, session: a.session, age_ms: ageMs, state };
    if (!('v' in a)) {
      // Version 1, from an older version: in clear, but shown only to a peer or this identity.
      const details = readers.has(a.key) ? { name: a.name, cwd: a.cwd, git_root: a.git_root, summary: a.summary } : {};
      return { ...base, ...details, named: (name) => name === a.name };
    }
    let details = this.opened.get(a.sig);
    if (!this.opened.has(a.sig)) {
      details = openDetails(this.key, a);
      if (this.opened.size >= OPENED_LIMIT) this.opened.delete(this.opened.keys().next().value!);
      this.opened.set(a.sig, details);
    }
    return { ...base, ...details, named: (name) => nameTag(a.key, name) === a.name_tag };
  }
}
