/**
 * The shared mailbox of one identity and session: `mailbox/<identity>/<session>.json`
 * (a journaled store: see store/journal.ts for the files and their crash guarantees).
 *
 * Verified bodies are committed here before the relay is acknowledged. Fetching never
 * consumes; acknowledgement is explicit, idempotent and scoped to (sender key, msg_id).
 * Several MCP processes of one session can share a mailbox.
 */
import type { Envelope } from '../envelope/envelope.js';
import { JournalStore } from '../store/journal-store.js';
import type { JournalFormat } from '../store/journal.js';
import type { Recovery } from '../store/json-store.js';
import type { Receipt } from '../envelope/receipt.js';
import { mailboxDataSchema, opSchema, type MailboxData, type NoticeOutcome, type Op, type Refusal, type Reservation, type StoredRecord } from './format.js';
import { DEFAULT_FETCH_LIMIT, DEFAULT_LIMITS, clampFetchLimit, isProgress, type Limits } from './rules.js';
import type { NoticeChange } from './notice-reservation.js';
import { isAcknowledged, isUnread } from './record-state.js';
import { MailboxState, type AckCounts, type BoundsReport, type StoreOutcome } from './state.js';
import { log } from '../log.js';

export interface MailboxOptions {
  limits?: Limits;
  /** A read-only view takes no lock and never writes (for `inbox` and `status`). */
  readOnly?: boolean;
  lockTimeoutMs?: number;
  now?: () => number;
}

export interface FetchResult {
  messages: StoredRecord[];
  more: boolean;
}

type Result = StoreOutcome | AckCounts | NoticeChange;
type MailboxFormat = JournalFormat<MailboxState, Op, Result, MailboxData>;

export function mailboxFormat(limits: Limits): MailboxFormat {
  return {
    name: 'interlink-mailbox',
    label: 'mailbox',
    version: 1,
    opSchema,
    dataSchema: mailboxDataSchema,
    empty: () => new MailboxState(limits),
    fromData: (data) => MailboxState.fromData(data, limits),
    toData: (state) => state.toData(),
    apply: (state, op) => state.apply(op),
    changes: (result) => ('outcome' in result ? result.outcome === 'stored' || (result.outcome === 'full' && result.noted) : 'notice' in result ? result.notice : result.acknowledged > 0),
  };
}

export class Mailbox {
  private constructor(
    private readonly journal: JournalStore<MailboxState, Op, Result, MailboxData>,
    private readonly now: () => number,
    /** The bounds this mailbox admits by (what `status` and notices name). */
    readonly limits: Limits,
  ) {}

  static async open(path: string, options: MailboxOptions = {}): Promise<Mailbox> {
    const limits = options.limits ?? DEFAULT_LIMITS;
    const store = await JournalStore.open(path, mailboxFormat(limits), {
      ...(options.readOnly !== undefined && { readOnly: options.readOnly }),
      ...(options.lockTimeoutMs !== undefined && { lockTimeoutMs: options.lockTimeoutMs }),
    });
    return new Mailbox(store, options.now ?? Date.now, limits);
  }

  get path(): string {
    return this.journal.path;
  }

  /** Damaged files moved aside while this mailbox was open. */
  get recoveries(): readonly Recovery[] {
    return this.journal.recoveries;
  }

  /**
   * Commits a verified message. Resolves once it is durable, known to be a duplicate, or
   * refused: `full` when a bound refused it (the refusal itself is durable when `noted`),
   * `forgotten` when it is older than what the mailbox remembers of its sender.
   */
  async store(envelope: Envelope, meta: { peer?: string } = {}): Promise<StoreOutcome> {
    const op: Op = { op: 'store', at: this.now(), envelope, ...(meta.peer !== undefined && { peer: meta.peer }), rules: 2 };
    const outcome = (await this.journal.submit(op)) as StoreOutcome;
    if (outcome.outcome === 'forgotten') {
      // Not silent: it may be new mail that waited on a relay past everything this mailbox remembers of its sender.
      log.warn('mailbox_refused_forgotten', { from: envelope.from, msg_id: envelope.msg_id, ts: envelope.ts });
    }
    return outcome;
  }

  /** Idempotent; counts what changed. Never touches a message not named by its receipt. */
  async acknowledge(receipts: readonly Receipt[]): Promise<AckCounts> {
    if (receipts.length === 0) return { acknowledged: 0, already_acknowledged: 0, unknown: 0 };
    const op: Op = { op: 'ack', at: this.now(), receipts: receipts.map((r) => ({ sender: r.sender, msg_id: r.msg_id })) };
    return (await this.journal.submit(op)) as AckCounts;
  }

  /** What a notifier decides from: the reservation and the messages that deserve a notice; and the bounds refusing mail, for its text. */
  async noticeState(): Promise<{ reservation: Reservation | undefined; attention: Receipt[]; refusals: Refusal[] }> {
    return this.journal.read((state) => ({ reservation: state.notice && structuredClone(state.notice), attention: state.attention(), refusals: state.bounds().refusals }));
  }

