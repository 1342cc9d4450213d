/**
 * The embedded relay's roster kept across restarts under `--db` (`<db>/roster.json`).
 * The roster itself lives in memory (roster.ts); without this file a relay restart
 * forgot every announcement, and an identity whose only announcement was left by
 * `interlink-mcp pair list` (no process of it running) could not be asked to pair until
 * its person happened to run something again (issue 37). On PostgreSQL the roster is in
 * the database already (postgres/roster.ts).
 *
 * What the file holds is only signed announcements and when each was received: every one
 * is verified again when read (and by every reader of the roster), so a damaged or edited
 * file can hide a session, never forge one. Writes are atomic, one at a time, and follow a
 * change after a pause that grows with the roster (a millisecond per entry, at most
 * MAX_WRITE_PAUSE_MS), so a small roster is on disk at once: every session renews its announcement every 30 s, so under
 * thousands of sessions the roster changes all the time, and writing the whole file after
 * each change kept the disk busy beside the queues' fsyncs (9,000 sessions: 8.6 MB/s while
 * idle, measured by `npm run capacity`). An announcement is answered before it is on
 * disk, so a crash loses at most the last few seconds of them, which their sessions send
 * again when they reconnect. Goodbyes are not kept: after a restart, as before, a
 * replay of an older announcement of an ended session can show it until it expires.
 */
import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import { messageOf } from '../errors.js';
import { log } from '../log.js';
import { writeFileAtomic } from '../store/atomic.js';
import type { RosterQuery } from './roster-index.js';
import type { AnnounceOutcome, GoodbyeOutcome, Roster, RosterEntry } from './roster.js';
import type { RosterStore } from './queue-store.js';

const fileSchema = z.object({
  v: z.literal(1),
  entries: z.array(z.object({ announcement: z.unknown(), received_at: z.number().int() })),
});

/** The pause between writes while the roster keeps changing: per entry, and at most. */
export const WRITE_PAUSE_PER_ENTRY_MS = 1;
export const MAX_WRITE_PAUSE_MS = 10_000;

export class RosterFile implements RosterStore {
  private writing: Promise<void> | undefined;
  private again = false;
  /** A write waiting for its pause to pass since the last one. */
  private due: NodeJS.Timeout | undefined;
  private lastWriteAt = Number.NEGATIVE_INFINITY;

  private constructor(
    private readonly roster: Roster,
    private readonly path: string,
  ) {}

  /** The roster with what `path` held (verified again); a missing or unreadable file is an empty roster, logged. */
  static async open(roster: Roster, path: string): Promise<RosterFile> {
    let text: string | undefined;
    try {
      text = await readFile(path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') log.warn('relay_roster_unreadable', { file: path, error: messageOf(err) });
    }
    if (text !== undefined) {
      let parsed: z.infer<typeof fileSchema> | undefined;
      try {
        parsed = fileSchema.parse(JSON.parse(text));
      } catch (err) {
        log.warn('relay_roster_unreadable', { file: path, error: messageOf(err), message: 'the roster starts empty; sessions announce again when they connect' });
      }
      for (const entry of parsed?.entries ?? []) roster.restore(entry.announcement, entry.received_at);
    }
    return new RosterFile(roster, path);
  }

  get version(): number {
    return this.roster.version;
  }

  announce(data: unknown): AnnounceOutcome {
    const outcome = this.roster.announce(data);
    if (outcome === 'stored') this.save();
    return outcome;
  }

  goodbye(data: unknown): GoodbyeOutcome {
    const outcome = this.roster.goodbye(data);
    if (outcome === 'removed') this.save();
    return outcome;
  }

  query(query: RosterQuery): RosterEntry[] {
    return this.roster.query(query);
  }

  /** Every live entry (what a restart finds again; never sent to a reader). */
  list(): RosterEntry[] {
    return this.roster.list();
  }

  /** Writes what is waiting now, and waits for the write in progress (and the one after it, if a change came meanwhile). */
  async flush(): Promise<void> {
    for (;;) {
      if (this.due !== undefined) {
        clearTimeout(this.due);
        this.due = undefined;
        this.writeNow();
      }
      if (this.writing === undefined) return;
      await this.writing;
    }
  }

  private save(): void {
    if (this.writing !== undefined) {
      this.again = true;
      return;
    }
    if (this.due !== undefined) return;
    const pause = Math.min(MAX_WRITE_PAUSE_MS, this.roster.size * WRITE_PAUSE_PER_ENTRY_MS);
    const wait = this.lastWriteAt + pause - performance.now();
    if (wait <= 0) return this.writeNow();
    this.due = setTimeout(() => {
      this.due = undefined;
      this.writeNow();
    }, wait);
    this.due.unref();
  }

  private writeNow(): void {
    this.lastWriteAt = performance.now();
    this.writing = this.write().finally(() => {
      this.writing = undefined;
      if (this.again) {
        this.again = false;
        this.save();
      }
    });
  }

  private async write(): Promise<void> {
    const text = JSON.stringify({ v: 1, entries: this.roster.heard() });
    // A failed write leaves the previous file: presence is rebuilt by reconnecting sessions.
    await writeFileAtomic(this.path, text).catch((err: unknown) => log.warn('relay_roster_unwritten', { file: this.path, error: messageOf(err) }));
  }
}
