/**
 * Roster replies under the send budget (DESIGN.md "Bounded by construction"; docs/PROTOCOL.md
 * "Presence: announce, goodbye, roster"). A roster frame is up to about 1.2 MiB, and a peer
 * that asks for rosters and never reads them would otherwise pile copies up in the
 * relay's memory. So:
 * - a connection gets a roster reply only while its send buffer is under the mark at which
 *   deliveries pause, and none of its earlier roster replies is still waiting there;
 * - the entries are serialized once and sent as one shared Buffer (the reply is a message
 *   in three fragments around it), reused while the roster is unchanged for up to a second;
 * - the distinct entry Buffers held by replies still waiting stay within one relay-wide
 *   budget.
 * Otherwise the request is refused `rate_limited`, and the client asks again later.
 */
import type { Connection } from './connection.js';
import { rosterEntriesText, rosterMessage } from './frame-text.js';
import type { RosterStore } from './queue-store.js';

/** Bytes of roster entries that replies still waiting in send buffers may hold at once, relay-wide. */
export const ROSTER_REPLY_BUDGET_BYTES = 64 * 1024 * 1024;
/**
 * How long serialized entries are reused while the roster does not change: the `age_ms` in a
 * reply may be this much too young. Serializing a full roster (about 1 MiB) for every
 * request would let a flood of requests take the relay's CPU.
 */
export const ROSTER_TEXT_REUSE_MS = 1_000;

interface Serialized {
  version: number;
  builtAt: number;
  entries: Buffer;
}

export class RosterReplies {
  /** The entries each connection's waiting roster reply holds. */
  private readonly waiting = new Map<Connection, Buffer>();
  /** How many waiting replies hold each entries Buffer. */
  private readonly holders = new Map<Buffer, number>();
  private heldBytes = 0;
  private serialized: Serialized | undefined;

  constructor(
    private readonly roster: RosterStore,
    private readonly now: () => number,
    private readonly budgetBytes: number = ROSTER_REPLY_BUDGET_BYTES,
  ) {}

  /** Sends the roster answering `ref` to `conn`, or says why not. */
  reply(conn: Connection, ref: string): string | undefined {
    if (this.waiting.has(conn)) return 'the previous roster reply to this connection has not been read yet; read it, then ask again';
    if (conn.blocked) return 'this connection has more than 1 MiB of unread replies; read them, then ask again';
    const entries = this.entries();
    if (!this.holders.has(entries) && this.heldBytes + entries.length > this.budgetBytes) {
      return 'the relay is busy sending rosters to connections that do not read them; ask again later';
    }
    this.hold(conn, entries);
    // The send callback runs once the reply is written or the socket failed; Dispatcher.onClosed covers the rest.
    if (!conn.sendMessage(rosterMessage(ref, entries), () => this.release(conn))) this.release(conn);
    return undefined;
  }

  /** The reply to `conn` left its send buffer, or `conn` closed: what it held no longer counts. */
  release(conn: Connection): void {
    const entries = this.waiting.get(conn);
    if (entries === undefined) return;
    this.waiting.delete(conn);
    const left = this.holders.get(entries)! - 1;
    if (left > 0) {
      this.holders.set(entries, left);
    } else {
      this.holders.delete(entries);
      this.heldBytes -= entries.length;
    }
  }

  private hold(conn: Connection, entries: Buffer): void {
    this.waiting.set(conn, entries);
    const holders = this.holders.get(entries) ?? 0;
    if (holders === 0) this.heldBytes += entries.length;
    this.holders.set(entries, holders + 1);
  }

  private entries(): Buffer {
    const now = this.now();
    const last = this.serialized;
    if (last !== undefined && last.version === this.roster.version && now - last.builtAt >= 0 && now - last.builtAt < ROSTER_TEXT_REUSE_MS) {
      return last.entries;
    }
    const entries = Buffer.from(rosterEntriesText(this.roster.list()), 'utf8');
    this.serialized = { version: this.roster.version, builtAt: now, entries };
    return entries;
  }
}
