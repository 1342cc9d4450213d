/**
 * Roster replies under the send budget (DESIGN.md "Bounded by construction"; docs/PROTOCOL.md
 * "Presence: announce, goodbye, roster"). A roster frame is up to about 1.2 MiB, and a peer
 * that asks for rosters and never reads them would otherwise pile copies up in the
 * relay's memory. So a connection gets a roster reply only when its send buffer holds no
 * more than a delivery would be paused at, and none of its earlier roster replies is still
 * waiting there; and all roster replies waiting in send buffers stay within one relay-wide
 * budget. Otherwise the request is refused `rate_limited`, and the client asks again later.
 */
import type { Connection } from './connection.js';

/** Roster reply bytes the whole relay lets wait in send buffers at once. */
export const ROSTER_REPLY_BUDGET_BYTES = 64 * 1024 * 1024;

export class RosterReplies {
  /** The connections with a roster reply still in their send buffer, and its size. */
  private readonly waiting = new Map<Connection, number>();
  private waitingBytes = 0;

  constructor(private readonly budgetBytes: number = ROSTER_REPLY_BUDGET_BYTES) {}

  /** Why `conn` may not have a roster now, or undefined if it may; checked before the reply is built. */
  refusal(conn: Connection): string | undefined {
    if (this.waiting.has(conn)) return 'the previous roster reply to this connection has not been read yet; read it, then ask again';
    if (conn.blocked) return 'this connection has more than 1 MiB of unread replies; read them, then ask again';
    return undefined;
  }

  /** Sends `text` to `conn` if it fits the relay-wide budget, counting it until it leaves the send buffer. */
  send(conn: Connection, text: string): string | undefined {
    const bytes = Buffer.byteLength(text, 'utf8');
    if (this.waitingBytes + bytes > this.budgetBytes) return 'the relay is busy sending rosters to other connections; ask again later';
    this.waiting.set(conn, bytes);
    this.waitingBytes += bytes;
    // The send callback runs once the text is written or the socket failed; `closed` covers the rest.
    if (!conn.sendText(text, () => this.release(conn))) this.release(conn);
    return undefined;
  }

  /** The reply left `conn`'s send buffer, or `conn` closed: its bytes no longer count. */
  release(conn: Connection): void {
    const bytes = this.waiting.get(conn);
    if (bytes === undefined) return;
    this.waiting.delete(conn);
    this.waitingBytes -= bytes;
  }
}
