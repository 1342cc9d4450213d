/**
 * How the relay processes of one database tell each other what they committed (DESIGN.md
 * "The relay": "Where the queues live"): the NOTIFY channels — one every relay of the
 * schema hears (roster changes), and one per relay process (commits to routes it reads,
 * readers.ts) — the notices this process gathers in a tick and sends at its end (one per
 * listener for all of the tick's commits, in notice.ts's format), and the notices it hears.
 * A notice is only news: a relay that misses one finds the same messages by reading the
 * store at the resync.
 */
import { createHmac } from 'node:crypto';
import { log } from '../../log.js';
import { databaseError, guarded, type Sql } from './database.js';
import type { DatabaseCalls } from './health.js';
import { formatNotices, parseNotice, type NoticedMessage } from './notice.js';

/** The channel of one schema, which every relay of it hears: relays on other schemas of the database do not wake each other. */
export function channelOf(schema: string): string {
  return `interlink_relay_${createHmac('sha256', 'interlink-relay-channel').update(schema).digest('hex').slice(0, 16)}`;
}

/** The channel of one relay process of the schema: notices of commits to routes it reads. */
export function instanceChannelOf(schema: string, instance: string): string {
  return `${channelOf(schema)}_${instance}`;
}

/** A committed message and the other relay processes that read its route. */
export interface TargetedMessage extends NoticedMessage {
  readers: readonly string[];
}

/** What this process hears on its channels. */
export interface Hearing {
  /** Messages were committed to `route` (read the store). */
  arrived(route: string): void;
  /** This message was committed to `route`, after the route's `follows`. */
  committed(route: string, message: NoticedMessage, follows: number | null): void;
  /** Another relay changed the roster entry of `route`. */
  rosterChanged(route: string): void;
  /** The listening connection (re)connected: notices may have been missed. */
  reconnected(): void;
}

interface PendingNews {
  /** Per relay process, per route it reads, the messages committed to it this tick. */
  readers: Map<string, Map<string, NoticedMessage[]>>;
  roster: Set<string>;
}

export class NoticeChannels {
  /** What the next notices tell: per relay process, the messages committed to the routes it reads; and roster entries. */
  private pendingNews: PendingNews | undefined;
  /** Tags notices, so that other relays send the messages they carry (notice.ts). */
  private readonly noticeKey: Buffer;
  /** The schema's channel, which every relay of it hears (roster changes, and relays of earlier releases). */
  private readonly channel: string;
  private unlisten: (() => Promise<void>) | undefined;
  private released = false;

  constructor(
    private readonly sql: Sql,
    private readonly calls: DatabaseCalls,
    private readonly instance: string,
    private readonly schema: string,
    sourceKey: Buffer,
  ) {
    this.channel = channelOf(schema);
    this.noticeKey = createHmac('sha256', sourceKey).update('interlink-relay-notice').digest();
  }

  /** Both channels are heard on the one listening connection, subscribed again together after each reconnect. */
  async listen(hearing: Hearing): Promise<void> {
    const own = await guarded(() => this.sql.listen(instanceChannelOf(this.schema, this.instance), (payload) => this.onNotice(payload, hearing)));
    const shared = await guarded(() =>
      this.sql.listen(
        this.channel,
        (payload) => this.onNotice(payload, hearing),
        // Called on every (re)connect of the listening connection: notices may have been missed.
        () => hearing.reconnected(),
      ),
    );
    this.unlisten = async () => {
      await Promise.allSettled([own.unlisten(), shared.unlisten()]);
    };
  }

  private onNotice(payload: string, hearing: Hearing): void {
    // This relay's own roster notices come back too: told already, they need no tag checked.
    if (payload.startsWith(`${this.instance}\n`)) return;
    const notice = parseNotice(payload, this.noticeKey);
    if (notice === undefined) return;
    for (const route of notice.queues) hearing.arrived(route);
    for (const message of notice.messages) hearing.committed(message.route, message, message.follows);
    for (const route of notice.roster) hearing.rosterChanged(route);
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
  announceCommitted(messages: readonly TargetedMessage[]): void {
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

  /** Sends what this tick gathered, and nothing after. */
  release(): void {
    if (this.released) return;
    this.flushNotices();
    this.released = true;
  }

  /** Stops listening. */
  async stop(): Promise<void> {
    await this.unlisten?.().catch(() => undefined);
  }
}
