/**
 * Turns for one step of concurrent calls, in the order the calls began. `send_message`
 * signs in its turn, so the signed timestamps (and the outbox) follow the order in which
 * the calls reached the server, while the work before and after that step overlaps.
 */
export interface Turn {
  /** Resolves when every earlier turn is done. */
  ready: Promise<void>;
  /** Ends this turn; must be called exactly once, also when the call fails. */
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
