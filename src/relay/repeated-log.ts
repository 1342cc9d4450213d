/**
 * Failures that repeat for as long as an outage lasts (a send refused, a read failed, an
 * acknowledgement not stored), logged without flooding the relay's log: the first of each
 * event at once, in full; the ones after it only counted, and written as one
 * `relay_repeated` line per event every `everyMs` while they go on, and when the store
 * commits again (`summarize`). An event that stopped repeating is forgotten, so its next
 * occurrence is written in full again. One outage of a minute then writes a few lines per
 * event instead of one per frame (docs/OPERATING.md "Its log").
 */
import { log, type LogLevel } from '../log.js';

/** How often the counts of repeated events are written while they go on. */
export const REPEAT_SUMMARY_MS = 10_000;

export type LogWrite = (level: LogLevel, event: string, fields: Record<string, unknown>) => void;

interface Seen {
  level: LogLevel;
  /** Occurrences since the last line written for the event. */
  count: number;
  since: number;
}

const writeLog: LogWrite = (level, event, fields) => log[level](event, fields);

export class RepeatedEvents {
  private readonly seen = new Map<string, Seen>();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly now: () => number = Date.now,
    private readonly write: LogWrite = writeLog,
    everyMs = REPEAT_SUMMARY_MS,
  ) {
    this.timer = setInterval(() => this.summarize(), everyMs);
    this.timer.unref();
  }

  /** Writes the event if it is the first since it was last forgotten; counts it otherwise. */
  note(level: LogLevel, event: string, fields: Record<string, unknown>): void {
    const seen = this.seen.get(event);
    if (seen !== undefined) {
      seen.count++;
      return;
    }
    this.seen.set(event, { level, count: 0, since: this.now() });
    this.write(level, event, fields);
  }

  /** One line per event that repeated since its last line; events that did not are forgotten. */
  summarize(): void {
    const now = this.now();
    for (const [event, seen] of this.seen) {
      if (seen.count === 0) {
        this.seen.delete(event);
        continue;
      }
      const seconds = Math.round((now - seen.since) / 1000);
      this.write(seen.level, 'relay_repeated', { of: event, count: seen.count, since_ms: now - seen.since, message: `${event} ${seen.count} more times in ${seconds} s` });
      seen.count = 0;
      seen.since = now;
    }
  }

  stop(): void {
    clearInterval(this.timer);
  }
}
