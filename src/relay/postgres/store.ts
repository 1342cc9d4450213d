/**
 * The relay's queues in a PostgreSQL database that several relay processes share
 * (`relay --store postgres://…`; DESIGN.md "The relay": "Where the queues live"). A relay
 * process keeps no queue of its own: each send is one call of `relay_enqueue_follows`
 * (schema.ts), answered `accepted` only after its commit — with `synchronous_commit` on and
 * a synchronous standby, after the standby has the commit too; each read and
 * acknowledgement goes to the database. What it holds is per connection: the cursor and
 * the window of each reader.
 *
 * A relay learns of messages other relays committed from NOTIFY. Each relay process
 * keeps a row in `relay_readers` for every route it has a reader of (`watch`), and after
 * a commit the relay that made it tells only the processes the enqueue named as readers
 * of the route, each on its own channel (one notice per process and tick, notice.ts),
 * carrying the messages when they fit, with the route's id each follows; a relay sends
 * carried messages to its readers that were sent everything before them, and reads the
 * store for the rest. Roster changes go on the channel every relay of the schema hears. A
 * notice is only news; missing one delays a delivery, never loses it: every relay looks at
 * all its routes again when its listening connection comes back, and every
 * `RESYNC_EVERY_MS`.
 */
import { createHmac, randomBytes } from 'node:crypto';
import { z } from 'zod';
import { decodeBase64url, encodeBase64url } from '../../identity/base64url.js';
import { SEED_BYTES, signingKeyFromSeed } from '../../identity/ed25519.js';
import { InterlinkError } from '../../errors.js';
import { log } from '../../log.js';
import type { Origin, QueueStats, QueueStore, StoreEvents } from '../queue-store.js';
import type { EnqueueResult, QueuedMessage } from '../queues.js';
import type { QueueLimits, Share } from '../limits.js';
import { freshRelayKey, type RelayKey } from '../relay-key.js';
import { SOURCE_KEY_BYTES, sourceGroup } from '../shares.js';
import { AckBatches, type Acknowledgement } from './acks.js';
import { connect, databaseError, guarded, int8, redactedUrl, type Sql } from './database.js';
import { DatabaseCalls } from './health.js';
import { ReplicationWatch } from './replication.js';
import { formatNotices, parseNotice, type NoticedMessage } from './notice.js';
import { createRelayTables, relayKeyMeta } from './schema.js';

/** How often every reader looks for what a missed notice would have announced. */
const RESYNC_EVERY_MS = 15_000;
/** How often the counts behind `stats()` are read from the database. */
const STATS_EVERY_MS = 2_000;
/** How often a relay process says its rows of `relay_readers` are still its readers. */
const READERS_BEAT_MS = 20_000;
/** Rows of a relay process that has not beaten for this long go (it stopped, or lost its database). */
const READERS_STALE_MS = 5 * READERS_BEAT_MS;
/** Routes one `relay_watch` call writes at most (watching again after an outage). */
const WATCH_BATCH_ROUTES = 1_000;


const messageRow = z.object({ id: int8, at: int8, payload: z.string(), bytes: z.number().int().min(0) });
const enqueueRow = z.object({
  outcome: z.enum(['enqueued', 'routeMessages', 'messages', 'bytes', 'perAddress', 'perConnection']),
  id: int8.nullable(),
  follows: int8.nullable(),
  /** Other relay processes reading the route, comma-separated; null on a route's later rows of one call, and on refusals. */
  readers: z.string().nullable(),
});
/** A relay process's instance name, as `PostgresStore.instance` makes them. */
const INSTANCE = /^[A-Za-z0-9_-]{12}$/;
const countRow = z.object({ messages: int8, bytes: int8 });
const statsRow = z.object({ routes: int8, messages: int8, bytes: int8 });
const expiredRow = z.object({ route: z.string(), ids: z.array(int8) });
const ackedRow = z.object({ acked_route: z.string(), acked_id: int8 });

interface WaitingSend {
  route: string;
  payload: string;
  /** The payload's UTF-8 bytes, as the database counts them (octet_length). */
  bytes: number;
  resolve(result: EnqueueResult): void;
  reject(err: unknown): void;
}

