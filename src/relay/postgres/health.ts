/**
 * Whether the relay's database can commit now, and the calls made to it meanwhile
 * (docs/SCALING.md "Failover runbook"). The one question asked is a commit: a
 * row written and committed as every send is, so with a synchronous standby configured it
 * answers only once that standby has the commit too. A read would answer on a promoted
 * standby that still names a synchronous standby of its own, while every send waits for
 * that standby for as long as nobody clears the setting; a relay reading its health would
 * call such a database back and refuse again at each send's deadline, over and over.
 */
import { InterlinkError } from '../../errors.js';
import { log } from '../../log.js';
import { databaseError, guarded, isOutage, QUERY_DEADLINE_MS } from './database.js';

/** While the database is down, it is asked whether it is back this often. */
const PROBE_EVERY_MS = 1_000;
/** While it is up, it is asked this often whether it still commits. */
export const BEAT_EVERY_MS = 500;
/**
 * A commit that takes longer than this means the database is down for the relay: its
 * connections stall, or its primary waits for a synchronous standby that is not there. Its
 * sessions are better served by another relay of the database than held; a healthy commit
 * with a standby takes milliseconds.
 */
export const STALL_MS = 2_000;
/** A stall timer this late means the relay's own event loop was blocked meanwhile. */
const LOOP_LAG_MS = 250;

export interface HealthOptions {
  /** How long one call may take before the caller is refused. */
  deadlineMs?: number;
  /** How long a commit of the health row may take before the database counts as down. */
  stallMs?: number;
}

/** The sentence a refusal carries while commits do not come back in time. */
export function stallError(stallMs: number): InterlinkError {
  return new InterlinkError(
    'storage',
    `the relay's database did not commit within ${stallMs / 1000} s (its connections stall, or its primary waits for a synchronous standby that is not attached)`,
  );
}

/**
 * The relay's calls to its database. Each runs under the deadline (`guarded`). A beat
 * commits the relay's health row every half second, and at once when a call fails as an
 * outage would (no answer within the deadline, the connection lost, a standby, a
 * shutdown): only the health row decides, so one connection of the pool that failed — one
 * that was still looking for a primary through a failover when the promoted one answered
 * — refuses its own call and does not take the relay down. Once the beat finds the
 * database down (its commit failed, or no commit returned within `STALL_MS`), the calls
 * under way are answered with that reason at once (their
 * queries are left to finish: `guarded` says why), later calls are refused at once
 * instead of being queued in the driver, and a single probe commits the health row again
 * every second; the first commit ends the outage. So an outage of any length leaves at
 * most the calls that were under way and one probe waiting in the driver, senders hear the
 * reason within about two seconds, and the relay's listeners (`onDown`, `onBack`) hear of
 * it once each way.
 */
export class DatabaseCalls {
  private outage: InterlinkError | undefined;
  private downSince = 0;
  private probing = false;
  private beating = false;
  private probeTimer: NodeJS.Timeout | undefined;
  /** When a synchronous commit last returned (a batch of sends, the health row). */
  private lastCommitAt = 0;
  private beatTimer: NodeJS.Timeout | undefined;
  private closed = false;
  /** How to answer each call under way at once, should the database go down meanwhile. */
  private readonly underWay = new Set<(why: InterlinkError) => void>();
  private readonly downListeners: ((why: InterlinkError) => void)[] = [];
  private readonly backListeners: (() => void)[] = [];
  private readonly deadlineMs: number;
  private readonly stallMs: number;

  /** `commitHealth` writes and commits the health row; it resolves only once committed. */
  constructor(
    private readonly commitHealth: () => PromiseLike<unknown>,
    options: HealthOptions = {},
  ) {
    this.deadlineMs = options.deadlineMs ?? QUERY_DEADLINE_MS;
    this.stallMs = options.stallMs ?? STALL_MS;
  }

  /** Why the database is taken to be down, while it is. */
  get down(): InterlinkError | undefined {
    return this.outage;
  }

  /** `listener` runs each time the database is found down. */
  onDown(listener: (why: InterlinkError) => void): void {
    this.downListeners.push(listener);
  }

  /** `listener` runs each time the database commits again after an outage. */
  onBack(listener: () => void): void {
    this.backListeners.push(listener);
  }