  /** Each sender's unread holdings against its share, the bounds refusing mail and the senders the tombstone bound made forget (for `status`). */
  async bounds(): Promise<BoundsReport> {
    return this.journal.read((state) => state.bounds());
  }

  /** Makes the session's notice reservation; durable before the notice is handed to the host. */
  async reserveNotice(id: string, attempt: number, covered: readonly Receipt[]): Promise<void> {
    await this.journal.submit({ op: 'notice_reserve', at: this.now(), id, attempt, covered: covered.map((r) => ({ sender: r.sender, msg_id: r.msg_id })) });
  }

  /** Records what became of a notice (inbox_queued, notification_sent, …) on the messages it covered. */
  async recordNoticeOutcome(id: string, state: NoticeOutcome): Promise<void> {
    await this.journal.submitLazily({ op: 'notice_outcome', at: this.now(), id, state });
  }

  /** Forgets the reservation, so the next reconciliation may notify again at once. */
  async resetNotice(): Promise<void> {
    await this.journal.submit({ op: 'notice_reset', at: this.now() });
  }

  /** Current unread messages in delivery order (each sender's in the order sent); consumes nothing. */
  async fetch(limit?: number): Promise<FetchResult> {
    const bounded = clampFetchLimit(limit);
    return this.journal.read((state) => {
      const unread = state.unreadInFetchOrder();
      return { messages: unread.slice(0, bounded).map(clone), more: unread.length > bounded };
    });
  }

  /**
   * The last `limit` messages from `sender`, in the order it sent them. With `consume`,
   * exactly the returned messages are acknowledged before this resolves.
   */
  async history(sender: string, options: { limit?: number; consume?: boolean } = {}): Promise<StoredRecord[]> {
    const limit = Math.max(1, Math.floor(options.limit ?? DEFAULT_FETCH_LIMIT));
    const selected = await this.journal.read((state) => state.fromSender(sender).slice(-limit));
    if (options.consume !== true) return selected.map(clone);
    const receipts = selected.filter((r) => !isAcknowledged(r)).map((r) => ({ sender: r.envelope.from, msg_id: r.envelope.msg_id }));
    if (receipts.length > 0) await this.acknowledge(receipts);
    return this.journal.read((state) => selected.map((r) => clone(state.get(r.envelope.from, r.envelope.msg_id) ?? r)));
  }

  async get(sender: string, msgId: string): Promise<StoredRecord | undefined> {
    return this.journal.read((state) => {
      const record = state.get(sender, msgId);
      return record && clone(record);
    });
  }

  /** msg_ids are random, so one id names one message whoever sent it. */
  /** The stored records these receipts name, where they are still stored. */
  async records(receipts: readonly Receipt[]): Promise<StoredRecord[]> {
    return this.journal.read((state) => receipts.flatMap((r) => {
      const record = state.get(r.sender, r.msg_id);
      return record === undefined ? [] : [clone(record)];
    }));
  }

  async findByMsgId(msgId: string): Promise<StoredRecord | undefined> {
    return this.journal.read((state) => {
      for (const record of state.all()) if (record.envelope.msg_id === msgId) return clone(record);
      return undefined;
    });
  }

  /** What this mailbox admitted and still remembers, for seeding the replay index (replay/seed.ts). */
  admitted(): Promise<{ from: string; msg_id: string; ts: number }[]> {
    return this.journal.read((state) => state.admitted());
  }

  async has(sender: string, msgId: string): Promise<boolean> {
    return this.journal.read((state) => state.has(sender, msgId));
  }

  /**
   * When the oldest unread message that deserves a notice (not progress) was stored, or
   * undefined when there is none. A notice made at time T covered exactly the unread
   * attention messages stored by T, so it is stale once this is undefined or after T.
   */
  async oldestUnreadAttention(): Promise<number | undefined> {
    return this.journal.read((state) => {
      let oldest: number | undefined;
      for (const record of state.all()) {
        if (isUnread(record) && !isProgress(record.envelope)) oldest = Math.min(oldest ?? record.received_at, record.received_at);
      }
      return oldest;
    });
  }

  async stats(): Promise<{ records: number; unread: number; bytes: number; tombstones: number }> {
    return this.journal.read((state) => state.stats);
  }

  /** Waits for pending commits and releases the journal's file descriptor. */
  close(): Promise<void> {
    return this.journal.close();
  }

  async all(): Promise<StoredRecord[]> {
    return this.journal.read((state) => [...state.all()].map(clone));
  }
}

/** A refusal in one sentence, naming the bound and the sender (inbound's log and retry). */
export function describeRefusal(outcome: Extract<StoreOutcome, { outcome: 'full' }>): string {
  return `mailbox full (${outcome.reason}${outcome.reason.startsWith('sender_') ? ` of sender ${outcome.sender}` : `; refused sender ${outcome.sender}`})`;
}

function clone(record: StoredRecord): StoredRecord {
  return { ...record, states: record.states.map((s) => ({ ...s })) };
}
