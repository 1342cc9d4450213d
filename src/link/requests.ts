/**
 * Requests one connection put to its relay and awaits the answer to, by ref: sends
 * (sends.ts) and roster requests. Each has a deadline; all of them belong to the
 * connection they were written on, so when it drops every one is answered at once
 * (`failAll`): its answer would have come on the connection that is gone.
 */
import type { ClientFrame } from '../wire/frames.js';

/** What a request needs of its connection. */
export interface RequestChannel {
  /** Open, and the relay proved a key we trust: nothing is sent to a relay before that. */
  connected(): boolean;
  write(frame: ClientFrame): void;
}

interface Pending<T> {
  resolve: (value: T) => void;
  timer: NodeJS.Timeout;
}

/** Requests of one kind awaiting their answer. */
export class RequestTable<T> {
  private readonly pending = new Map<string, Pending<T>>();

  constructor(
    private readonly channel: RequestChannel,
    private readonly timeoutMs: number,
  ) {}

  /**
   * Writes `frame` and resolves with the answer `settle` gives `ref`: `fail('disconnected')`
   * at once when the connection is not open, `fail('timeout')` at the deadline (after
   * `onTimeout`).
   */
  ask(ref: string, frame: ClientFrame, fail: (message: string) => T, onTimeout?: () => void): Promise<T> {
    return new Promise((resolve) => {
      if (!this.channel.connected()) return resolve(fail('disconnected'));
      const timer = setTimeout(() => {
        this.pending.delete(ref);
        onTimeout?.();
        resolve(fail('timeout'));
      }, this.timeoutMs);
      this.pending.set(ref, { resolve, timer });
      this.channel.write(frame);
    });
  }

  /** Whether the request `ref` still awaits its answer. */
  has(ref: string): boolean {
    return this.pending.has(ref);
  }

  settle(ref: string, value: T): void {
    const pending = this.pending.get(ref);
    if (pending === undefined) return;
    clearTimeout(pending.timer);
    this.pending.delete(ref);
    pending.resolve(value);
  }

  /** Answers every request with `value()`. */
  failAll(value: () => T): void {
    for (const [ref, pending] of this.pending) {
      clearTimeout(pending.timer);
      pending.resolve(value());
      this.pending.delete(ref);
    }
  }
}
