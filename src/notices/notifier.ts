/**
 * Wakes the host when attention-worthy messages are unread, on the schedule of
 * schedule.ts. One notifier per session wakes the host: it holds the session's notifier
 * lock (`<mailbox>.notifier.lock`); other MCP processes of the session keep trying to
 * take it, so one of them carries on if the holder dies.
 *
 * A pass: read the reservation and the unread messages, decide; to notify, first commit
 * the reservation (so a crash cannot cause a notice storm), then hand the notice to the
 * host sink, then record what happened on the messages it covered. A startup pass and
 * reconciliation passes (when a backoff ends, and every 5 s besides) recover lost notices
 * and interrupted handoffs.
 */
import { randomBytes } from 'node:crypto';
import { isInterlinkError, messageOf } from '../errors.js';
import { log } from '../log.js';
import type { NoticeOutcome } from '../mailbox/format.js';
import type { Mailbox } from '../mailbox/mailbox.js';
import { SingleFlight } from '../single-flight.js';
import { holdFileLock } from '../store/lock.js';
import { renderNotice, type Notice } from './notice.js';
import { refusalSentence } from '../mailbox/refusals.js';
import { decideNotice } from './schedule.js';
import { crashPoint } from '../store/crash-point.js';

/** Where notices go: the Claude inbox, a Claude channel, or `codex queue`. */
export interface NoticeSink {
  readonly name: string;
  /** Hands the notice over; returns the state to record, or throws (recorded as delivery_failed). */
  deliver(notice: Notice, text: string): Promise<NoticeOutcome>;
  /** Cuts a handoff under way short (shutdown); its outcome is then recorded as it stands. */
  close?(): void;
}

export interface NotifierOptions {
  mailbox: Mailbox;
  /** The identity whose mailbox this is (named in each notice, with `session`). */
  identity: string;
  session: string;
  sink: NoticeSink;
  /** A short name for a sender key (petname, or a fingerprint). */
  senderName: (key: string) => Promise<string>;
  intervalMs?: number;
  now?: () => number;
}

/** After a notice, the next pass comes this soon, to record what follows the handoff. */
const RECONCILE_MS = 1_000;
/**
 * With nothing due, a pass this often still takes over a dead holder's lock and sees
 * what another process of the session stored; stores and acknowledgements in this process
 * kick a pass at once, and a backoff that ends schedules one for that moment.
 */
const IDLE_PASS_MS = 5_000;

export class Notifier {
  private release: (() => Promise<void>) | undefined;
  private readonly loop = new SingleFlight(
    () => this.pass(),
    (err) => log.warn('notifier_pass_failed', { session: this.options.session, error: messageOf(err) }),
  );

  constructor(private readonly options: NotifierOptions) {}

  start(): void {
    this.loop.start(this.options.intervalMs ?? IDLE_PASS_MS);
  }

  /** Runs a pass soon (after a store or an acknowledgement). Passes never overlap. */
  kick(): void {
    void this.reconcile();
  }

  /** Runs a pass now, or after the one under way; resolves when it is done. */
  reconcile(): Promise<void> {
    return this.loop.kick();
  }

  async stop(): Promise<void> {
    const stopping = this.loop.stop();
    this.options.sink.close?.();
    await stopping;
    await this.release?.();
    this.release = undefined;
  }

  private async holdsLock(): Promise<boolean> {
    if (this.release) return true;
    try {
      this.release = await holdFileLock(`${this.options.mailbox.path}.notifier`, 0);
      return true;
    } catch (err) {
      if (isInterlinkError(err, 'busy')) return false;
      throw err;
    }
  }

  /** Returns when the next pass is due: the end of a backoff, soon after a notice, else the idle interval. */
  private async pass(): Promise<number | undefined> {
    if (!(await this.holdsLock())) return undefined;
    const { mailbox, sink, session } = this.options;
    const { reservation, attention, refusals } = await mailbox.noticeState();
    // Taken after the read: every message the notice covers was stored by `now`, which
    // is what lets a listener judge the notice stale later (Mailbox.oldestUnreadAttention).
    const now = (this.options.now ?? Date.now)();
    const decision = decideNotice({ now, attention, reservation });
    if (decision.action !== 'reserve') return decision.until === undefined ? undefined : decision.until - now;
    const id = `n-${randomBytes(8).toString('hex')}`;
    await mailbox.reserveNotice(id, decision.attempt, decision.covered);
    crashPoint('notices.after_reserve');
    const senderKeys = [...new Set(decision.covered.map((receipt) => receipt.sender))];
    const senders = await Promise.all(senderKeys.map((key) => this.options.senderName(key)));
    // The bounds refusing mail are named in the notice, so the agent learns why a peer went quiet.
    const refused = await Promise.all(refusals.map(async (r) => refusalSentence(r, await this.options.senderName(r.sender), mailbox.limits)));
    const notice: Notice = {
      notification_id: id,
      session,
      count: decision.covered.length,
      senders,
      at: now,
      mailbox: { identity: this.options.identity, session },
      ...(refused.length > 0 && { refusals: refused }),
    };
    let outcome: NoticeOutcome;
    try {
      outcome = await sink.deliver(notice, renderNotice(notice));
    } catch (err) {
      log.warn('notice_failed', { sink: sink.name, session, notification_id: id, error: messageOf(err) });
      outcome = 'delivery_failed';
    }
    crashPoint('notices.after_deliver');
    await mailbox.recordNoticeOutcome(id, outcome);
    return RECONCILE_MS;
  }
}
