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
 * file can hide a session, never forge one. Writes are atomic and follow each change, one
 * at a time (a change during a write makes one more write); an announcement is answered
 * before it is on disk, so a crash loses at most the latest ones, which their sessions
 * send again when they reconnect. Goodbyes are not kept: after a restart, as before, a
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

export class RosterFile implements RosterStore {
  private writing: Promise<void> | undefined;
  private again = false;

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

  /** Waits for the write in progress (and the one after it, if a change came meanwhile). */
  async flush(): Promise<void> {
    while (this.writing !== undefined) await this.writing;
  }

  private save(): void {
    if (this.writing !== undefined) {
      this.again = true;
      return;
    }
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
