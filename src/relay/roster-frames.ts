/**
 * The roster frames (docs/PROTOCOL.md "Relay frames"): `announce` and `goodbye` store a
 * signed word in the roster (roster.ts, or shared: postgres/roster.ts), and `roster` asks
 * for its entries, answered under the send budget (roster-replies.ts) and after the
 * connection's own words still being stored.
 */
import { messageOf } from '../errors.js';
import type { Connection } from './connection.js';
import type { RosterStore } from './queue-store.js';
import { RosterReplies } from './roster-replies.js';
import { namesAnything, type RosterQuery } from './roster-index.js';
import type { AnnounceOutcome, GoodbyeOutcome } from './roster.js';
import type { RepeatedEvents } from './repeated-log.js';

export class RosterFrames {
  private readonly rosterReplies: RosterReplies;
  /** Each connection's last announcement or goodbye still being stored (a shared roster only). */
  private readonly rosterWrites = new WeakMap<Connection, Promise<void>>();

  /** `track` keeps work under way until the relay has settled (dispatch.ts); `failures` logs store failures with counts. */
  constructor(
    private readonly roster: RosterStore,
    now: () => number,
    private readonly track: (work: Promise<unknown>) => void,
    private readonly failures: RepeatedEvents,
  ) {
    this.rosterReplies = new RosterReplies(roster, undefined, now);
  }

  /**
   * A roster reply counts against the send budget like deliveries (roster-replies.ts). It
   * follows the connection's own announcements and goodbyes still being stored, so a
   * client reads its own word.
   */
  onRoster(conn: Connection, ref: string, query: RosterQuery): void {
    if (!namesAnything(query)) {
      return conn.refuse(ref, 'bad_frame', 'this relay answers roster queries that name keys, fingerprints or a name bucket (relay protocol revision 4), never the whole roster: upgrade interlink-mcp');
    }
    const reply = () => {
      if (!conn.open) return;
      const refusal = this.rosterReplies.reply(conn, ref, query);
      if (refusal !== undefined) conn.refuse(ref, 'rate_limited', refusal);
    };
    const writing = this.rosterWrites.get(conn);
    if (writing === undefined) return reply();
    this.track(writing.then(reply));
  }

  onAnnounce(conn: Connection, announcement: unknown): void {
    this.afterRoster(conn, this.roster.announce(announcement), 'the announcement');
  }

  onGoodbye(conn: Connection, goodbye: unknown): void {
    this.afterRoster(conn, this.roster.goodbye(goodbye), 'the goodbye');
  }

  /** The connection closed: a reply it still waited to send goes with it. */
  closed(conn: Connection): void {
    this.rosterReplies.release(conn);
  }

  private afterRoster(conn: Connection, outcome: AnnounceOutcome | GoodbyeOutcome | Promise<AnnounceOutcome | GoodbyeOutcome>, what: string): void {
    const answer = (result: AnnounceOutcome | GoodbyeOutcome) => {
      if (result === 'invalid') conn.refuse(undefined, 'bad_frame', `${what} is malformed or its signature does not verify`);
    };
    if (typeof outcome === 'string') return answer(outcome);
    const written = outcome.then(answer, (err: unknown) => {
      this.failures.note('error', 'relay_roster_failed', { error: messageOf(err) });
      conn.refuse(undefined, 'storage', `the relay could not store ${what} (${messageOf(err)}); send it again`);
    });
    const earlier = this.rosterWrites.get(conn);
    const all = earlier === undefined ? written : Promise.all([earlier, written]).then(() => undefined);
    this.rosterWrites.set(conn, all);
    void all.finally(() => {
      if (this.rosterWrites.get(conn) === all) this.rosterWrites.delete(conn);
    });
    this.track(written);
  }
}
