/**
 * The relay's queues in a PostgreSQL database that several relay processes share
 * (`relay --store postgres://…`; DESIGN.md "The relay": "Where the queues live"). A relay
 * process keeps no queue of its own: sends are committed by `relay_enqueue_readers`
 * (schema.ts) in batches per connection (send-batches.ts), each answered `accepted` only
 * after its commit — with `synchronous_commit` on and a synchronous standby, after the
 * standby has the commit too; each read and acknowledgement (acks.ts) goes to the
 * database. What it holds is per connection: the cursor and the window of each reader.
 * This module composes those parts with the calls' health (health.ts) and the shared rows
 * of `relay_meta` (meta.ts).
 *
 * A relay learns of messages other relays committed from NOTIFY. Each relay process
 * keeps a row in `relay_readers` for every route it has a reader of (`watch`, readers.ts),
 * and after a commit the relay that made it tells only the processes the enqueue named as
 * readers of the route, each on its own channel (one notice per process and tick,
 * channels.ts), carrying the messages when they fit, with the route's id each follows; a
 * relay sends carried messages to its readers that were sent everything before them, and
 * reads the store for the rest. Roster changes go on the channel every relay of the schema
 * hears. A notice is only news; missing one delays a delivery, never loses it: every relay
 * looks at all its routes again when its listening connection comes back, and every
 * `RESYNC_EVERY_MS`.
 */
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { encodeBase64url } from '../../identity/base64url.js';
import { InterlinkError } from '../../errors.js';
import { log } from '../../log.js';
import type { Origin, QueueStats, QueueStore, StoreEvents } from '../queue-store.js';
import type { EnqueueResult, QueuedMessage } from '../queues.js';
import type { QueueLimits, Share } from '../limits.js';
import type { RelayKey } from '../relay-key.js';
import { AckBatches, type Acknowledgement } from './acks.js';
import { NoticeChannels } from './channels.js';
import { connect, databaseError, guarded, int8, redactedUrl, type Sql } from './database.js';
import { DatabaseCalls } from './health.js';
import { healthRow, prepare, sharedRelayKey } from './meta.js';
import { READERS_BEAT_MS, ReaderRows } from './readers.js';
import { ReplicationWatch } from './replication.js';
import { SendBatches } from './send-batches.js';

/** How often every reader looks for what a missed notice would have announced. */
const RESYNC_EVERY_MS = 15_000;
/** How often the counts behind `stats()` are read from the database. */
const STATS_EVERY_MS = 2_000;

const messageRow = z.object({ id: int8, at: int8, payload: z.string(), bytes: z.number().int().min(0) });
const statsRow = z.object({ routes: int8, messages: int8, bytes: int8 });
const expiredRow = z.object({ route: z.string(), ids: z.array(int8) });
const ackedRow = z.object({ acked_route: z.string(), acked_id: int8 });

/**
 * How long the first acknowledgement of a batch waits for others. Receivers acknowledge
 * each message as they store it: on the 8-session user's path with two relays, 0.75
 * acknowledgement transactions per message without waiting, 0.39 after 10 ms, 0.25 after
 * 40 ms. Only the rows' removal waits (DESIGN.md "Acknowledgement deletes").
 */
const ACK_GATHER_MS = 40;

export interface PostgresStoreOptions {
  url: string;
  limits: QueueLimits;
  now: () => number;
  onCommit?: (seconds: number) => void;
}

export class PostgresStore implements QueueStore {
  readonly kind = 'postgres';
  /** Names this process in notices and in the `origin` of its connections' messages. */
  readonly instance = encodeBase64url(randomBytes(9));
  private events: StoreEvents | undefined;
  private readonly rosterListeners: ((route: string) => void)[] = [];
  private readonly reconnectListeners: (() => void)[] = [];
  private counts: QueueStats = { routes: 0, messages: 0, bytes: 0 };
  private readonly timers: NodeJS.Timeout[] = [];
  /** This process's rows of `relay_readers`: the routes it has a reader of. */
  private readonly readers: ReaderRows;
  /** The notices this process sends and hears. */
  private readonly channels: NoticeChannels;
  /** Sends, committed in batches per connection within its shares. */
  private readonly sends: SendBatches;
  /** Acknowledgements in batches (one at a time per relay process), kept until they are on the standby too. */
  private readonly acks = new AckBatches((acks) => this.commitAckBatch(acks), ACK_GATHER_MS);
  private released = false;
  /** Every call after the start goes through here: refused at once while the database is down. */
  readonly calls: DatabaseCalls;
  /** Whether a commit waits for a synchronous standby now: what `accepted` means (replication.ts). */
  readonly replication: ReplicationWatch;

