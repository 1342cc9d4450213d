/**
 * Whether a relay cannot be reached now, and the two log lines of an outage. An outage
 * starts when a connection attempt fails (not when a connection drops: the first reconnect
 * may well succeed) and ends when one opens. Each is logged once at warning level, the
 * default, naming the relay and the error, however many retries the outage takes: a relay
 * that is not there is visible without being noisy.
 */
import { log } from '../log.js';

export class Outage {
  private current: { error: string; since: number } | undefined;

  constructor(
    private readonly url: string,
    /** False for a command that reports outages itself. */
    private readonly logs: boolean,
  ) {}

  /** Why the last connection attempt failed, while no connection opened since. */
  get error(): string | undefined {
    return this.current?.error;
  }

  /** When the outage began (epoch ms), while there is one. */
  get since(): number | undefined {
    return this.current?.since;
  }

  /** A failed connection attempt; true when it starts an outage (logged), false for the retries that follow. */
  failed(error: string): boolean {
    if (this.current !== undefined) return false;
    this.current = { error, since: Date.now() };
    if (this.logs) {
      const message = `relay ${this.url} does not answer (${error}); retrying in the background, and messages wait in the outbox meanwhile`;
      log.warn('relay_unreachable', { relay: this.url, error, message });
    }
    return true;
  }

  /** A connection opened: the outage, if any, is over. */
  recovered(): void {
    if (this.current === undefined) return;
    if (this.logs) log.warn('relay_reachable', { relay: this.url, message: `relay ${this.url} answers again`, outage_ms: Date.now() - this.current.since });
    this.current = undefined;
  }
}
