/**
 * The acknowledgements of one relay process on PostgreSQL: gathered into batches, and
 * kept until they are certainly on the standby too (DESIGN.md "The relay": "Where the
 * queues live").
 *
 * An acknowledgement commits with `synchronous_commit` off (schema.ts): it does not wait
 * for the standby. A primary lost just after may take it along, and the promoted standby
 * still queues the messages. Their reader's connection was past them and would never be
 * sent them again, so they would wait until its session restarted. Likewise an
 * acknowledgement whose commit failed in an outage. So each batch is kept until it is
 * known to be on the standby — a synchronous commit that started after it committed has
 * returned (its WAL follows the batch's, and the standby flushed up to it) — and every
 * batch kept is committed again once the database is back: removing messages already gone
 * changes nothing, and the readers' connections need not do anything.
 *
 * The guarantee: a batch is forgotten only once a synchronous commit confirmed it with no
 * break between the start of the batch's commit and the return of the confirming one. A
 * break (`lost`) is an outage found by the beat, or any connection of the pool closed:
 * PostgreSQL loses a commit only when its server stops (crashed, killed, shut down), which
 * closes the connections to it, or when its host is gone, which stalls them until the beat
 * finds the database down. A failover between two beats is seen by no call — the relay's
 * connections close while idle, and the next beat commits on the promoted standby at once —
 * so without the closes that beat confirmed what the old primary took along. Every batch
 * not confirmed so — committed before a break, or whose commit failed — is committed again:
 * all of them when the database is back from an outage, and otherwise after a beat that
 * committed (`retry`), while the database is up; retries that keep failing wait longer,
 * up to `MAX_RETRY_SKIP` beats.
 */
import { log } from '../../log.js';

/** Ids of acknowledgements kept for a redo at most; past it the oldest are forgotten (their messages are delivered again on the next connection). */
export const MAX_KEPT_IDS = 100_000;
/** Acknowledged ids one transaction removes at most. */
export const ACK_BATCH_IDS = 1_024;
/** Beats a retry lets pass at most while commits keep failing (about half a minute). */
export const MAX_RETRY_SKIP = 63;

export interface Acknowledgement {
  route: string;
  ids: readonly number[];
}

interface WaitingAck extends Acknowledgement {
  resolve(removed: number): void;
  reject(err: unknown): void;
}

/** Takes the first acknowledgements of `waiting`, within the bound (always at least one). */
export function takeAcks<T extends Acknowledgement>(waiting: T[]): T[] {
  let count = 0;
  let ids = 0;
  while (count < waiting.length && (count === 0 || ids + waiting[count]!.ids.length <= ACK_BATCH_IDS)) ids += waiting[count++]!.ids.length;
  return waiting.splice(0, count);
}

/** Where the commits stood when a synchronous commit started (`AckBatches.mark`). */
export interface AckMark {
  seq: number;
  breaks: number;
}

/** A batch committed without waiting for the standby, numbered in commit order. */
interface Unconfirmed {
  seq: number;
  /** The breaks counted when its commit started: a commit that returns after a later one confirms nothing of it. */
  breaks: number;
  acks: readonly Acknowledgement[];
}

export class AckBatches {
  private readonly waiting: WaitingAck[] = [];
  private acking = false;
  /** Batches committed, not yet known to be on the standby, oldest first. */
  private unconfirmed: Unconfirmed[] = [];
  /** Acknowledgements whose commit failed. */
  private failed: Acknowledgement[] = [];
  private committedSeq = 0;
  private kept = 0;
  /** Breaks so far (`lost`): a commit that returns after one may have run on another node. */
  private breaks = 0;
  /** Commits failed in a row, and the beats the next retry lets pass (`retry`). */
  private failures = 0;
  private skip = 0;

  /**
   * `commit` stores one batch in one transaction and says how many ids each removed;
   * `gatherMs` is how long the first acknowledgement of a batch waits for others.
   */
  constructor(
    private readonly commit: (acks: readonly Acknowledgement[]) => Promise<number[]>,
    private readonly gatherMs: number,
  ) {}

  /** Acknowledgements kept for a redo: failed, or not yet known to be on the standby. */
  get keptIds(): number {
    return this.kept;
  }

