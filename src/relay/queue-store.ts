/**
 * The storage seam of the relay (DESIGN.md "The relay": "Where the queues live"): what the
 * frame handlers (`dispatch.ts`) need from wherever the queues and the roster are kept.
 * Two kinds implement it:
 * - `RelayStorage` (`storage.ts`): the queues of one relay process, in memory or in a
 *   journal under `--db`, with its roster in memory (`roster.ts`);
 * - `PostgresStore` (`postgres/store.ts`): queues and roster in a PostgreSQL database
 *   that several relay processes share, so any of them serves any route.
 *
 * Every store keeps the same promises: an enqueue resolves `enqueued` only once the message
 * is durably stored (in memory: applied); a route's messages are read in id order, and a
 * reader that read up to an id never misses a later-committed message below it; an
 * acknowledgement deletes and may be repeated; a bound refuses (`queue_full`) and never
 * drops; expiry removes by age.
 */
import type { RosterQuery } from './roster-index.js';
import type { AnnounceOutcome, GoodbyeOutcome, RosterEntry } from './roster.js';
import type { EnqueueResult, QueuedMessage } from './queues.js';
import type { QueueLimits, Share } from './limits.js';

/** Who sent a message, as the connection knows it. */
export interface Origin {
  /** the remote address of the connection, if the socket still had one */
  address: string | undefined;
  /**
   * Whose share a send counts against besides its address's (`--max-per-connection`): the
   * key the connection proved (`key:<key>`), or, while it proved none the relay gives a
   * share of its own, its network (`net:<network>`), which every such connection of that
   * network shares (sender-keys.ts). Reconnecting does not renew either.
   */
  connection: string;
}

export interface QueueStats {
  routes: number;
  messages: number;
  bytes: number;
}

/** What the relay learns from a shared store about work done by other relay processes. */
export interface StoreEvents {
  /** Messages were committed to `route` (possibly by another relay process). */
  arrived(route: string): void;
  /**
   * This message was committed to `route`, and `follows` was the route's newest id queued
   * before it (null: none was): every reader that was sent up to that id may be sent it
   * without a read.
   */
  committed(route: string, message: { id: number; payload: string }, follows: number | null): void;
  /** Arrivals may have been missed (the store reconnected): look at every route again. */
  resync(): void;
}

export interface QueueStore {
  readonly kind: 'memory' | 'journal' | 'postgres';
  readonly limits: QueueLimits;
  /** Stores the message; `enqueued` only after it is durably committed, with the id it is delivered and acknowledged by. */
  enqueue(route: string, payload: string, origin: Origin): Promise<EnqueueResult>;
  /**
   * Up to `limit` committed messages of `route` with id above `after`, in id order. A
   * store that holds its queues in this process answers at once (an array).
   */
  read(route: string, after: number, limit: number): QueuedMessage[] | Promise<QueuedMessage[]>;
  /** Deletes these of the route's messages; ids not queued are ignored. Resolves with how many went. */
  acknowledge(route: string, ids: readonly number[]): Promise<number>;
  /** Drops every message accepted more than `maxAgeMs` ago; resolves with how many went. */
  expire(maxAgeMs: number): Promise<number>;
  /** What a sender holds queued, by its address and by its connection (for the refusal's sentence). */
  held(origin: Origin): { address: Share; connection: Share } | Promise<{ address: Share; connection: Share }>;
  /** What is queued now (a shared store: as of its last count, a few seconds old at most). */
  stats(): QueueStats;
  /** Counts again what `stats` says (a store in this process always knows). */
  refresh(): Promise<void>;
  /** Tells `events` about arrivals from other relay processes (a store no other process writes never calls it). */
  subscribe(events: StoreEvents): void;
  /**
   * This relay process has a reader of `route` now (a shared store: other relay processes
   * then tell it of their commits to the route). The reader's first read waits for it;
   * it never fails (a store that could not note it looks again later).
   */
  watch?(route: string): Promise<void>;
  /** No reader of `route` is left in this relay process. */
  unwatch?(route: string): void;
  /** The connection closed: what the store kept for it alone can go (its queued messages stay). */
  closed?(origin: Origin): void;
  /**
   * A store whose database is elsewhere: `down` runs each time it is found unable to
   * commit (with why, as a sentence), `back` once it commits again.
   */
  onOutage?(down: (why: string) => void, back: () => void): void;
  /** After the last commit settled. */
  release(): Promise<void>;
}

/** The presence roster as the relay serves it: kept in memory (`roster.ts`) or shared (`postgres/roster.ts`). */
export interface RosterStore {
  announce(data: unknown): AnnounceOutcome | Promise<AnnounceOutcome>;
  goodbye(data: unknown): GoodbyeOutcome | Promise<GoodbyeOutcome>;
  /** The live entries a query finds (roster-index.ts): each key's freshest first. */
  query(query: RosterQuery): RosterEntry[];
  /** Changes whenever the entries do. */
  readonly version: number;
}
