/**
 * Sends signed receipts (receipts/receipts.ts) for the messages this session receives: when
 * one is stored (`receiver_stored`), when it is acknowledged (`receiver_acknowledged`),
 * and when the gate refuses one a relay had accepted from a peer for a reason the sender
 * can act on (`receiver_refused`: stale, bad_seal, unsealed). Each receipt goes to the
 * session the message named in its reply route.
 *
 * Receipts are batched per route: a quiet route's first receipt leaves RECEIPT_DELAY_MS after
 * its first entry, and after that what waited for a route leaves at most once every
 * RECEIPT_INTERVAL_MS to 1.5 times that, at random (RECEIPT_JITTER; `receiptDue` in
 * receipts/receipts.ts), in receipts of at most RECEIPT_ENTRIES_SENT entries. A busy pair
 * costs the relay and the sender one receipt every few seconds, or one per 64 messages
 * when more than that wait. Receipts of `receiver_stored` and `receiver_acknowledged` are
 * kept in memory only: they report states that are already durable here, so one lost in a
 * crash leaves the sender with an older state, never a false one. A refusal is different:
 * the relay forgets the refused message once acknowledged, and nothing else here would
 * tell the sender, who would stay at `bus_accepted` for good. So a `receiver_refused`
 * receipt is owed durably (rejected.ts) before `refused` resolves, which inbound.ts awaits
 * before acknowledging the relay; a session starting offers what is still owed (`resume`),
 * and the debt is settled once a relay accepted the receipt. The session it goes to is the
 * refused message's reply route, read from its sealed body (opened again here: the gate
 * keeps nothing of what it refused), so no earlier message of that sender need have
 * arrived in this process. A receipt no relay took is offered again after the delay, ahead
 * of entries noted since, and at most MAX_WAITING entries wait; beyond that the oldest are
 * dropped from memory, and the log says so (owed refusals are offered again at the next start).
 * Peers marked `clear` (the Rust Interlink) get none: they cannot read them.
 */
import { isSealed, replyToSession, wireOf, type Envelope, type WireEnvelope } from '../envelope/envelope.js';
import { openEnvelope } from '../envelope/open.js';
import { signEnvelope } from '../envelope/sign.js';
import { formatRoute } from '../envelope/route.js';
import type { RejectCode } from '../errors.js';
import type { Identity } from '../identity/identity.js';
import { log } from '../log.js';
import type { StoredRecord } from '../mailbox/format.js';
import type { PeerTable } from '../peers/peers.js';
import { RECEIPT_KIND, receiptDue, receiptText, type ReceiptEntry } from '../receipts/receipts.js';
import type { RelayClient } from '../link/client.js';
import { messageOf } from '../errors.js';
import { crashPoint } from '../store/crash-point.js';
import { owedReceipts, oweReceipt, receiptsSent, type OwedReceipt } from './rejected.js';

/** How long a receipt waits for others to the same route: a quiet route's sender learns a state within about a second. */
export const RECEIPT_DELAY_MS = 1_000;
/**
 * The least time between two receipts to one route. Each receipt costs a relay commit, a
 * gate pass and an outbox record at the sender, about what a message costs: at one a
 * second, the receipts to 16 busy routes cost about 15% of the throughput (DESIGN.md).
 */
export const RECEIPT_INTERVAL_MS = 4_000;
/**
 * Each gap between two receipts to a route is RECEIPT_INTERVAL_MS made longer by up to
 * this fraction, at random: routes that got busy together (a team starting work, the
 * benchmark's senders) would otherwise send and read their receipts in the same instant
 * every interval, and every message in flight then waited for all of them.
 */
export const RECEIPT_JITTER = 0.5;
/**
 * Entries per receipt this implementation sends (the protocol allows up to
 * MAX_RECEIPT_ENTRIES, 256). Smaller receipts cost the same per entry but each one holds a
 * process up for less: measured on the 8-session user's-path benchmark (8 rounds each),
 * receipts of 64 against 256 gave a median p99 send → receiver_stored 0.86× as long and
 * 1.15× the messages/s; 32 against 64 changed neither.
 */
