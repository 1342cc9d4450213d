/**
 * This relay process's rows of `relay_readers`: a row per route it has a reader of, so a
 * relay that commits to the route tells this process on its own channel (channels.ts), and
 * processes that read nothing of a route are not woken by its commits (DESIGN.md "The
 * relay": "Where the queues live"). The row is written under the route's lock before the
 * reader's first read (schema.ts, `relay_watch`); a beat keeps the rows alive and exact,
 * and removes the rows of processes that stopped beating.
 */
import { log } from '../../log.js';
import { databaseError, type Sql } from './database.js';
import type { DatabaseCalls } from './health.js';
import { forgetStaleHealth } from './meta.js';

/** How often a relay process says its rows of `relay_readers` are still its readers. */
export const READERS_BEAT_MS = 20_000;
/** Rows of a relay process that has not beaten for this long go (it stopped, or lost its database). */
const READERS_STALE_MS = 5 * READERS_BEAT_MS;
/** Routes one `relay_watch` call writes at most (watching again after an outage). */
const WATCH_BATCH_ROUTES = 1_000;

/** A relay process's instance name, as `PostgresStore.instance` makes them. */
const INSTANCE = /^[A-Za-z0-9_-]{12}$/;

/** The readers column of an enqueue row: the relay processes it names (pure); names that are not instance names are left out. */
export function readersOf(column: string): string[] {
  return column === '' ? [] : column.split(',').filter((name) => INSTANCE.test(name));
}

export class ReaderRows {
  /** Routes this process has a reader of, which its rows of `relay_readers` name. */
  private readonly watching = new Set<string>();
  /** Of those, the ones whose row may be missing (its write failed): written again at the next beat. */
  private readonly unwatched = new Set<string>();
  private released = false;

  constructor(
    private readonly sql: Sql,
    private readonly calls: DatabaseCalls,
    private readonly instance: string,
    private readonly now: () => number,
  ) {}

  /**
   * This process has a reader of `route` now: its row in `relay_readers` is written, under
   * the route's lock, before the reader's first read (resolves then), so every commit to
   * the route is either found by that read or tells this process. A failed write is made
   * again at the next beat, or when the database is back; until then the reader hears of
   * other relays' commits at the resync.
   */
  async watch(route: string): Promise<void> {
    this.watching.add(route);
    this.unwatched.delete(route);
    try {
      await this.calls.call(() => this.sql`SELECT relay_watch(${this.instance}, ${[route]}::text[])`);
    } catch (err) {
      if (this.watching.has(route)) this.unwatched.add(route);
      log.debug('relay_db_watch_failed', { route, error: databaseError(err).message });
    }
  }

  /** No reader of `route` is left here: its row goes (a row left behind goes at the next beat). */
  unwatch(route: string): void {
    this.watching.delete(route);
    this.unwatched.delete(route);
    void this.calls
      .call(() => this.sql`DELETE FROM relay_readers WHERE instance = ${this.instance} AND route = ${route}`)
      .catch((err: unknown) => log.debug('relay_db_unwatch_failed', { route, error: databaseError(err).message }));
  }

  /** The database is back: every row may have been lost with a write the outage refused. */
  outageOver(): void {
    for (const route of this.watching) this.unwatched.add(route);
  }

  /** Writes the rows that may be missing, a batch at a time, each under its routes' locks. */
  async watchAgain(): Promise<void> {
    while (this.unwatched.size > 0 && !this.released) {
      const routes = [...this.unwatched].slice(0, WATCH_BATCH_ROUTES);
      for (const route of routes) this.unwatched.delete(route);
      try {
        await this.calls.call(() => this.sql`SELECT relay_watch(${this.instance}, ${routes}::text[])`);
      } catch (err) {
        for (const route of routes) if (this.watching.has(route)) this.unwatched.add(route);
        throw err;
      }
    }
  }

  /** Keeps this process's rows alive and exact, and removes those of processes that stopped beating. */
  async beat(): Promise<void> {
    await this.watchAgain();
    await this.calls.call(() => this.sql`SELECT relay_readers_beat(${this.instance}, ${[...this.watching]}::text[], ${READERS_STALE_MS})`);
    // Health rows of relay processes that stopped (a process deletes its own as it stops).
    await this.calls.call(() => forgetStaleHealth(this.sql, this.now() - READERS_STALE_MS));
  }

  /** Other relays stop telling this one of their commits (left behind, the rows go once stale). */
  async release(): Promise<void> {
    this.released = true;
    await this.calls.call(() => this.sql`DELETE FROM relay_readers WHERE instance = ${this.instance}`).catch(() => undefined);
  }
}