  private constructor(
    readonly sql: Sql,
    readonly limits: QueueLimits,
    private readonly now: () => number,
    private readonly onCommit: ((seconds: number) => void) | undefined,
    schema: string,
    sourceKey: Buffer,
  ) {
    this.calls = new DatabaseCalls(() => this.commitHealth());
    this.replication = new ReplicationWatch(sql, this.calls);
    this.readers = new ReaderRows(sql, this.calls, this.instance, now);
    this.channels = new NoticeChannels(sql, this.calls, this.instance, schema, sourceKey);
    this.sends = new SendBatches({
      sql,
      calls: this.calls,
      limits,
      instance: this.instance,
      now,
      sourceKey,
      acks: this.acks,
      timed: (work) => this.timed(work),
      stored: (messages, bytes) => {
        this.counts = { ...this.counts, messages: this.counts.messages + messages.length, bytes: this.counts.bytes + bytes };
        this.channels.announceCommitted(messages);
      },
    });
    // Acknowledgements the outage may have lost are made again, readers' rows whose writes
    // failed are written again, reads refused during the outage are made again, and the
    // roster is read again.
    this.calls.onDown(() => this.acks.lost());
    this.calls.onBack(() => {
      this.acks.redo();
      this.readers.outageOver();
      void this.readers
        .watchAgain()
        .catch((err: unknown) => log.debug('relay_db_watch_failed', { error: databaseError(err).message }))
        .finally(() => this.events?.resync());
      for (const listener of this.reconnectListeners) listener();
    });
  }

  /**
   * Commits this process's health row, as a send commits (synchronous_commit as the
   * database sets it): what tells the relay that its database can store (health.ts). A
   * beat's commit also confirms the acknowledgements committed before it started, and
   * has those that failed or came before a break committed again (acks.ts `retry`); the
   * probe's, made while the database is down, confirms nothing.
   */
  private async commitHealth(): Promise<void> {
    const mark = this.calls.down === undefined ? this.acks.mark() : undefined;
    await this.sql`INSERT INTO relay_meta (name, value) VALUES (${healthRow(this.instance)}, ${String(this.now())}) ON CONFLICT (name) DO UPDATE SET value = excluded.value`;
    if (mark === undefined) return;
    this.acks.confirm(mark);
    // Not after a beat given up meanwhile: the database is down, and the redo comes when it is back.
    if (this.calls.down === undefined) this.acks.retry();
  }

  onOutage(down: (why: string) => void, back: () => void): void {
    this.calls.onDown((why) => down(why.message));
    this.calls.onBack(back);
  }

  /** Acknowledged ids kept for a redo (acks.ts). */
  get keptAcks(): number {
    return this.acks.keptIds;
  }

  /** Connects, makes the tables if the database has none, and starts listening. */
  static async open(options: PostgresStoreOptions): Promise<PostgresStore> {
    // A connection of the pool that closes is a break for the acknowledgements (acks.ts);
    // before the store is made, nothing was acknowledged on one.
    let closed = (): void => undefined;
    const sql = connect(options.url, () => closed());
    try {
      const { schema, sourceKey } = await guarded(() => prepare(sql, options.now()));
      const store = new PostgresStore(sql, options.limits, options.now, options.onCommit, schema, sourceKey);
      closed = () => store.acks.lost();
      await store.start();
      return store;
    } catch (err) {
      await sql.end({ timeout: 1 }).catch(() => undefined);
      const cause = databaseError(err);
      throw new InterlinkError('storage', `cannot open the relay's store at ${redactedUrl(options.url)}: ${cause.message}`, undefined, { cause: err });
    }
  }

  private async start(): Promise<void> {
    await this.channels.listen({
      arrived: (route) => this.events?.arrived(route),
      committed: (route, message, follows) => this.events?.committed(route, message, follows),
      rosterChanged: (route) => {
        for (const listener of this.rosterListeners) listener(route);
      },
      reconnected: () => {
        this.events?.resync();
        for (const listener of this.reconnectListeners) listener();
      },
    });
    await this.refresh();
    this.every(RESYNC_EVERY_MS, () => this.events?.resync());
    this.every(STATS_EVERY_MS, () => void this.refresh().catch((err: unknown) => log.debug('relay_db_stats_failed', { error: databaseError(err).message })));
    this.every(READERS_BEAT_MS, () => void this.readers.beat().catch((err: unknown) => log.debug('relay_db_beat_failed', { error: databaseError(err).message })));
    this.calls.beat();
    await this.replication.check();
  }

  /** This process has a reader of `route` now (readers.ts): resolves once its row is written, or its write failed. */
  watch(route: string): Promise<void> {
    return this.readers.watch(route);
  }

  /** No reader of `route` is left here. */
  unwatch(route: string): void {
    this.readers.unwatch(route);
  }

  private every(ms: number, run: () => void): void {
    const timer = setInterval(run, ms);
    timer.unref();
    this.timers.push(timer);
  }