export const RECEIPT_ENTRIES_SENT = 64;
/** How many routes' last receipt times are remembered; beyond it the oldest is forgotten (its next receipt may come sooner). */
const SENT_ROUTES_LIMIT = 4_096;
const MAX_WAITING = 4_096;
/** Refusals worth telling the sender: the message will never be admitted as it is, and the sender can fix that. */
const REPORTED_REFUSALS: ReadonlySet<RejectCode> = new Set(['stale', 'bad_seal', 'unsealed']);

export interface ReceiptSenderOptions {
  identity: Identity;
  relays: readonly RelayClient[];
  trust: () => Promise<{ table: PeerTable }>;
  /** The sender's session from its last admitted message, for a refusal whose reply route cannot be read. */
  sticky: ReadonlyMap<string, string>;
  delayMs?: number;
  intervalMs?: number;
  /** The fraction by which a gap may be longer than intervalMs (default RECEIPT_JITTER). */
  jitter?: number;
  /** False: sends nothing (the benchmark's unsealed baseline). */
  enabled?: boolean;
  /** The session's rejected file (rejected.ts), where `receiver_refused` receipts are owed durably; without it they live in memory only. */
  owedPath?: string;
}

interface Batch {
  to: string;
  session: string;
  entries: ReceiptEntry[];
  /** When it is sent (receiptDue). */
  due: number;
}

export class ReceiptSender {
  /** route → entries waiting, in the order they were noted, and when they are due. */
  private readonly waiting = new Map<string, Batch>();
  /** route → when its last receipt was sent, and how long after it the next may go. */
  private readonly sent = new Map<string, { at: number; gap: number }>();
  private count = 0;
  private timer: NodeJS.Timeout | undefined;
  /** When the timer fires. */
  private timerDue = Number.POSITIVE_INFINITY;
  private flushing: Promise<void> | undefined;
  private closed = false;

  constructor(private readonly options: ReceiptSenderOptions) {}

  /** A message was committed to the mailbox. */
  stored(envelope: Envelope, at = Date.now()): void {
    if (envelope.kind !== 'message') return;
    this.note(envelope.from, replyToSession(envelope), { msg_id: envelope.msg_id, state: 'receiver_stored', at });
  }

  /** These records were acknowledged (by this session's tools). */
  acknowledged(records: readonly StoredRecord[]): void {
    for (const record of records) {
      const at = record.states.find((s) => s.state === 'receiver_acknowledged')?.at;
      if (at === undefined || record.envelope.kind !== 'message') continue;
      this.note(record.envelope.from, replyToSession(record.envelope), { msg_id: record.envelope.msg_id, state: 'receiver_acknowledged', at });
    }
  }

  /**
   * The gate refused a message a relay had accepted; told to the sender when it is a peer
   * (or this identity) and can act on it. Resolves once the receipt is owed durably (the
   * caller acknowledges the relay after); throws when that write failed.
   */
  async refused(wire: WireEnvelope, code: RejectCode, at = Date.now()): Promise<void> {
    if (!REPORTED_REFUSALS.has(code) || wire.kind !== 'message' || this.options.enabled === false) return;
    const { table } = await this.options.trust();
    if (wire.from !== this.options.identity.key && !table.has(wire.from)) return;
    // A peer marked clear (the Rust Interlink) cannot read a receipt.
    if (table.clear.has(wire.from)) return;
    const session = this.replySession(wire) ?? this.options.sticky.get(wire.from);
    if (session === undefined) {
      log.info('receipt_unroutable', { to: wire.from, msg_id: wire.msg_id, reason: 'the refused message names no reply session that could be read' });
      return;
    }
    const owed: OwedReceipt = { to: wire.from, session, msg_id: wire.msg_id, code, at };
    if (this.options.owedPath !== undefined) await oweReceipt(this.options.owedPath, owed);
    this.noteOwed(owed);
  }

