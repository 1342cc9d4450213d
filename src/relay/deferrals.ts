/**
 * Deliveries a reader deferred (`defer`, docs/PROTOCOL.md "Delivery and acknowledgement"):
 * messages it cannot take now — its mailbox holds as much of that sender's mail as it
 * may — and that must not hold the route's delivery window meanwhile. Without this, a
 * sender with more messages refused than the window (256) holds the whole window, and
 * every other sender's mail to that route waits behind it until the reader reads the
 * first sender's.
 *
 * A deferred message leaves the connection's in-flight set and stays queued; once its
 * time is due it is delivered to that connection again (delivery.ts rewinds the
 * subscription's cursor to it). A connection that closes takes its deferrals with it: the
 * next connection of the route is sent every queued message anyway.
 */

import { MAX_DEFER_MS, MIN_DEFER_MS } from '../wire/frames.js';

/** Deferred messages one connection keeps per route; a defer beyond them leaves the rest in flight. */
export const MAX_DEFERRED = 1_024;

export class Deferrals {
  /** id → when it is delivered again. */
  private readonly due = new Map<number, number>();
  private timer: NodeJS.Timeout | undefined;

  get size(): number {
    return this.due.size;
  }

  /**
   * Takes those of `ids` that are in flight out of `inFlight`, to be delivered again `ms`
   * (clamped to MIN_DEFER_MS..MAX_DEFER_MS) from `now`; those deferred already are due
   * then instead (sooner or later). Returns how many it took or moved.
   */
  defer(inFlight: Set<number>, ids: readonly number[], ms: number, now: number): number {
    const at = now + Math.min(MAX_DEFER_MS, Math.max(MIN_DEFER_MS, ms));
    let taken = 0;
    for (const id of ids) {
      if (this.due.has(id)) this.due.set(id, at);
      else if (inFlight.has(id) && this.due.size < MAX_DEFERRED) {
        inFlight.delete(id);
        this.due.set(id, at);
      } else continue;
      taken++;
    }
    return taken;
  }

  /** Whether `id` waits: deferred, and not due yet. */
  waiting(id: number, now: number): boolean {
    const at = this.due.get(id);
    return at !== undefined && at > now;
  }

  /**
   * Forgets every deferral due by `now` (they may be delivered again) and returns the
   * lowest of their ids, where delivery must start again; undefined when none is due.
   */
  takeDue(now: number): number | undefined {
    let lowest: number | undefined;
    for (const [id, at] of this.due) {
      if (at > now) continue;
      this.due.delete(id);
      if (lowest === undefined || id < lowest) lowest = id;
    }
    return lowest;
  }

  /** Delivered again, or acknowledged: no longer deferred. */
  forget(id: number): void {
    this.due.delete(id);
  }

  /** Runs `wake` when the earliest deferral is due (one timer; a new defer moves it). */
  schedule(wake: () => void, now: number): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.due.size === 0) return;
    const next = Math.min(...this.due.values());
    this.timer = setTimeout(wake, Math.max(0, next - now));
    this.timer.unref();
  }

  clear(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.due.clear();
  }
}
