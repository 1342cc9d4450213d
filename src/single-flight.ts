/**
 * The single-flight pass loop of the background loops (outbound, the pairing control
 * outbox, the notifier): one pass at a time, never two at once. A kick while a pass runs
 * asks for exactly one more pass after it, since the running pass may have read its
 * input before the change that caused the kick; any number of such kicks share that one
 * pass. A failed pass is reported and later kicks run as usual. After `stop()` no pass
 * starts. Dependency-free: each loop says how its failures are logged.
 *
 * Between kicks the loop wakes itself: a pass may say how soon the next one is due
 * (work is waiting: a message not yet accepted, a notice whose backoff ends), and
 * otherwise the next comes after the idle interval. An idle session then reads its
 * stores every few seconds instead of every second, which was most of what it cost.
 */
/** What a pass returns: milliseconds until the next pass is due, or nothing for the idle interval. */
export type NextPass = number | undefined | void;

export class SingleFlight {
  private running: Promise<void> | undefined;
  /** The one pass asked for while another runs; settled with it once it has run. */
  private queued: { promise: Promise<void>; resolve: (pass: Promise<void>) => void } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** Until start(): passes run only when kicked. */
  private idleMs: number | undefined;

  constructor(
    private readonly pass: () => Promise<NextPass>,
    private readonly onError: (err: unknown) => void,
  ) {}

  /**
   * Kicks now, and after every pass again when that pass says (never later than
   * `idleMs`); the timer does not keep the process alive.
   */
  start(idleMs: number): void {
    this.idleMs = idleMs;
    void this.kick();
  }

  /** Runs a pass now, or once after the one under way; resolves (never rejects) when that pass is done. */
  kick(): Promise<void> {
    if (this.stopped) return Promise.resolve();
    if (this.running === undefined) return this.run();
    if (this.queued === undefined) {
      let resolve!: (pass: Promise<void>) => void;
      const promise = new Promise<void>((r) => (resolve = r));
      this.queued = { promise, resolve };
    }
    return this.queued.promise;
  }

  /** Resolves when the pass under way, if any, is done. */
  async settled(): Promise<void> {
    await this.running;
  }

  /** No pass starts after this (a pending kick resolves without one); resolves when the pass under way is done. */
  stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    return this.settled();
  }

  private run(): Promise<void> {
    // The executor turns a pass that throws before its first await into a rejection too.
    const running = new Promise<NextPass>((resolve) => resolve(this.pass()))
      .then(
        (next) => this.schedule(next),
        (err: unknown) => {
          this.onError(err);
          this.schedule(undefined);
        },
      )
      .finally(() => {
        this.running = undefined;
        const queued = this.queued;
        this.queued = undefined;
        // Started here, before anything else can run: no gap in which a second pass could start.
        queued?.resolve(this.kick());
      });
    this.running = running;
    return running;
  }

  /** The next self-kick: when the pass asked for it, at the latest after the idle interval. */
  private schedule(next: NextPass): void {
    clearTimeout(this.timer);
    if (this.stopped || this.idleMs === undefined) return;
    const delay = Math.max(0, Math.min(typeof next === 'number' ? next : this.idleMs, this.idleMs));
    this.timer = setTimeout(() => void this.kick(), delay);
    this.timer.unref();
  }
}
