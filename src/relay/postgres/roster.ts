/**
 * The presence roster shared by every relay of one database (DESIGN.md "The relay":
 * "Where the queues live"). The rules are the in-memory roster's (`roster.ts`): the newest
 * verified word per `<key>#<session>`, a goodbye at least as new as the announcement removes
 * it and keeps a replay of it out, silence expires after three days, and the copy served
 * holds the freshest entries within the relay's roster bounds (which grow with its
 * connection capacity). Here one row per route holds that newest word, and the upsert
 * decides, so two relays that hear two words at once keep the newer one.
 *
 * Roster queries are answered from a copy in this process, indexed by key and fingerprint
 * (roster-index.ts): the relay's own writes change it at once, other relays' writes arrive
 * as notices (`PostgresStore.announceRosterChange`), and it is read whole again at start,
 * after a reconnect and every minute. Each relay of a cluster holds the cluster's whole
 * roster in this copy: size its bounds (`rosterMaxEntries`) for every session of the
 * cluster, not only its own connections.
 */
import { z } from 'zod';
import { formatRoute } from '../../envelope/route.js';
import { log } from '../../log.js';
import { announcementSchema, verifiedAnnouncement, verifiedGoodbye, type Announcement } from '../../presence/announcement.js';
import { parseJsonWith } from '../../json.js';
import type { RosterStore } from '../queue-store.js';
import { queryEntries, type AnnounceOutcome, type GoodbyeOutcome, type RosterEntry, type RosterLimits } from '../roster.js';
import { RosterIndex, type RosterQuery } from '../roster-index.js';
import { RosterWrites, type RosterRow } from './roster-writes.js';
import { databaseError, int8, type Sql } from './database.js';
import type { PostgresStore } from './store.js';

const RELOAD_EVERY_MS = 60_000;
/** Rows kept beyond what is served (goodbyes among them), trimmed every this many writes of this relay. */
const TRIM_EVERY_WRITES = 256;

const rosterRow = z.object({ route: z.string(), kind: z.enum(['announce', 'goodbye']), body: z.string().nullable(), bytes: z.number().int().min(0), heard_at: int8 });

interface Heard {
  announcement: Announcement;
  /** Its JSON, as stored in the row: what a reply sends. */
  text: string;
  heardAt: number;
  bytes: number;
  /** Orders words heard in the same millisecond: the order this relay received them (or read them). */
  seq: number;
}

export class PostgresRoster implements RosterStore {
  private readonly entries = new Map<string, Heard>();
  private readonly index = new RosterIndex();
  /** Announcements are stored in batches, one statement at a time (roster-writes.ts). */
  private readonly batches = new RosterWrites((rows) => this.upsert(rows));
  private changes = 0;
  private writes = 0;
  private heardSeq = 0;
  private readonly timer: NodeJS.Timeout;

  private constructor(
    private readonly sql: Sql,
    private readonly store: PostgresStore,
    private readonly now: () => number,
    private readonly limits: RosterLimits,
  ) {
    store.onRosterChange(
      (route) => void this.reloadRoute(route),
      () => void this.reloadAll().catch((err: unknown) => log.debug('relay_roster_reload_failed', { error: databaseError(err).message })),
    );
    this.timer = setInterval(() => void this.maintain(), RELOAD_EVERY_MS);
    this.timer.unref();
  }

  static async open(store: PostgresStore, now: () => number, limits: RosterLimits): Promise<PostgresRoster> {
    const roster = new PostgresRoster(store.sql, store, now, limits);
    await roster.reloadAll();
    return roster;
  }

  get version(): number {
    return this.changes;
  }

  async announce(data: unknown): Promise<AnnounceOutcome> {
    const announcement = verifiedAnnouncement(data);
    if (announcement === undefined) return 'invalid';
    const route = formatRoute(announcement);
    const body = JSON.stringify(announcement);
    const bytes = Buffer.byteLength(body, 'utf8');
    const now = this.now();
    const seq = ++this.heardSeq;
    if (!(await this.batches.add({ route, ts: announcement.ts, body, bytes, heardAt: now }))) return 'older';
    this.set(route, { announcement, text: body, heardAt: now, bytes, seq });
    this.wrote(route);
    return 'stored';
  }

  /** One statement (numbers as text in arrays, as postgres.js sends them without the catalog's types): each row stored unless the table holds a newer word of its route (the in-memory roster's rules); the routes stored. */
  private async upsert(rows: readonly RosterRow[]): Promise<ReadonlySet<string>> {
    const stale = this.now() - this.limits.retainMs;
    const stored = await this.store.calls.call(
      () => this.sql`
        INSERT INTO relay_roster AS r (route, kind, ts, body, bytes, heard_at)
        SELECT u.route, 'announce', u.ts, u.body, u.bytes::integer, u.heard_at
        FROM unnest(${rows.map((r) => r.route)}::text[], ${rows.map((r) => String(r.ts))}::bigint[], ${rows.map((r) => r.body)}::text[], ${rows.map((r) => String(r.bytes))}::bigint[], ${rows.map((r) => String(r.heardAt))}::bigint[]) AS u(route, ts, body, bytes, heard_at)
        ON CONFLICT (route) DO UPDATE SET kind = 'announce', ts = excluded.ts, body = excluded.body, bytes = excluded.bytes, heard_at = excluded.heard_at
        WHERE (r.kind = 'announce' AND r.ts <= excluded.ts) OR (r.kind = 'goodbye' AND r.ts < excluded.ts) OR r.heard_at <= ${stale}
        RETURNING r.route`,
    );
    return new Set(stored.map((row) => z.object({ route: z.string() }).parse(row).route));
  }