  subscribe(events: StoreEvents): void {
    this.events = events;
  }

  /** `changed` hears of roster entries other relays changed; `reconnected`, that notices may have been missed. */
  onRosterChange(changed: (route: string) => void, reconnected: () => void): void {
    this.rosterListeners.push(changed);
    this.reconnectListeners.push(reconnected);
  }

  /** The other relays hear of it with the next notice. */
  announceRosterChange(route: string): void {
    this.channels.announceRosterChange(route);
  }

  stats(): QueueStats {
    return this.counts;
  }

  async refresh(): Promise<void> {
    const [row] = await this.calls.call(
      () => this.sql`
        SELECT (SELECT count(*) FROM relay_routes) AS routes,
               coalesce(sum(messages), 0) AS messages, coalesce(sum(bytes), 0) AS bytes
        FROM relay_totals`,
    );
    this.counts = statsRow.parse(row);
  }

  private timed<T>(work: () => Promise<T>): Promise<T> {
    const started = performance.now();
    const done = this.calls.call(work);
    const onCommit = this.onCommit;
    if (onCommit !== undefined) void done.then(() => onCommit((performance.now() - started) / 1000), () => undefined);
    return done;
  }

  /** In batches per connection, in the order the sends reached this relay (send-batches.ts). */
  enqueue(route: string, payload: string, origin: Origin): Promise<EnqueueResult> {
    return this.sends.enqueue(route, payload, origin);
  }

  closed(origin: Origin): void {
    this.sends.closed(origin);
  }

  held(origin: Origin): Promise<{ address: Share; connection: Share }> {
    return this.sends.held(origin);
  }

  async read(route: string, after: number, limit: number): Promise<QueuedMessage[]> {
    const rows = await this.calls.call(() => this.sql`SELECT id, at, payload, bytes FROM relay_messages WHERE route = ${route} AND id > ${after} ORDER BY id LIMIT ${limit}`);
    return rows.map((row) => messageRow.parse(row));
  }

  /**
   * Acknowledgements are stored together: those that reach this relay process within
   * `ACK_GATHER_MS` of the first, or while its previous batch is committing, go in one
   * transaction (`relay_ack_many`), whatever their routes. Nothing waits on it but the
   * row's removal: the reader's window opened when the frame arrived. Resolves with how
   * many of these ids were still queued.
   */
  acknowledge(route: string, ids: readonly number[]): Promise<number> {
    if (ids.length === 0) return Promise.resolve(0);
    return this.acks.acknowledge(route, ids);
  }

  /** One transaction for `acks`; how many ids each removed (an id acknowledged twice counts once, for the first). */
  private async commitAckBatch(acks: readonly Acknowledgement[]): Promise<number[]> {
    const routes = acks.flatMap((ack) => ack.ids.map(() => ack.route));
    const ids = acks.flatMap((ack) => ack.ids.map(String));
    const rows = await this.timed(() => this.sql`SELECT acked_route, acked_id FROM relay_ack_many(${routes}::text[], ${ids}::bigint[])`);
    const gone = new Set(
      rows.map((row) => {
        const acked = ackedRow.parse(row);
        return `${acked.acked_id} ${acked.acked_route}`;
      }),
    );
    const removed = acks.map((ack) => ack.ids.filter((id) => gone.delete(`${id} ${ack.route}`)).length);
    const total = removed.reduce((sum, n) => sum + n, 0);
    if (total > 0) this.counts = { ...this.counts, messages: Math.max(0, this.counts.messages - total) };
    return removed;
  }

  /** Old messages go like acknowledged ones, in the same batches. */
  async expire(maxAgeMs: number): Promise<number> {
    const before = this.now() - maxAgeMs;
    const rows = await this.calls.call(() => this.sql`SELECT route, array_agg(id ORDER BY id) AS ids FROM relay_messages WHERE at < ${before} GROUP BY route`);
    const removed = await Promise.all(
      rows.map((row) => {
        const old = expiredRow.parse(row);
        return this.acknowledge(old.route, old.ids);
      }),
    );
    return removed.reduce((sum, n) => sum + n, 0);
  }

  /** The relay key every relay of this database presents, made by the first one. */
  sharedRelayKey(): Promise<RelayKey> {
    return sharedRelayKey(this.sql, this.calls);
  }

  async release(): Promise<void> {
    if (this.released) return;
    this.channels.release();
    this.released = true;
    await this.readers.release();
    await this.calls.call(() => this.sql`DELETE FROM relay_meta WHERE name = ${healthRow(this.instance)}`).catch(() => undefined);
    this.calls.close();
    this.replication.stop();
    for (const timer of this.timers) clearInterval(timer);
    await this.channels.stop();
    await this.sql.end({ timeout: 5 });
  }
}
