/**
 * Announcements stored in batches (postgres/roster.ts). Each session announces every 30 s
 * and at once after each connect, so a relay that restarts under 18,000 sessions hears
 * 18,000 announcements within seconds: one upsert each kept the database's connections busy
 * past the relay's 2 s health deadline, the relay took its database for down, closed every
 * connection — and the sessions reconnected and announced again. Gathered here, one
 * statement stores up to ROSTER_BATCH rows, and only one statement is under way at a time,
 * so roster writes take one of the database's connections however many sessions announce.
 *
 * Within one batch the newest word per route is written (two words of one route in one
 * statement would be an error); the others are answered as older, which they are.
 */

/** Rows one statement stores at most. */
export const ROSTER_BATCH = 500;

export interface RosterRow {
  route: string;
  ts: number;
  body: string;
  bytes: number;
  heardAt: number;
}

interface Waiting extends RosterRow {
  resolve(stored: boolean): void;
  reject(err: unknown): void;
}

export class RosterWrites {
  private waiting: Waiting[] = [];
  private writing = false;

  /** `write` stores the rows in one statement and returns the routes it stored (not older than what the table held). */
  constructor(private readonly write: (rows: readonly RosterRow[]) => Promise<ReadonlySet<string>>) {}

  /** Resolves with whether the row was stored; rejects when its statement failed. */
  add(row: RosterRow): Promise<boolean> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ ...row, resolve, reject });
      if (this.writing) return;
      this.writing = true;
      // The announcements of this turn of the event loop go together.
      setImmediate(() => void this.drain());
    });
  }

  private async drain(): Promise<void> {
    while (this.waiting.length > 0) {
      const batch = this.waiting.splice(0, ROSTER_BATCH);
      const newest = new Map<string, Waiting>();
      for (const row of batch) {
        const kept = newest.get(row.route);
        if (kept === undefined || row.ts >= kept.ts) newest.set(row.route, row);
      }
      try {
        const stored = await this.write([...newest.values()].map(({ route, ts, body, bytes, heardAt }) => ({ route, ts, body, bytes, heardAt })));
        for (const row of batch) row.resolve(newest.get(row.route) === row && stored.has(row.route));
      } catch (err) {
        for (const row of batch) row.reject(err);
      }
    }
    this.writing = false;
  }
}