/** A committed message and the other relay processes that read its route. */
interface TargetedMessage extends NoticedMessage {
  readers: readonly string[];
}

interface PendingNews {
  /** Per relay process, per route it reads, the messages committed to it this tick. */
  readers: Map<string, Map<string, NoticedMessage[]>>;
  roster: Set<string>;
}

interface SendBatch {
  origin: Origin;
  waiting: WaitingSend[];
  committing: boolean;
}

/** Sends and payload bytes one transaction stores at most. */
const BATCH_SENDS = 256;
const BATCH_BYTES = 8 * 1024 * 1024;
/**
 * How long the first acknowledgement of a batch waits for others. Receivers acknowledge
 * each message as they store it: on the 8-session user's path with two relays, 0.75
 * acknowledgement transactions per message without waiting, 0.39 after 10 ms, 0.25 after
 * 40 ms. Only the rows' removal waits (DESIGN.md "Acknowledgement deletes").
 */
const ACK_GATHER_MS = 40;

/** Takes the first sends of `waiting`, within the batch bounds (always at least one). */
function takeBatch(waiting: WaitingSend[]): WaitingSend[] {
  let count = 0;
  let bytes = 0;
  while (count < waiting.length && count < BATCH_SENDS) {
    bytes += waiting[count]!.payload.length;
    if (count > 0 && bytes > BATCH_BYTES) break;
    count++;
  }
  return waiting.splice(0, count);
}

/** The channel of one schema, which every relay of it hears: relays on other schemas of the database do not wake each other. */
export function channelOf(schema: string): string {
  return `interlink_relay_${createHmac('sha256', 'interlink-relay-channel').update(schema).digest('hex').slice(0, 16)}`;
}

/** The channel of one relay process of the schema: notices of commits to routes it reads. */
export function instanceChannelOf(schema: string, instance: string): string {
  return `${channelOf(schema)}_${instance}`;
}

