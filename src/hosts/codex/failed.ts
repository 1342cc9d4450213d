/**
 * Saved Codex notice failures, `failed/<identity>/<session>.json` (codex/README.md
 * "Recovery"): what a person needs to retry or dismiss a notice Codex did not take.
 *
 * This is a diagnostic store. The messages a failed notice pointed at stay unread in the
 * mailbox (and the notifier keeps trying on its schedule), so losing this file loses no
 * mail, and an error here never stops the next notice: callers log it and carry on.
 *
 * Rules, as pure functions over the file's value:
 * - at most 64 failures per session; the oldest go first;
 * - one slot for the current ordinary notice: a new notice failure replaces the old one,
 *   and a notice Codex accepts clears it;
 * - a failure expires 24 h after it was saved, retried or not.
 * Writes are atomic under the file's sidecar lock (json-store.ts); each one is durable
 * before it returns.
 */
import { randomBytes } from 'node:crypto';
import { readdir } from 'node:fs/promises';
import { z } from 'zod';
import { failedPath, identityDir, sessionOfFile } from '../../config/layout.js';
import { errnoCode, InterlinkError } from '../../errors.js';
import { peekJson, readJson, updateJson } from '../../store/json-store.js';

export const MAX_FAILURES = 64;
export const FAILURE_TTL_MS = 24 * 60 * 60 * 1000;

const failureSchema = z.object({
  id: z.string().regex(/^f-[0-9a-f]{16}$/),
  /** `notice`: an ordinary message notice (one slot); `pairing`: a pairing notice (kept each). */
  kind: z.enum(['notice', 'pairing']),
  notification_id: z.string(),
  thread: z.string(),
  message: z.string(),
  outcome: z.enum(['delivery_failed', 'delivery_unknown']),
  reason: z.string(),
  attempts: z.number().int().min(0),
  at: z.number().int(),
  expires_at: z.number().int(),
  retries: z.number().int().min(0).default(0),
});
export type Failure = z.infer<typeof failureSchema>;

const fileSchema = z.object({ v: z.literal(1), failures: z.array(failureSchema) });
type FailedFile = z.infer<typeof fileSchema>;

const empty = (): FailedFile => ({ v: 1, failures: [] });
const fileOf = (failures: Failure[]): FailedFile => ({ v: 1, failures });

export type NewFailure = Omit<Failure, 'id' | 'at' | 'expires_at' | 'retries'>;

/** Drops expired failures. */
export function live(failures: readonly Failure[], now: number): Failure[] {
  return failures.filter((f) => f.expires_at > now);
}

/** The list after saving `failure`: the notice slot replaced, expired ones gone, at most 64. */
export function withFailure(failures: readonly Failure[], failure: Failure, now: number): Failure[] {
  const kept = live(failures, now).filter((f) => f.kind !== failure.kind || failure.kind !== 'notice');
  return [...kept, failure].slice(-MAX_FAILURES);
}

/** What stops working while a failed-deliveries file is damaged (said with every report of it). */
export const FAILED_UNAVAILABLE = 'the Codex notices it saved cannot be listed or retried (the messages themselves stay unread in the mailbox)';
const storeOptions = { unavailable: FAILED_UNAVAILABLE };

export class FailedDeliveries {
  constructor(
    readonly path: string,
    private readonly now: () => number = Date.now,
  ) {}

  static forSession(stateDir: string, identity: string, session: string): FailedDeliveries {
    return new FailedDeliveries(failedPath(stateDir, identity, session));
  }

  async list(): Promise<Failure[]> {
    const { value } = await readJson(this.path, fileSchema, empty, storeOptions);
    return live(value.failures, this.now());
  }

  /** For views that must not change anything: the live failures, or why the file is unreadable. */
  async peek(): Promise<{ failures: Failure[] } | { damaged: string }> {
    const read = await peekJson(this.path, fileSchema);
    if (read.kind === 'damaged') return { damaged: read.reason };
    return { failures: read.kind === 'ok' ? live(read.value.failures, this.now()) : [] };
  }

  async get(id: string): Promise<Failure | undefined> {
    return (await this.list()).find((f) => f.id === id);
  }

  async save(failure: NewFailure): Promise<Failure> {
    const at = this.now();
    const saved: Failure = { ...failure, id: `f-${randomBytes(8).toString('hex')}`, at, expires_at: at + FAILURE_TTL_MS, retries: 0 };
    await updateJson(this.path, fileSchema, empty, (current) => ({ next: fileOf(withFailure(current.failures, saved, at)), result: {} }), storeOptions);
    return saved;
  }

  /** A notice Codex accepted: the saved ordinary-notice failure, if any, is stale now. */
  async clearNotice(): Promise<void> {
    await updateJson(this.path, fileSchema, empty, (current) => {
      const kept = live(current.failures, this.now()).filter((f) => f.kind !== 'notice');
      return { next: kept.length === current.failures.length ? undefined : fileOf(kept), result: {} };
    }, storeOptions);
  }

  /**
   * Removes one saved failure (never any mail). An expired one counts as gone, as it
   * does for list and get.
   */
  async discard(id: string): Promise<boolean> {
    return (
      await updateJson(this.path, fileSchema, empty, (current) => {
        const found = live(current.failures, this.now()).some((f) => f.id === id);
        return { next: found ? fileOf(current.failures.filter((f) => f.id !== id)) : undefined, result: { found } };
      }, storeOptions)
    ).found;
  }

  /** Records a retry that failed again. */
  async retried(id: string, outcome: Failure['outcome'], reason: string, attempts: number): Promise<void> {
    await updateJson(this.path, fileSchema, empty, (current) => {
      const failures = current.failures.map((f) => (f.id === id ? { ...f, outcome, reason, attempts: f.attempts + attempts, retries: f.retries + 1 } : f));
      return { next: fileOf(failures), result: {} };
    }, storeOptions);
  }
}

/** Every session of `identity` that has a failed-deliveries file. */
export async function failedSessions(stateDir: string, identity: string): Promise<string[]> {
  try {
    const names = await readdir(identityDir(stateDir, 'failed', identity));
    return names.filter((n) => n.endsWith('.json')).flatMap((n) => sessionOfFile(n) ?? []);
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return [];
    throw new InterlinkError('storage', `cannot list ${identityDir(stateDir, 'failed', identity)} (${errnoCode(err) ?? String(err)})`);
  }
}