  /** A synchronous commit returned: the database makes progress, however slowly. */
  committed(): void {
    this.lastCommitAt = performance.now();
  }

  /** Starts the beat: a commit of the health row every `everyMs`. */
  beat(everyMs = BEAT_EVERY_MS): void {
    this.beatTimer = setInterval(() => this.beatOnce(), everyMs);
    this.beatTimer.unref();
  }

  async call<T>(work: () => PromiseLike<T>): Promise<T> {
    if (this.outage !== undefined) throw this.outage;
    return new Promise<T>((resolve, reject) => {
      const cut = (why: InterlinkError) => reject(why);
      this.underWay.add(cut);
      guarded(work, this.deadlineMs)
        .then(resolve, (err: unknown) => {
          if (isOutage(err)) this.beatOnce();
          reject(err);
        })
        .finally(() => this.underWay.delete(cut));
    });
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.probeTimer);
    clearInterval(this.beatTimer);
  }

  /**
   * One beat at a time: a beat that stalls counts once, and the probe takes over. A beat
   * is stalled when no commit at all returned for `stallMs` while it waited: a database
   * that commits others' transactions slowly (a loaded disk) is slow, not down.
   */
  private beatOnce(): void {
    if (this.beating || this.outage !== undefined || this.closed) return;
    this.beating = true;
    // A beat found stalled is given up (its query is left to the driver): what it does later says nothing.
    let current = true;
    const giveUp = () => {
      current = false;
      this.beating = false;
    };
    let stalled: NodeJS.Timeout | undefined;
    const watch = (since: number) => {
      const due = since + this.stallMs;
      stalled = setTimeout(
        () =>
          // After the I/O of this turn: a commit's answer may be waiting there unread.
          setImmediate(() => {
            if (!current) return;
            if (this.lastCommitAt > since) return watch(this.lastCommitAt);
            // A timer that fired late tells of a busy event loop (a burst of frames to verify),
            // not of the database, whose answer had no turn to be read: a new window starts.
            if (performance.now() - due > LOOP_LAG_MS) return watch(performance.now());
            giveUp();
            this.wentDown(stallError(this.stallMs));
          }),
        Math.max(0, due - performance.now()),
      );
      stalled.unref();
    };
    watch(performance.now());
    Promise.resolve(this.commitHealth()).then(
      () => {
        if (!current) return;
        clearTimeout(stalled);
        giveUp();
        this.committed();
      },
      (err: unknown) => {
        if (!current) return;
        clearTimeout(stalled);
        giveUp();
        this.wentDown(databaseError(err));
      },
    );
  }

  private wentDown(why: InterlinkError): void {
    if (this.outage !== undefined || this.closed) return;
    this.outage = why;
    this.downSince = Date.now();
    log.warn('relay_db_down', { error: why.message, message: `${why.message}; sends are refused with this reason until the database commits again` });
    for (const cut of this.underWay) cut(why);
    this.underWay.clear();
    for (const listener of this.downListeners) listener(why);
    this.probe();
  }

  /**
   * One commit at a time, never abandoned: it ends the outage when it commits, or fails
   * and is made again. One that has not committed within `STALL_MS` changes the reason
   * given, once: a primary that answers but does not commit is named as such.
   */
  private probe(): void {
    if (this.probing || this.closed) return;
    this.probing = true;
    const waiting = setTimeout(() => {
      const why = stallError(this.stallMs);
      if (this.outage === undefined || this.outage.message === why.message) return;
      this.outage = why;
      log.warn('relay_db_not_committing', { error: why.message, down_ms: Date.now() - this.downSince });
    }, this.stallMs);
    waiting.unref();
    Promise.resolve(this.commitHealth()).then(
      () => {
        clearTimeout(waiting);
        this.probing = false;
        if (this.closed) return;
        const outage = this.outage;
        this.outage = undefined;
        if (outage !== undefined) log.warn('relay_db_back', { down_ms: Date.now() - this.downSince, message: "the relay's database commits again" });
        for (const listener of this.backListeners) listener();
      },
      () => {
        clearTimeout(waiting);
        this.probing = false;
        this.probeLater();
      },
    );
  }

  private probeLater(): void {
    if (this.closed) return;
    this.probeTimer = setTimeout(() => this.probe(), PROBE_EVERY_MS);
    this.probeTimer.unref();
  }
}
