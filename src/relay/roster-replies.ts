/**
 * Roster replies under the send budget (DESIGN.md "Bounded by construction"; docs/PROTOCOL.md
 * "Presence: announce, goodbye, roster"). A reply holds only what its query found
 * (roster-index.ts), at most MAX_QUERY_KEYS keys of MAX_SESSIONS_PER_KEY sessions and one
 * frame, but a peer that asks and never reads would still pile replies up in the relay's
 * memory. So:
 * - a connection gets a roster reply only while its send buffer is under the mark at which
 *   deliveries pause, and none of its earlier roster replies is still waiting there;
 * - the bytes of replies still waiting stay within one relay-wide budget;
 * - the same query asked again while the roster is unchanged, within a second, is answered
 *   with the text already made (a hundred connections asking for the same 256 keys cost
 *   one serialization, not a hundred).
 * Otherwise the request is refused `rate_limited`, and the client asks again later.
 */
import type { Connection } from './connection.js';
import { rosterEntriesText, rosterMessage } from './frame-text.js';
import type { RosterStore } from './queue-store.js';
import type { RosterQuery } from './roster-index.js';

/** Bytes of roster replies still waiting in send buffers, relay-wide. */
export const ROSTER_REPLY_BUDGET_BYTES = 64 * 1024 * 1024;
/** How long a reply's text is reused for the same query while the roster is unchanged (its `age_ms` may be this much too young). */
export const ROSTER_TEXT_REUSE_MS = 1_000;
/** Distinct queries whose text is kept at once. */
const REUSED_QUERIES = 64;

export class RosterReplies {
  /** The size of each connection's waiting roster reply. */
  private readonly waiting = new Map<Connection, number>();
  private heldBytes = 0;
  /** query → the text made for it, while the roster's version and the second last. */
  private readonly made = new Map<string, { version: number; at: number; text: string }>();

  constructor(
    private readonly roster: RosterStore,
    private readonly budgetBytes: number = ROSTER_REPLY_BUDGET_BYTES,
    private readonly now: () => number = Date.now,
  ) {}

  /** Sends what `query` finds, answering `ref`, to `conn`, or says why not. */
  reply(conn: Connection, ref: string, query: RosterQuery): string | undefined {
    if (this.waiting.has(conn)) return 'the previous roster reply to this connection has not been read yet; read it, then ask again';
    if (conn.blocked) return 'this connection has more than 1 MiB of unread replies; read them, then ask again';
    if (this.heldBytes >= this.budgetBytes) return 'the relay is busy sending rosters to connections that do not read them; ask again later';
    const text = this.textOf(query);
    const bytes = Buffer.byteLength(text, 'utf8');
    this.waiting.set(conn, bytes);
    this.heldBytes += bytes;
    // The send callback runs once the reply is written or the socket failed; Dispatcher.onClosed covers the rest.
    if (!conn.sendMessage(rosterMessage(ref, text), () => this.release(conn))) this.release(conn);
    return undefined;
  }

  private textOf(query: RosterQuery): string {
    const id = JSON.stringify([query.keys, query.fingerprints, query.name_bucket]);
    const now = this.now();
    const made = this.made.get(id);
    if (made !== undefined && made.version === this.roster.version && now - made.at >= 0 && now - made.at < ROSTER_TEXT_REUSE_MS) return made.text;
    const text = rosterEntriesText(this.roster.query(query));
    this.made.delete(id);
    this.made.set(id, { version: this.roster.version, at: now, text });
    if (this.made.size > REUSED_QUERIES) this.made.delete(this.made.keys().next().value!);
    return text;
  }

  /** The reply to `conn` left its send buffer, or `conn` closed: what it held no longer counts. */
  release(conn: Connection): void {
    const bytes = this.waiting.get(conn);
    if (bytes === undefined) return;
    this.waiting.delete(conn);
    this.heldBytes -= bytes;
  }
}