  async goodbye(data: unknown): Promise<GoodbyeOutcome> {
    const goodbye = verifiedGoodbye(data);
    if (goodbye === undefined) return 'invalid';
    const route = formatRoute(goodbye);
    const now = this.now();
    const stale = now - this.limits.retainMs;
    const rows = await this.store.calls.call(
      () => this.sql`
        WITH before AS (SELECT kind FROM relay_roster WHERE route = ${route}),
        changed AS (
          INSERT INTO relay_roster AS r (route, kind, ts, body, bytes, heard_at)
          VALUES (${route}, 'goodbye', ${goodbye.ts}, NULL, ${Buffer.byteLength(route, 'utf8') + 8}, ${now})
          ON CONFLICT (route) DO UPDATE SET kind = 'goodbye', ts = excluded.ts, body = NULL, bytes = excluded.bytes, heard_at = excluded.heard_at
          WHERE r.ts <= excluded.ts OR r.heard_at <= ${stale}
          RETURNING 1)
        SELECT (SELECT kind FROM before) AS kind, (SELECT count(*) FROM changed)::int AS changed`,
    );
    const row = z.object({ kind: z.string().nullable(), changed: z.number().int() }).parse(rows[0]);
    if (row.changed === 0) return 'noted';
    this.wrote(route);
    this.remove(route);
    return row.kind === 'announce' ? 'removed' : 'noted';
  }

  /** The live entries `query` finds (roster-index.ts). */
  query(query: RosterQuery): RosterEntry[] {
    const now = this.now();
    const found = this.index.find(query);
    return queryEntries(
      found,
      (route) => {
        const e = this.entries.get(route);
        return e === undefined || now - e.heardAt >= this.limits.retainMs ? undefined : { announcement: e.announcement, receivedAt: e.heardAt, text: e.text };
      },
      now,
    );
  }

  private set(route: string, heard: Heard): void {
    const before = this.entries.get(route);
    if (before !== undefined) this.index.remove(before.announcement, route);
    // Deleted first, so the map stays in the order words were heard: the stalest is first.
    this.entries.delete(route);
    this.entries.set(route, heard);
    this.index.add(heard.announcement, route);
    this.changes++;
    if (before === undefined && this.entries.size > this.limits.maxEntries) this.evictStalest();
  }

  private remove(route: string): void {
    const before = this.entries.get(route);
    if (before === undefined) return;
    this.entries.delete(route);
    this.index.remove(before.announcement, route);
    this.changes++;
  }

  /** Past the bound, the entry heard longest ago goes from this copy (it stays in the table until trimmed). */
  private evictStalest(): void {
    const stalest = this.entries.keys().next();
    if (stalest.done !== true) this.remove(stalest.value);
  }

  /** Tells the other relays, and now and then trims the table to what can be served. */
  private wrote(route: string): void {
    this.store.announceRosterChange(route);
    if (++this.writes % TRIM_EVERY_WRITES === 0) void this.trim();
  }

  private heardOf(row: z.infer<typeof rosterRow>): Heard | undefined {
    if (row.kind !== 'announce' || row.body === null) return undefined;
    const announcement = parseJsonWith(announcementSchema, row.body);
    if (!announcement.ok) {
      log.warn('relay_roster_row_damaged', { route: row.route });
      return undefined;
    }
    return { announcement: announcement.value, text: row.body, heardAt: row.heard_at, bytes: row.bytes, seq: ++this.heardSeq };
  }

  private async reloadRoute(route: string): Promise<void> {
    try {
      const rows = await this.store.calls.call(() => this.sql`SELECT route, kind, body, bytes, heard_at FROM relay_roster WHERE route = ${route}`);
      const heard = rows.length === 0 ? undefined : this.heardOf(rosterRow.parse(rows[0]));
      if (heard !== undefined) this.set(route, heard);
      else this.remove(route);
    } catch (err) {
      log.debug('relay_roster_reload_failed', { error: databaseError(err).message });
    }
  }

  /** The newest rows that can be served, read whole. */
  async reloadAll(): Promise<void> {
    const since = this.now() - this.limits.retainMs;
    const rows = await this.store.calls.call(
      () => this.sql`SELECT route, kind, body, bytes, heard_at FROM relay_roster WHERE kind = 'announce' AND heard_at > ${since} ORDER BY heard_at DESC LIMIT ${this.limits.maxEntries}`,
    );
    this.entries.clear();
    this.index.clear();
    for (const row of [...rows].reverse()) {
      const parsed = rosterRow.parse(row);
      const heard = this.heardOf(parsed);
      if (heard !== undefined) {
        this.entries.set(parsed.route, heard);
        this.index.add(heard.announcement, parsed.route);
      }
    }
    this.changes++;
  }

  /** Rows past the retention, or beyond twice what can be served, go. */
  private async trim(): Promise<void> {
    try {
      await this.store.calls.call(
        () => this.sql`
          DELETE FROM relay_roster WHERE heard_at <= ${this.now() - this.limits.retainMs}
             OR route IN (SELECT route FROM relay_roster ORDER BY heard_at DESC OFFSET ${2 * this.limits.maxEntries})`,
      );
    } catch (err) {
      log.debug('relay_roster_trim_failed', { error: databaseError(err).message });
    }
  }

  private async maintain(): Promise<void> {
    await this.trim();
    await this.reloadAll().catch((err: unknown) => log.debug('relay_roster_reload_failed', { error: databaseError(err).message }));
  }

  close(): void {
    clearInterval(this.timer);
  }
}