/** The readers column of an enqueue row: the relay processes it names (pure); names that are not instance names are left out. */
export function readersOf(column: string): string[] {
  return column === '' ? [] : column.split(',').filter((name) => INSTANCE.test(name));
}

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
  /** What the next notices tell: per relay process, the messages committed to the routes it reads; and roster entries. */
  private pendingNews: PendingNews | undefined;
  /** Routes this process has a reader of, which its rows of `relay_readers` name. */
  private readonly watching = new Set<string>();
  /** Of those, the ones whose row may be missing (its write failed): written again at the next beat. */
  private readonly unwatched = new Set<string>();
  /** Tags notices, so that other relays send the messages they carry (notice.ts). */
  private readonly noticeKey: Buffer;
  /** Per connection, the sends waiting for its batch under way to commit. */
  private readonly batches = new Map<string, SendBatch>();
  /**
   * Per open connection, at least what it holds queued: its count when last counted, plus
   * what it stored since. Only its own batches (one at a time) add to what a connection
   * holds, and acknowledgements anywhere only take away, so while this bound leaves room
   * for a batch, the batch fits its share without counting. Counting means reading every
   * index entry of the connection's messages, those acknowledged since the last vacuum
   * too: once per send, a long-lived connection's sends cost more and more.
   */
  private readonly heldBound = new Map<string, Share>();
  /** Acknowledgements in batches (one at a time per relay process), kept until they are on the standby too. */
  private readonly acks = new AckBatches((acks) => this.commitAckBatch(acks), ACK_GATHER_MS);
  private unlisten: (() => Promise<void>) | undefined;
  private released = false;
  /** Every call after the start goes through here: refused at once while the database is down. */
  readonly calls: DatabaseCalls;
  /** The schema's channel, which every relay of it hears (roster changes, and relays of earlier releases). */
  private readonly channel: string;
  /** Whether a commit waits for a synchronous standby now: what `accepted` means (replication.ts). */
  readonly replication: ReplicationWatch;

  private constructor(
    readonly sql: Sql,
    readonly limits: QueueLimits,
    private readonly now: () => number,
    private readonly onCommit: ((seconds: number) => void) | undefined,
    private readonly schema: string,
    private readonly sourceKey: Buffer,
  ) {
    this.calls = new DatabaseCalls(() => this.commitHealth());
    this.replication = new ReplicationWatch(sql, this.calls);
    this.channel = channelOf(schema);
    this.noticeKey = createHmac('sha256', sourceKey).update('interlink-relay-notice').digest();
    // Acknowledgements the outage may have lost are made again, readers' rows whose writes
    // failed are written again, reads refused during the outage are made again, and the
    // roster is read again.
    this.calls.onDown(() => this.acks.outage());
    this.calls.onBack(() => {
      this.acks.redo();
      for (const route of this.watching) this.unwatched.add(route);
      void this.watchAgain()
        .catch((err: unknown) => log.debug('relay_db_watch_failed', { error: databaseError(err).message }))
        .finally(() => this.events?.resync());
      for (const listener of this.reconnectListeners) listener();
    });
  }

  /**
   * Commits this process's health row, as a send commits (synchronous_commit as the
   * database sets it): what tells the relay that its database can store (health.ts). A
   * beat's commit also confirms the acknowledgements committed before it started; the
   * probe's, made while the database is down, confirms nothing.
   */
  private async commitHealth(): Promise<void> {
    const mark = this.calls.down === undefined ? this.acks.mark() : undefined;
    await this.sql`INSERT INTO relay_meta (name, value) VALUES (${healthRow(this.instance)}, ${String(this.now())}) ON CONFLICT (name) DO UPDATE SET value = excluded.value`;
    if (mark !== undefined) this.acks.confirm(mark);
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
    const sql = connect(options.url);
    try {
      const { schema, sourceKey } = await guarded(() => prepare(sql, options.now()));
      const store = new PostgresStore(sql, options.limits, options.now, options.onCommit, schema, sourceKey);
      await store.start();
      return store;
    } catch (err) {
      await sql.end({ timeout: 1 }).catch(() => undefined);
      const cause = databaseError(err);
      throw new InterlinkError('storage', `cannot open the relay's store at ${redactedUrl(options.url)}: ${cause.message}`, undefined, { cause: err });
    }
  }

  private async start(): Promise<void> {
    // Both channels are heard on the one listening connection, subscribed again together after each reconnect.
    const own = await guarded(() => this.sql.listen(instanceChannelOf(this.schema, this.instance), (payload) => this.onNotice(payload)));
    const shared = await guarded(() =>
      this.sql.listen(
        this.channel,
        (payload) => this.onNotice(payload),
        // Called on every (re)connect of the listening connection: notices may have been missed.
        () => {
          this.events?.resync();
          for (const listener of this.reconnectListeners) listener();
        },
      ),
    );
    this.unlisten = async () => {
      await Promise.allSettled([own.unlisten(), shared.unlisten()]);
    };
    await this.refresh();
    this.every(RESYNC_EVERY_MS, () => this.events?.resync());
    this.every(STATS_EVERY_MS, () => void this.refresh().catch((err: unknown) => log.debug('relay_db_stats_failed', { error: databaseError(err).message })));
    this.every(READERS_BEAT_MS, () => void this.beat().catch((err: unknown) => log.debug('relay_db_beat_failed', { error: databaseError(err).message })));
    this.calls.beat();
    await this.replication.check();
  }

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

  /** Writes the rows that may be missing, a batch at a time, each under its routes' locks. */
  private async watchAgain(): Promise<void> {
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
  private async beat(): Promise<void> {
    await this.watchAgain();
    await this.calls.call(() => this.sql`SELECT relay_readers_beat(${this.instance}, ${[...this.watching]}::text[], ${READERS_STALE_MS})`);
    // Health rows of relay processes that stopped (a process deletes its own as it stops).
    const stale = String(this.now() - READERS_STALE_MS);
    await this.calls.call(
      () => this.sql`DELETE FROM relay_meta WHERE name LIKE 'health %' AND lpad(value, 20, '0') < lpad(${stale}, 20, '0')`,
    );
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

  private onNotice(payload: string): void {
    // This relay's own roster notices come back too: told already, they need no tag checked.
    if (payload.startsWith(`${this.instance}\n`)) return;
    const notice = parseNotice(payload, this.noticeKey);
    if (notice === undefined) return;
    for (const route of notice.queues) this.events?.arrived(route);
    for (const message of notice.messages) this.events?.committed(message.route, message, message.follows);
    for (const route of notice.roster) for (const listener of this.rosterListeners) listener(route);
  }

  /** The other relays hear of it with the next notice. */
  announceRosterChange(route: string): void {
    this.news()?.roster.add(route);
  }

  /**
   * The relay processes that read these messages' routes hear of them with their next
   * notice, which carries them when they fit (notice.ts); a route whose messages do not
   * fit is named for a read. A route no other process reads is told to none.
   */
  private announceCommitted(messages: readonly TargetedMessage[]): void {
    if (!messages.some((m) => m.readers.length > 0)) return;
    const news = this.news();
    if (news === undefined) return;
    for (const { readers, ...message } of messages) {
      for (const reader of readers) {
        let queues = news.readers.get(reader);
        if (queues === undefined) news.readers.set(reader, (queues = new Map()));
        const listed = queues.get(message.route);
        if (listed === undefined) queues.set(message.route, [message]);
        else listed.push(message);
      }
    }
  }

  /** What the notices sent at the end of this tick will tell (one notice per listener for all this tick's commits). */
  private news(): PendingNews | undefined {
    if (this.released) return undefined;
    if (this.pendingNews === undefined) {
      this.pendingNews = { readers: new Map(), roster: new Set() };
      setImmediate(() => this.flushNotices());
    }
    return this.pendingNews;
  }

  private flushNotices(): void {
    const news = this.pendingNews;
    this.pendingNews = undefined;
    if (news === undefined || this.released) return;
    const notify = (channel: string, notice: string) =>
      void this.calls.call(() => this.sql.notify(channel, notice)).catch((err: unknown) => log.debug('relay_db_notify_failed', { error: databaseError(err).message }));
    for (const [reader, queues] of news.readers) {
      const channel = instanceChannelOf(this.schema, reader);
      for (const notice of formatNotices(this.instance, this.noticeKey, { queues, roster: new Set() })) notify(channel, notice);
    }
    if (news.roster.size > 0) for (const notice of formatNotices(this.instance, this.noticeKey, { queues: new Map(), roster: news.roster })) notify(this.channel, notice);
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

  /** The `src` a message from `address` is counted by: a keyed hash, the same in every relay of the database. */
  private srcOf(address: string | undefined): string | null {
    const group = sourceGroup(address);
    return group === undefined ? null : createHmac('sha256', this.sourceKey).update(group).digest('base64url').slice(0, 22);
  }

  private originOf(origin: Origin): string {
    return `${this.instance}:${origin.connection}`;
  }

  /** A share the relay-wide bounds already cover needs no count of its own. */
  private share(share: Share | undefined): Share | undefined {
    return share === undefined || (share.messages >= this.limits.messages && share.bytes >= this.limits.bytes) ? undefined : share;
  }

  private timed<T>(work: () => Promise<T>): Promise<T> {
    const started = performance.now();
    const done = this.calls.call(work);
    const onCommit = this.onCommit;
    if (onCommit !== undefined) void done.then(() => onCommit((performance.now() - started) / 1000), () => undefined);
    return done;
  }

  /**
   * A connection's sends are stored in the order they reached this relay: while its batch
   * is committing, its next sends wait, and go together in the next batch (one
   * transaction, ids in arrival order per route). One batch at a time per connection also
   * keeps its share's count exact.
   */
  enqueue(route: string, payload: string, origin: Origin): Promise<EnqueueResult> {
    return new Promise((resolve, reject) => {
      const key = this.originOf(origin);
      if (!this.heldBound.has(key)) this.heldBound.set(key, { messages: 0, bytes: 0 });
      let batch = this.batches.get(key);
      if (batch === undefined) {
        batch = { origin, waiting: [], committing: false };
        this.batches.set(key, batch);
      }
      batch.waiting.push({ route, payload, bytes: Buffer.byteLength(payload, 'utf8'), resolve, reject });
      if (!batch.committing) void this.commitBatches(key, batch);
    });
  }

  private async commitBatches(key: string, batch: SendBatch): Promise<void> {
    batch.committing = true;
    while (batch.waiting.length > 0) {
      const sends = takeBatch(batch.waiting);
      try {
        const results = await this.commitBatch(batch.origin, sends);
        sends.forEach((send, i) => send.resolve(results[i]!));
      } catch (err) {
        for (const send of sends) send.reject(err);
      }
    }
    batch.committing = false;
    this.batches.delete(key);
  }

  closed(origin: Origin): void {
    this.heldBound.delete(this.originOf(origin));
  }

  /**
   * The connection's share to check in the batch's transaction, or undefined when it
   * certainly fits: its bound leaves room, perhaps once counted again (acknowledgements may
   * have freed some). A connection that closed meanwhile is counted.
   */
  private async connectionShare(key: string, sends: readonly WaitingSend[]): Promise<Share | undefined> {
    const share = this.share(this.limits.perConnection);
    let bound = this.heldBound.get(key);
    if (share === undefined || bound === undefined) return share;
    const messages = sends.length;
    const bytes = sends.reduce((sum, s) => sum + s.bytes, 0);
    const fits = (held: Share) => held.messages + messages <= share.messages && held.bytes + bytes <= share.bytes;
    if (!fits(bound)) {
      const [row] = await this.calls.call(() => this.sql`SELECT count(*) AS messages, coalesce(sum(bytes), 0) AS bytes FROM relay_messages WHERE origin = ${key}`);
      bound = countRow.parse(row);
      if (this.heldBound.has(key)) this.heldBound.set(key, bound);
    }
    return fits(bound) ? undefined : share;
  }

  private async commitBatch(origin: Origin, sends: readonly WaitingSend[]): Promise<EnqueueResult[]> {
    const address = this.share(this.limits.perAddress);
    const key = this.originOf(origin);
    const connection = await this.connectionShare(key, sends);
    // A synchronous commit: once it returns, the acknowledgements committed before it are on the standby too.
    const mark = this.acks.mark();
    const rows = await this.timed(
      () => this.sql`
        SELECT outcome, id, follows, readers FROM relay_enqueue_readers(
          ${this.instance}, ${this.now()}, ${sends.map((s) => s.route)}::text[], ${sends.map((s) => s.payload)}::text[],
          ${this.srcOf(origin.address)}, ${key},
          ${this.limits.routeMessages}, ${this.limits.messages}, ${this.limits.bytes},
          ${address?.messages ?? null}, ${address?.bytes ?? null},
          ${connection?.messages ?? null}, ${connection?.bytes ?? null})`,
    );
    this.acks.confirm(mark);
    this.calls.committed();
    if (rows.length !== sends.length) throw new InterlinkError('storage', `the relay database answered ${rows.length} of ${sends.length} sends`);
    // Each route's readers come with its first message of the call.
    const readers = new Map<string, string[]>();
    const results = rows.map((row, i): EnqueueResult => {
      const parsed = enqueueRow.parse(row);
      if (parsed.readers !== null && !readers.has(sends[i]!.route)) readers.set(sends[i]!.route, readersOf(parsed.readers));
      if (parsed.outcome !== 'enqueued') return { outcome: 'queue_full', limit: parsed.outcome };
      if (parsed.id === null) throw new InterlinkError('storage', 'the relay database enqueued a message without an id');
      return { outcome: 'enqueued', id: parsed.id, follows: parsed.follows };
    });
    const stored = sends.filter((_, i) => results[i]!.outcome === 'enqueued');
    if (stored.length > 0) {
      const bytes = stored.reduce((sum, s) => sum + s.bytes, 0);
      this.counts = { ...this.counts, messages: this.counts.messages + stored.length, bytes: this.counts.bytes + bytes };
      const bound = this.heldBound.get(key);
      if (bound !== undefined) this.heldBound.set(key, { messages: bound.messages + stored.length, bytes: bound.bytes + bytes });
      this.announceCommitted(
        results.flatMap((result, i) => {
          const route = sends[i]!.route;
          return result.outcome === 'enqueued' ? [{ route, follows: result.follows ?? null, id: result.id, payload: sends[i]!.payload, readers: readers.get(route) ?? [] }] : [];
        }),
      );
    }
    return results;
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

  async held(origin: Origin): Promise<{ address: Share; connection: Share }> {
    const src = this.srcOf(origin.address);
    const none = { messages: 0, bytes: 0 };
    const count = async (column: 'src' | 'origin', value: string): Promise<Share> => {
      const rows = await this.calls.call(() => this.sql`SELECT count(*) AS messages, coalesce(sum(bytes), 0) AS bytes FROM relay_messages WHERE ${this.sql(column)} = ${value}`);
      return countRow.parse(rows[0]);
    };
    return { address: src === null ? none : await count('src', src), connection: await count('origin', this.originOf(origin)) };
  }

  /** The relay key every relay of this database presents, made by the first one. */
  async sharedRelayKey(): Promise<RelayKey> {
    const made = freshRelayKey();
    const value = JSON.stringify({ seed: encodeBase64url(made.signingKey.seed), key: made.key });
    const text = await this.calls.call(() => metaValue(this.sql, 'relay_key', value));
    const parsed = relayKeyMeta.safeParse(JSON.parse(text));
    const damaged = () => new InterlinkError('bad_key', "the relay key kept in the relay's database (relay_meta.relay_key) is damaged; clients expect that key, so it is not replaced: restore it, or delete the row to make a new key");
    if (!parsed.success) throw damaged();
    try {
      const signingKey = signingKeyFromSeed(decodeBase64url(parsed.data.seed, SEED_BYTES, 'seed'));
      if (encodeBase64url(signingKey.publicKey) !== parsed.data.key) throw damaged();
      return { signingKey, key: parsed.data.key };
    } catch {
      throw damaged();
    }
  }

  async release(): Promise<void> {
    if (this.released) return;
    this.flushNotices();
    this.released = true;
    // Other relays stop telling this one of their commits (left behind, the rows go once stale).
    await this.calls.call(() => this.sql`DELETE FROM relay_readers WHERE instance = ${this.instance}`).catch(() => undefined);
    await this.calls.call(() => this.sql`DELETE FROM relay_meta WHERE name = ${healthRow(this.instance)}`).catch(() => undefined);
    this.calls.close();
    this.replication.stop();
    for (const timer of this.timers) clearInterval(timer);
    await this.unlisten?.().catch(() => undefined);
    await this.sql.end({ timeout: 5 });
  }
}

/** The relay_meta row a relay process commits to say its database can store (health.ts). */
function healthRow(instance: string): string {
  return `health ${instance}`;
}

/** The value under `name` in relay_meta, storing `value` first if there is none (the first writer wins). */
async function metaValue(sql: Sql, name: string, value: string): Promise<string> {
  await sql`INSERT INTO relay_meta (name, value) VALUES (${name}, ${value}) ON CONFLICT (name) DO NOTHING`;
  const [row] = await sql`SELECT value FROM relay_meta WHERE name = ${name}`;
  return z.object({ value: z.string() }).parse(row).value;
}

/** Makes the tables (once per database, under an advisory lock) and reads what every relay shares. */
async function prepare(sql: Sql, now: number): Promise<{ schema: string; sourceKey: Buffer }> {
  const schema = await sql.begin(async (tx) => {
    const made = await createRelayTables(tx);
    // Ids continue from the clock (in microseconds) when it is ahead, as the embedded store's
    // do: a database recreated empty behind the same relays never reissues an id a client may
    // still hold. Only ever forward, and far ahead of ids other relays take meanwhile.
    const micros = Math.floor(now) * 1000;
    await tx`SELECT setval('relay_ids', ${micros}) WHERE (SELECT last_value FROM relay_ids) < ${micros}`;
    return made;
  });
  const key = Buffer.from(await metaValue(sql, 'source_key', encodeBase64url(randomBytes(SOURCE_KEY_BYTES))), 'base64url');
  if (key.length !== SOURCE_KEY_BYTES) throw new InterlinkError('storage', "relay_meta.source_key in the relay's database is not 32 bytes of base64url");
  return { schema, sourceKey: key };
}
