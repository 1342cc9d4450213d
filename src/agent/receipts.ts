/**
 * Sends signed receipts (receipts/receipts.ts) for the messages this session receives: when
 * one is stored (`receiver_stored`), when it is acknowledged (`receiver_acknowledged`),
 * and when the gate refuses one a relay had accepted from a peer for a reason the sender
 * can act on (`receiver_refused`: stale, bad_seal, unsealed). Each receipt goes to the
 * session the message named in its reply route.
 *
 * Receipts are batched per route (one envelope for everything reported within RECEIPT_DELAY_MS,
 * up to MAX_RECEIPT_ENTRIES each) and kept in memory only: they report states that are
 * already durable here, so one lost in a crash leaves the sender with an older state, never
 * a false one. A receipt no relay took is offered again with the next batch, and at most
 * MAX_WAITING entries wait; beyond that the oldest are dropped, and the log says so.
 * Peers marked `clear` (the Rust Interlink) get none: they cannot read them.
 */
import { replyToSession, signEnvelope, wireOf, type Envelope, type WireEnvelope } from '../envelope/envelope.js';
import { formatRoute } from '../envelope/route.js';
import type { RejectCode } from '../errors.js';
import type { Identity } from '../identity/identity.js';
import { log } from '../log.js';
import type { StoredRecord } from '../mailbox/format.js';
import type { PeerTable } from '../peers/peers.js';
import { MAX_RECEIPT_ENTRIES, RECEIPT_KIND, receiptText, type ReceiptEntry } from '../receipts/receipts.js';
import type { RelayClient } from '../relay/client.js';
import { messageOf } from '../errors.js';

/**
 * How long a receipt waits for others to the same route: a sender learns a state within
 * about a second, and a busy pair costs the relay one receipt a second, not one a message.
 */
export const RECEIPT_DELAY_MS = 1_000;
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
  /** False: sends nothing (the benchmark's unsealed baseline). */
  enabled?: boolean;
}

export class ReceiptSender {
  /** route → entries waiting, in the order they were noted. */
  private readonly waiting = new Map<string, { to: string; session: string; entries: ReceiptEntry[] }>();
  private count = 0;
  private timer: NodeJS.Timeout | undefined;
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

  /** The gate refused a message a relay had accepted; told to the sender when it is a peer (or this identity) and can act on it. */
  async refused(wire: WireEnvelope, code: RejectCode, at = Date.now()): Promise<void> {
    if (!REPORTED_REFUSALS.has(code) || wire.kind !== 'message') return;
    const { table } = await this.options.trust();
    if (wire.from !== this.options.identity.key && !table.has(wire.from)) return;
    const session = ('text' in wire ? replyToSession(wire) : undefined) ?? this.options.sticky.get(wire.from);
    this.note(wire.from, session, { msg_id: wire.msg_id, state: 'receiver_refused', at, code });
  }

  /** Sends what waits now; resolves when the attempt is over. */
  flush(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.flushing ??= this.send().finally(() => {
      this.flushing = undefined;
      if (this.count > 0 && !this.closed) this.schedule();
    });
    return this.flushing;
  }

  /** One last attempt for what waits; nothing is scheduled after. */
  async close(): Promise<void> {
    this.closed = true;
    await this.flush();
    clearTimeout(this.timer);
  }

  private note(to: string, session: string | undefined, entry: ReceiptEntry): void {
    if (session === undefined || this.closed || this.options.enabled === false) return;
    const route = formatRoute({ key: to, session });
    const batch = this.waiting.get(route) ?? { to, session, entries: [] };
    batch.entries.push(entry);
    this.waiting.set(route, batch);
    this.count++;
    this.bound();
    this.schedule();
  }

  private schedule(): void {
    if (this.timer !== undefined) return;
    this.timer = setTimeout(() => void this.flush(), this.options.delayMs ?? RECEIPT_DELAY_MS);
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

  private async send(): Promise<void> {
    if (this.waiting.size === 0) return;
    const { table } = await this.options.trust().catch(() => ({ table: undefined }));
    const batches = [...this.waiting.entries()];
    this.waiting.clear();
    this.count = 0;
    for (const [route, batch] of batches) {
      if (table?.clear.has(batch.to) === true) continue;
      for (let i = 0; i < batch.entries.length; i += MAX_RECEIPT_ENTRIES) {
        const entries = batch.entries.slice(i, i + MAX_RECEIPT_ENTRIES);
        if (!(await this.offer(route, batch, entries))) {
          // Kept for the next batch: in front of anything noted since.
          const later = this.waiting.get(route);
          this.waiting.set(route, { ...batch, entries: [...batch.entries.slice(i), ...(later?.entries ?? [])] });
          this.count += batch.entries.length - i;
          break;
        }
      }
    }
    this.bound();
  }

  /** Signs one receipt and offers it to the connected relays in turn; true once one accepted it. */
  private async offer(route: string, batch: { to: string; session: string }, entries: ReceiptEntry[]): Promise<boolean> {
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
      if (outcome?.accepted === true) return true;
    }
    return false;
  }
}