  /** Resolves with how many of `ids` were still queued. */
  acknowledge(route: string, ids: readonly number[]): Promise<number> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ route, ids, resolve, reject });
      if (this.acking) return;
      this.acking = true;
      setTimeout(() => void this.commitWaiting(), this.gatherMs);
    });
  }

  /** Taken before a synchronous commit starts, while the database is up; handed to `confirm` once it returned. */
  mark(): AckMark {
    return { seq: this.committedSeq, breaks: this.breaks };
  }

  /**
   * A synchronous commit that started at `mark` returned: every batch committed before it
   * is on the standby — unless a break came between the start of the batch's commit and
   * the return of this one (either may have gone to a promoted standby, which says nothing
   * of the old primary's commits).
   */
  confirm(mark: AckMark): void {
    if (mark.breaks !== this.breaks) return;
    this.unconfirmed = this.unconfirmed.filter((batch) => {
      if (batch.seq > mark.seq || batch.breaks !== mark.breaks) return true;
      this.forget(batch.acks);
      return false;
    });
  }

  /**
   * The database may have lost what it committed without waiting for the standby: it was
   * found down, or a connection to it closed. Nothing committed before is confirmed by a
   * later commit; it is committed again (`redo`, `retry`).
   */
  lost(): void {
    this.breaks++;
  }

  /** The database commits again after an outage: every batch kept is committed again. */
  redo(): void {
    const again = [...this.failed, ...this.unconfirmed.flatMap((batch) => batch.acks)];
    this.failed = [];
    this.unconfirmed = [];
    this.skip = 0;
    this.commitAgain(again);
  }

  /**
   * A beat committed while the database is up: the acknowledgements whose commit failed
   * and the batches committed before a break are committed again — a failover between two
   * beats, or a commit that failed while the beat did not, leaves no outage to end, and
   * the next `redo` may never come. At once the first time; while commits keep failing,
   * 1, 3, 7… beats are let pass first, `MAX_RETRY_SKIP` at most.
   */
  retry(): void {
    const stale = this.unconfirmed.filter((batch) => batch.breaks !== this.breaks);
    if (this.failed.length + stale.length === 0) return;
    if (this.skip > 0) {
      this.skip--;
      return;
    }
    const again = [...this.failed, ...stale.flatMap((batch) => batch.acks)];
    this.failed = [];
    this.unconfirmed = this.unconfirmed.filter((batch) => batch.breaks === this.breaks);
    this.commitAgain(again);
  }

  private commitAgain(again: readonly Acknowledgement[]): void {
    if (again.length === 0) return;
    this.forget(again);
    log.info('relay_acks_redone', { acknowledgements: again.length, ids: idsOf(again) });
    for (const ack of again) void this.acknowledge(ack.route, ack.ids).catch(() => undefined);
  }

  private async commitWaiting(): Promise<void> {
    while (this.waiting.length > 0) {
      const acks = takeAcks(this.waiting);
      const breaks = this.breaks;
      try {
        const removed = await this.commit(acks);
        this.failures = 0;
        this.skip = 0;
        this.keep(() => this.unconfirmed.push({ seq: ++this.committedSeq, breaks, acks: acks.map(plain) }), acks);
        acks.forEach((ack, i) => ack.resolve(removed[i]!));
      } catch (err) {
        this.failures++;
        this.skip = Math.min(MAX_RETRY_SKIP, 2 ** (this.failures - 1) - 1);
        this.keep(() => this.failed.push(...acks.map(plain)), acks);
        for (const ack of acks) ack.reject(err);
      }
    }
    this.acking = false;
  }

  private keep(add: () => void, acks: readonly Acknowledgement[]): void {
    add();
    this.kept += idsOf(acks);
    while (this.kept > MAX_KEPT_IDS && this.failed.length + this.unconfirmed.length > 0) {
      const oldest = this.failed.length > 0 ? [this.failed.shift()!] : this.unconfirmed.shift()!.acks;
      this.forget(oldest);
      log.warn('relay_acks_forgotten', { ids: idsOf(oldest), message: `more than ${MAX_KEPT_IDS} acknowledged ids wait for the database: the oldest are forgotten, and their messages are delivered again on their readers' next connection` });
    }
  }

  private forget(acks: readonly Acknowledgement[]): void {
    this.kept -= idsOf(acks);
  }
}

function plain(ack: Acknowledgement): Acknowledgement {
  return { route: ack.route, ids: ack.ids };
}

function idsOf(acks: readonly Acknowledgement[]): number {
  return acks.reduce((sum, ack) => sum + ack.ids.length, 0);
}
