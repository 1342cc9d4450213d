/**
 * `replay/<identity>.json` (+ `.journal`): the per-identity replay index on disk, shared
 * by every session of the identity on this machine (a journaled store: store/journal.ts
 * gives the files and their crash guarantees; the sidecar lock lets processes share it).
 *
 * A claim is durable before it returns, and inbound claims before it commits the message
 * to the mailbox: after a crash in between, the relay offers the message again to the
 * same session, whose claim is found as its own and the commit goes ahead.
 */
import { JournalStore } from '../store/journal-store.js';
import type { JournalFormat } from '../store/journal.js';
import { ClaimsState, claimChanges, claimOpSchema, claimsDataSchema, type ClaimOp, type ClaimOutcome, type ClaimsData } from './rules.js';

const format: JournalFormat<ClaimsState, ClaimOp, ClaimOutcome, ClaimsData> = {
  name: 'interlink-replay',
  label: 'replay',
  version: 1,
  opSchema: claimOpSchema,
  dataSchema: claimsDataSchema,
  empty: () => new ClaimsState(),
  fromData: (data) => ClaimsState.fromData(data),
  toData: (state) => state.toData(),
  apply: (state, op) => state.apply(op),
  changes: claimChanges,
};

export interface Claim {
  from: string;
  msg_id: string;
  ts: number;
  session: string;
}

export class ReplayIndex {
  private constructor(
    private readonly journal: JournalStore<ClaimsState, ClaimOp, ClaimOutcome, ClaimsData>,
    private readonly now: () => number,
  ) {}

  static async open(path: string, options: { readOnly?: boolean; now?: () => number } = {}): Promise<ReplayIndex> {
    const store = await JournalStore.open(path, format, options.readOnly !== undefined ? { readOnly: options.readOnly } : {});
    return new ReplayIndex(store, options.now ?? Date.now);
  }

  /** Claims a message for `session`; resolves once the claim is durable (or refused). Concurrent claims share a commit. */
  claim(claim: Claim): Promise<ClaimOutcome> {
    return this.journal.submit({ op: 'claim', at: this.now(), ...claim });
  }

  /** The session that admitted (sender, msg_id), if any. */
  holder(from: string, msgId: string): Promise<string | undefined> {
    return this.journal.read((state) => state.holder(from, msgId));
  }

  /** Live entries against the limit; `full` when a new claim would be refused (`status` shows it). */
  fill(): Promise<{ entries: number; limit: number; full: boolean }> {
    return this.journal.read((state) => {
      const { entries, limit } = state.fill(this.now());
      return { entries, limit, full: entries >= limit };
    });
  }

  close(): Promise<void> {
    return this.journal.close();
  }
}
