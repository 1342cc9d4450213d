/**
 * What one worker's sessions sent and received, counted as it happens. Sender and
 * receiver of every pair live in the same worker process, so one performance.now clock
 * times both ends: the latency from the relay's `accepted` (read by the sender) to the
 * `deliver` (read by the receiver) needs no clock agreement between processes.
 */
import type { SendOutcome } from '../../src/link/sends.js';
import type { TrafficResult } from './ipc.js';

/** Latency samples kept per kind; beyond it a uniform sample of them (reservoir), so memory stays bounded on long runs. */
const MAX_SAMPLES = 100_000;

class Samples {
  readonly values: number[] = [];
  private seen = 0;

  add(value: number): void {
    this.seen++;
    if (this.values.length < MAX_SAMPLES) {
      this.values.push(value);
      return;
    }
    const slot = Math.floor(Math.random() * this.seen);
    if (slot < MAX_SAMPLES) this.values[slot] = value;
  }
}

interface Sent {
  sentAt: number;
  acceptedAt?: number;
  deliveredAt?: number;
  /** The send's outcome is known (accepted or refused, in time or late). */
  answered: boolean;
}

function bump(counts: Record<string, number>, code: string): void {
  counts[code] = (counts[code] ?? 0) + 1;
}

export class Traffic {
  private readonly messages = new Map<string, Sent>();
  private readonly acceptToDeliver = new Samples();
  private readonly sendToAccept = new Samples();
  private readonly refused: Record<string, number> = {};
  private readonly rejected: Record<string, number> = {};
  private sent = 0;
  private accepted = 0;
  private delivered = 0;
  private duplicates = 0;
  private deliveredFirst = 0;
  private receiptsSent = 0;
  private receiptsAccepted = 0;
  private receiptsDelivered = 0;
  private receipted = 0;
  /** Receipts offered and not answered yet. */
  private receiptsInFlight = 0;
  /** Messages offered whose send has not resolved yet (answered, or given up on at its deadline). */
  private offersOpen = 0;

  /** A message leaves its sender (signed and sealed already). */
  sending(msgId: string, at: number): void {
    this.sent++;
    this.offersOpen++;
    this.messages.set(msgId, { sentAt: at, answered: false });
  }

  /** A message's send resolved, in time or at its deadline (a later answer still counts, through `answered`). */
  offerSettled(): void {
    this.offersOpen--;
  }

  /** The relay's answer to a message's send; `at` when the sender read it. */
  answered(msgId: string, outcome: SendOutcome, at: number): void {
    const sent = this.messages.get(msgId);
    if (sent === undefined || sent.answered) return;
    if (!outcome.accepted) {
      // No answer yet (timeout, dropped connection): a late answer may still come.
      if (outcome.code === 'timeout' || outcome.code === 'disconnected') return;
      sent.answered = true;
      bump(this.refused, outcome.code);
      return;
    }
    sent.answered = true;
    sent.acceptedAt = at;
    this.accepted++;
    this.sendToAccept.add(at - sent.sentAt);
    if (sent.deliveredAt !== undefined) this.latency(sent);
  }

  /** A message passed the receiver's trust gate; `at` when the receiver read its delivery. */
  deliveredMessage(msgId: string, at: number): void {
    const sent = this.messages.get(msgId);
    if (sent === undefined) return bump(this.rejected, 'not_sent_in_this_run');
    if (sent.deliveredAt !== undefined) {
      this.duplicates++;
      return;
    }
    sent.deliveredAt = at;
    this.delivered++;
    if (sent.acceptedAt !== undefined) this.latency(sent);
  }

  /** A delivery the gate refused as a copy of one admitted before. */
  duplicate(): void {
    this.duplicates++;
  }

  rejectedDelivery(code: string): void {
    bump(this.rejected, code);
  }

  receiptOffered(): void {
    this.receiptsSent++;
    this.receiptsInFlight++;
  }

  receiptAnswered(outcome: SendOutcome): void {
    this.receiptsInFlight--;
    if (outcome.accepted) this.receiptsAccepted++;
    else bump(this.refused, `receipt_${outcome.code}`);
  }

  /** A receipt reached the sender: `msgIds` are the messages it reports on. */
  receiptDelivered(msgIds: readonly string[]): void {
    this.receiptsDelivered++;
    for (const id of msgIds) if (this.messages.has(id)) this.receipted++;
  }

  /** Every send resolved, every accepted message delivered and every accepted receipt read: nothing left to wait for. */
  get settled(): boolean {
    return this.offersOpen === 0 && this.delivered >= this.accepted && this.receiptsInFlight === 0 && this.receiptsDelivered >= this.receiptsAccepted;
  }

  result(): TrafficResult {
    let unanswered = 0;
    let lost = 0;
    for (const sent of this.messages.values()) {
      if (!sent.answered) unanswered++;
      else if (sent.acceptedAt !== undefined && sent.deliveredAt === undefined) lost++;
    }
    return {
      sent: this.sent,
      accepted: this.accepted,
      refused: this.refused,
      unanswered,
      delivered: this.delivered,
      duplicates: this.duplicates,
      lost,
      rejected: this.rejected,
      receiptsSent: this.receiptsSent,
      receiptsAccepted: this.receiptsAccepted,
      receiptsDelivered: this.receiptsDelivered,
      receipted: this.receipted,
      acceptToDeliver: this.acceptToDeliver.values,
      sendToAccept: this.sendToAccept.values,
      deliveredFirst: this.deliveredFirst,
    };
  }

  private latency(sent: Sent): void {
    const ms = sent.deliveredAt! - sent.acceptedAt!;
    if (ms < 0) this.deliveredFirst++;
    this.acceptToDeliver.add(Math.max(0, ms));
  }
}
