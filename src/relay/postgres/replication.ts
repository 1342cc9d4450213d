/**
 * What `accepted` means on this database now (docs/SCALING.md "Failover runbook", step 4):
 * with `synchronous_standby_names` set, a commit returns once a standby has it too; with it
 * empty — a promoted standby set up as the runbook says, until a new standby is named — a
 * commit is on the primary alone. The relay reads the setting and says when it changes,
 * so an operator sees that accepted messages are on one machine. (Which standbys are
 * attached needs the `pg_monitor` role to read; the setting needs none. A primary that
 * names a standby that is not attached does not commit, and the relay is down then:
 * health.ts.)
 */
import { z } from 'zod';
import { log } from '../../log.js';
import type { DatabaseCalls } from './health.js';
import { databaseError, type Sql } from './database.js';

/** How often the setting is read. */
const CHECK_EVERY_MS = 10_000;

export type Replication = 'synchronous' | 'single';

/** What the setting's value means for a commit (pure). */
export function replicationOf(synchronousStandbyNames: string): Replication {
  return synchronousStandbyNames.trim() === '' ? 'single' : 'synchronous';
}

const settingRow = z.object({ names: z.string() });

export class ReplicationWatch {
  private known: Replication | undefined;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly sql: Sql,
    private readonly calls: DatabaseCalls,
  ) {
    this.timer = setInterval(() => void this.check(), CHECK_EVERY_MS);
    this.timer.unref();
    calls.onBack(() => void this.check());
  }

  /** What the database said last; undefined before it was read. */
  get replication(): Replication | undefined {
    return this.known;
  }

  async check(): Promise<void> {
    try {
      const [row] = await this.calls.call(() => this.sql`SELECT current_setting('synchronous_standby_names') AS names`);
      this.note(replicationOf(settingRow.parse(row).names));
    } catch (err) {
      log.debug('relay_db_replication_unknown', { error: databaseError(err).message });
    }
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private note(replication: Replication): void {
    if (replication === this.known) return;
    const first = this.known === undefined;
    this.known = replication;
    if (replication === 'single') {
      log.warn('relay_db_unreplicated', {
        message: "the relay's database names no synchronous standby: a message is accepted once the primary alone has flushed it, and is lost with that machine until a standby is named (docs/SCALING.md, \"Failover runbook\", step 5)",
      });
    } else if (!first) {
      log.warn('relay_db_replicated', { message: "the relay's database names a synchronous standby again: a message is accepted once the standby has it too" });
    }
  }
}