  /** Offers the `receiver_refused` receipts still owed from earlier runs (call before the relays start delivering). */
  async resume(): Promise<void> {
    if (this.options.owedPath === undefined || this.options.enabled === false) return;
    // An unreadable file must not keep the session from starting; what it owes waits for a readable one.
    const owed = await owedReceipts(this.options.owedPath).catch((err: unknown) => {
      log.warn('receipts_owed_unreadable', { path: this.options.owedPath, error: messageOf(err) });
      return [];
    });
    for (const entry of owed) this.noteOwed(entry);
  }

  /**
   * Takes over the receipts an ended session still owed (its rejected file,
   * agent/succession.ts): owed durably here first, then settled there, so a crash in
   * between sends one twice (harmless: a sender applies an entry once), never none.
   */
  async adopt(path: string): Promise<void> {
    if (this.options.enabled === false || path === this.options.owedPath) return;
    const owed = await owedReceipts(path);
    if (owed.length === 0) return;
    if (this.options.owedPath !== undefined) for (const entry of owed) await oweReceipt(this.options.owedPath, entry);
    await receiptsSent(path, owed);
    for (const entry of owed) this.noteOwed(entry);
  }

  private noteOwed(owed: OwedReceipt): void {
    this.note(owed.to, owed.session, { msg_id: owed.msg_id, state: 'receiver_refused', at: owed.at, code: owed.code });
  }

  /**
   * The session the message asked replies to go to. A sealed body is opened again: the
   * gate opened it before refusing (a `stale` verdict comes after the seal) but returns
   * nothing of a refused message. Undefined when the seal does not open (`bad_seal`).
   */
  private replySession(wire: WireEnvelope): string | undefined {
    if (!isSealed(wire)) return replyToSession(wire);
    try {
      return replyToSession(openEnvelope(this.options.identity.signingKey, wire));
    } catch {
      return undefined;
    }
  }

  /** Sends everything waiting now, due or not; resolves when the attempt is over. */
  async flush(): Promise<void> {
    await this.flushing;
    await this.run(Number.POSITIVE_INFINITY);
  }

  /** One last attempt for what waits; nothing is scheduled after. */
  async close(): Promise<void> {
    this.closed = true;
    await this.flush();
    clearTimeout(this.timer);
  }

