/**
 * Turns for one step of concurrent calls, in the order the calls began, while the work
 * before and after that step overlaps. `send_message` signs in its turn, so the signed
 * timestamps (and the outbox) follow the order in which the calls reached the server;
 * inbound stores a relay's deliveries in the order the relay sent them.
 */
export interface Turn {
  /** Resolves when every earlier turn is done. */
  ready: Promise<void>;
  /** Ends this turn; must be called, also when the call fails (calls after the first do nothing). */
  done: () => void;
}

export class Turns {
  private tail: Promise<void> = Promise.resolve();

  /** Takes the next turn at once, synchronously, so the order is the order of calls. */
  take(): Turn {
    const ready = this.tail;
    let done!: () => void;
    const finished = new Promise<void>((resolve) => (done = resolve));
    // A call that fails before its turn ends early; later turns still wait for earlier ones.
    this.tail = ready.then(() => finished);
    return { ready, done };
  }
}