  /** Sends the batches due by `until`; one run at a time, then the timer for the next due one. */
  private run(until: number): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.timerDue = Number.POSITIVE_INFINITY;
    this.flushing ??= this.send(until).finally(() => {
      this.flushing = undefined;
      if (this.count > 0 && !this.closed) this.schedule();
    });
    return this.flushing;
  }

  private note(to: string, session: string | undefined, entry: ReceiptEntry): void {
    if (session === undefined || this.closed || this.options.enabled === false) return;
    const route = formatRoute({ key: to, session });
    let batch = this.waiting.get(route);
    if (batch === undefined) {
      const last = this.sent.get(route);
      batch = { to, session, entries: [], due: receiptDue(Date.now(), last?.at, this.delayMs, last?.gap ?? this.intervalMs) };
      this.waiting.set(route, batch);
      this.schedule(batch.due);
    }
    batch.entries.push(entry);
    this.count++;
    this.bound();
  }

  private get delayMs(): number {
    return this.options.delayMs ?? RECEIPT_DELAY_MS;
  }

  private get intervalMs(): number {
    return this.options.intervalMs ?? RECEIPT_INTERVAL_MS;
  }

  /**
   * Sets the timer for `due` (by default the earliest waiting batch's) unless it is set
   * sooner already, or a run is under way (which schedules when done).
   */
  private schedule(due = Math.min(...[...this.waiting.values()].map((b) => b.due))): void {
    if (this.flushing !== undefined || due >= this.timerDue || !Number.isFinite(due)) return;
    clearTimeout(this.timer);
    this.timerDue = due;
    this.timer = setTimeout(() => void this.run(Date.now()), Math.max(0, due - Date.now()));
    this.timer.unref();
  }

  /** Drops the oldest entries beyond MAX_WAITING. */
  private bound(): void {
    let excess = this.count - MAX_WAITING;
    if (excess <= 0) return;
    log.warn('receipts_dropped', { count: excess, reason: `more than ${MAX_WAITING} receipts wait for a relay` });
    for (const [route, batch] of this.waiting) {
      const dropped = batch.entries.splice(0, excess);
      excess -= dropped.length;
      this.count -= dropped.length;
      if (batch.entries.length === 0) this.waiting.delete(route);
      if (excess <= 0) return;
    }
  }

  private async send(until: number): Promise<void> {
    const due = [...this.waiting.entries()].filter(([, batch]) => batch.due <= until);
    if (due.length === 0) return;
    const { table } = await this.options.trust().catch(() => ({ table: undefined }));
    for (const [route] of due) this.waiting.delete(route);
    for (const [route, batch] of due) {
      this.count -= batch.entries.length;
      // Marked clear since: it cannot read a receipt, so none is owed any more.
      if (table?.clear.has(batch.to) === true) {
        await this.settle(batch.to, batch.entries);
        continue;
      }
      for (let i = 0; i < batch.entries.length; i += RECEIPT_ENTRIES_SENT) {
        const entries = batch.entries.slice(i, i + RECEIPT_ENTRIES_SENT);
        if (!(await this.offer(route, batch, entries))) {
          // Kept for another try after the delay, in front of anything noted since.
          const later = this.waiting.get(route);
          this.waiting.set(route, { ...batch, entries: [...batch.entries.slice(i), ...(later?.entries ?? [])], due: Date.now() + this.delayMs });
          this.count += batch.entries.length - i;
          break;
        }
        this.remember(route, Date.now());
        await this.settle(batch.to, entries);
      }
    }
    this.bound();
  }

  /**
   * Forgets the owed refusals among `entries` (a relay accepted them). A failure only
   * means they are offered again at the next start: the sender applies a state once.
   */
  private async settle(to: string, entries: readonly ReceiptEntry[]): Promise<void> {
    const refused = entries.filter((e) => e.state === 'receiver_refused').map((e) => ({ to, msg_id: e.msg_id }));
    if (refused.length === 0 || this.options.owedPath === undefined) return;
    await receiptsSent(this.options.owedPath, refused).catch((err: unknown) => log.warn('receipt_owed_unsettled', { to, count: refused.length, error: messageOf(err) }));
  }

  /** Notes when `route` was last sent a receipt; the oldest route is forgotten beyond SENT_ROUTES_LIMIT. */
  private remember(route: string, at: number): void {
    const gap = this.intervalMs * (1 + Math.random() * (this.options.jitter ?? RECEIPT_JITTER));
    this.sent.delete(route);
    this.sent.set(route, { at, gap });
    // Entries noted while this one was being offered wait their turn too.
    const next = this.waiting.get(route);
    if (next !== undefined) next.due = Math.max(next.due, at + gap);
    if (this.sent.size > SENT_ROUTES_LIMIT) this.sent.delete(this.sent.keys().next().value!);
  }

  /** Signs one receipt and offers it to the connected relays in turn; true once one accepted it. */
  private async offer(route: string, batch: Batch, entries: ReceiptEntry[]): Promise<boolean> {
    crashPoint('receipts.before_send');
    let wire: WireEnvelope;
    try {
      wire = wireOf(signEnvelope(this.options.identity.signingKey, { to: batch.to, to_session: batch.session, kind: RECEIPT_KIND, text: receiptText(entries) }));
    } catch (err) {
      log.warn('receipt_unsendable', { route, error: messageOf(err) });
      return true;
    }
    for (const relay of this.options.relays) {
      if (!relay.connected) continue;
      const outcome = await relay.send(route, wire).catch(() => undefined);
      if (outcome?.accepted === true) {
        crashPoint('receipts.after_send');
        return true;
      }
    }
    return false;
  }
}
