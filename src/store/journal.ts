/**
 * Journaled state files: a snapshot `<name>.json` plus a journal `<name>.journal`. Used
 * by the mailbox, the outbox and the relay's durable queues; each supplies a format (its
 * op schema, its snapshot data schema and a deterministic `apply`).
 *
 * A commit appends complete JSON lines to the journal and fdatasyncs it: one sync,
 * whatever the store holds. When the journal outgrows the snapshot (and 1 MiB), the
 * state is compacted: a new snapshot with the next generation is written atomically,
 * then a fresh journal whose header names that generation replaces the old one.
 *
 * Crash guarantees:
 *   - an op whose append was synced is in the journal, or in a snapshot written later;
 *   - a torn final line (a crash mid-append, never acknowledged) is cut off by the next
 *     writer, which holds the lock, so nobody is still writing it;
 *   - between the two steps of compaction the journal's generation is older than the
 *     snapshot's: its ops are already in the snapshot and it is ignored and replaced.
 * A line that is complete but does not parse, or whose checksum does not match, means
 * damage, not a crash: the journal is kept aside, the valid prefix is kept, and the store
 * is compacted at once.
 *
 * Each line carries a checksum (journal-lines.ts): a flipped byte that leaves valid JSON
 * (a different sender, a different text) is caught, never applied. Journals written
 * before checksums (no `line_check` in the header) are still read, and the next writer
 * compacts them into the checked form.
 */
import { closeSync, constants, fstatSync, ftruncateSync, openSync, readSync, statSync } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import type { z } from 'zod';
import { errnoCode } from '../errors.js';
import { writeFileAtomic, writeFully } from './atomic.js';
import { crashPoint } from './crash-point.js';
import { faultPoint } from './fault-point.js';
import { syncs } from './sync.js';
import { NO_FOLLOW } from './private.js';
import { moveAside, type Recovery } from './json-store.js';
import { headerLine, parseLines } from './journal-lines.js';
import { readJournal } from './journal-read.js';
import { readSnapshot, writeSnapshot } from './snapshot.js';

/**
 * What a journaled store is: its name (written into both files), how to validate an op
 * and the snapshot's data, and how ops change the state. `apply` must be deterministic:
 * replaying the journal after a crash has to reach the same decisions.
 */
export interface JournalFormat<State, Op, Result, Data> {
  /** written into both files' headers, e.g. `interlink-mailbox`. */
  readonly name: string;
  /** short name for crash points and messages, e.g. `mailbox`. */
  readonly label: string;
  readonly version: number;
  readonly opSchema: z.ZodType<Op>;
  readonly dataSchema: z.ZodType<Data>;
  empty(): State;
  fromData(data: Data): State;
  toData(state: State): Data;
  apply(state: State, op: Op): Result;
  /** Whether the op changed the state, and so must be journaled. */
  changes(result: Result): boolean;
  /**
   * For a state too big for one string (the relay's queues): the snapshot's data written
   * and read a line at a time (snapshot.ts). Without it, `toData` and `fromData` do it whole.
   */
  readonly lines?: SnapshotLines<State>;
}

/** The snapshot's data as lines, and a reader of them (JournalFormat `lines`). */
export interface SnapshotLines<State> {
  /** The data's JSON as lines, none holding a newline, that joined by newlines parse as `toData(state)` would. */
  write(state: State): Iterable<string>;
  reader(): SnapshotReader<State>;
}

/** Builds the state from the lines `write` wrote, one at a time. */
export interface SnapshotReader<State> {
  /** The next line; a reason when it shows the data damaged. */
  line(text: string): string | undefined;
  /** After the last line: the state, or a reason when the lines did not finish the data. */
  end(): { state: State } | { damage: string };
}

export const COMPACT_MIN_BYTES = 1024 * 1024;

export function journalPathOf(snapshotPath: string): string {
  return snapshotPath.replace(/\.json$/, '') + '.journal';
}

/** Where this process's view of the files stands. */
export interface Cursor {
  generation: number;
  /** inode of the journal the offset belongs to. */
  ino: number;
  /** end of the last complete line applied. */
  offset: number;
  snapshotBytes: number;
  /** whether the journal's lines carry checksums (every journal this version writes). */
  checked: boolean;
}

type AnyFormat<State, Op> = JournalFormat<State, Op, unknown, unknown>;

export interface Loaded<State> {
  state: State;
  cursor: Cursor;
  recoveries: Recovery[];
}

/** Thrown by a read-only load that raced a compaction; the caller reads again. */
class ConcurrentCompaction extends Error {}

/**
 * Reads the files. With `repair` (the caller holds the lock) it also makes them
 * consistent: moves damaged files aside, cuts a torn tail, replaces a folded journal.
 * Without it (a read-only view) it reports what is valid and changes nothing; the next
 * writer repairs.
 */
export async function loadJournaled<State, Op>(path: string, format: AnyFormat<State, Op>, repair: boolean): Promise<Loaded<State>> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await loadOnce(path, format, repair);
    } catch (err) {
      if (!(err instanceof ConcurrentCompaction) || attempt >= 20) throw err;
    }
  }
}

async function loadOnce<State, Op>(path: string, format: AnyFormat<State, Op>, repair: boolean): Promise<Loaded<State>> {
  const journalPath = journalPathOf(path);
  const recoveries: Recovery[] = [];
  const snap = await readSnapshot(path, format);
  const state = snap.snapshot ? snap.snapshot.state : format.empty();
  const generation = snap.snapshot?.generation ?? 0;
  if (snap.damage !== undefined && repair) recoveries.push(await moveAside(path, snap.damage));

  const snapshotUsable = snap.snapshot !== undefined;
  // Ops are applied as they are read; a journal older than the snapshot is only checked.
  const journal = await readJournal(journalPath, format, (journalGeneration): ((op: Op) => void) | undefined => {
    if (journalGeneration > generation && snapshotUsable && !repair) throw new ConcurrentCompaction();
    // Normal case; or the snapshot is gone or damaged and the journal's ops are salvaged on their own.
    if (journalGeneration >= generation || !snapshotUsable) return (op) => format.apply(state, op);
    return undefined;
  });
  let needsCompaction = snap.damage !== undefined;
  let replaceJournal = journal === undefined;
  let offset = 0;
  if (journal !== undefined) {
    if (journal.applied) {
      offset = journal.bodyStart + journal.consumed;
      // A journal from before line checksums is rewritten in the checked form.
      if (journal.generation !== generation || !journal.checked) needsCompaction = true;
    } else if (snapshotUsable) {
      // Compaction finished the snapshot but not the journal: its ops are in the snapshot.
      replaceJournal = true;
    }
    if (journal.damage !== undefined) {
      needsCompaction = true;
      if (repair) recoveries.push(await moveAside(journalPath, journal.damage));
    }
  }

  let cursor: Cursor = { generation, ino: journal?.ino ?? -1, offset, snapshotBytes: snap.bytes, checked: journal?.checked ?? true };
  if (repair) {
    if (needsCompaction) {
      cursor = await compact(path, format, state, Math.max(generation, journal?.generation ?? 0) + 1);
    } else if (replaceJournal) {
      cursor = await writeJournal(journalPath, format, generation, snap.bytes);
    } else if (journal !== undefined && journal.partial > 0) {
      await truncateTo(journalPath, offset);
    }
  }
  return { state, cursor, recoveries };
}

async function writeJournal(journalPath: string, format: { name: string; version: number }, generation: number, snapshotBytes: number): Promise<Cursor> {
  const header = headerLine(format, generation);
  await writeFileAtomic(journalPath, header);
  const info = await stat(journalPath);
  return { generation, ino: info.ino, offset: Buffer.byteLength(header), snapshotBytes, checked: true };
}

async function truncateTo(journalPath: string, offset: number): Promise<void> {
  const handle = await open(journalPath, 'r+');
  try {
    await handle.truncate(offset);
    await handle.datasync();
  } finally {
    await handle.close();
  }
}

/** Folds the journal into a new snapshot (caller holds the lock). */
export async function compact<State, Op>(path: string, format: AnyFormat<State, Op>, state: State, generation: number): Promise<Cursor> {
  const bytes = await writeSnapshot(path, format, state, generation);
  crashPoint(`${format.label}.compact.after_snapshot`);
  const cursor = await writeJournal(journalPathOf(path), format, generation, bytes);
  crashPoint(`${format.label}.compact.after_journal`);
  return cursor;
}

export function shouldCompact(cursor: Cursor): boolean {
  return cursor.offset > Math.max(COMPACT_MIN_BYTES, cursor.snapshotBytes);
}

export type TailResult<Op> = { kind: 'replaced' } | { kind: 'tail'; ops: Op[]; offset: number; partial: number; damage?: string };

/*
 * The per-commit calls below (stat, open, read, write, close) are synchronous: each is a
 * few microseconds on a local disk, less than a trip through libuv's thread pool. Only
 * the fdatasync, which waits for the device, runs off the event loop.
 */

/** Ops appended by other processes since `cursor`, or 'replaced' if the journal was swapped. */
export function readTail<Op>(path: string, cursor: Cursor, opSchema: z.ZodType<Op>): TailResult<Op> {
  const journalPath = journalPathOf(path);
  let info;
  try {
    info = statSync(journalPath);
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return { kind: 'replaced' };
    throw err;
  }
  if (info.ino !== cursor.ino || info.size < cursor.offset) return { kind: 'replaced' };
  if (info.size === cursor.offset) return { kind: 'tail', ops: [], offset: cursor.offset, partial: 0 };
  const fd = openSync(journalPath, constants.O_RDONLY | NO_FOLLOW);
  try {
    // Same path, but compaction may have swapped the file since the stat.
    if (fstatSync(fd).ino !== cursor.ino) return { kind: 'replaced' };
    const buffer = Buffer.allocUnsafe(info.size - cursor.offset);
    const bytesRead = readSync(fd, buffer, 0, buffer.length, cursor.offset);
    const parsed = parseLines(buffer.subarray(0, bytesRead), opSchema, cursor.checked);
    return { kind: 'tail', ops: parsed.ops, offset: cursor.offset + parsed.consumed, partial: parsed.partial, ...(parsed.damage !== undefined && { damage: parsed.damage }) };
  } finally {
    closeSync(fd);
  }
}

/** Opens the journal for appending; the caller holds the lock, so it is the cursor's file. */
export function openJournal(path: string): { fd: number; ino: number } {
  const fd = openSync(journalPathOf(path), constants.O_RDWR | NO_FOLLOW);
  return { fd, ino: fstatSync(fd).ino };
}

/**
 * Appends complete lines at the cursor and syncs them (caller holds the lock and has
 * read the tail, so the cursor is the end of the valid journal; anything after it is a
 * torn append and is overwritten, then cut). Durable when this resolves.
 */
export async function appendLines(fd: number, cursor: Cursor, lines: string, crashLabel: string): Promise<Cursor> {
  const buffer = Buffer.from(lines, 'utf8');
  faultPoint(`${crashLabel}.append.write`, 'write');
  writeFully(fd, buffer, cursor.offset);
  const end = cursor.offset + buffer.length;
  if (fstatSync(fd).size > end) ftruncateSync(fd, end);
  crashPoint(`${crashLabel}.append.before_sync`);
  faultPoint(`${crashLabel}.append.sync`, 'fdatasync');
  await syncs.data(fd);
  return { ...cursor, offset: end };
}

/**
 * After a failed append (a full disk, an I/O error): cuts the journal back to where the
 * append started and syncs that, so lines of a commit reported as failed can never be
 * replayed by the next load. True when the cut is durable; false when even that failed,
 * and the failed commit may or may not come back.
 */
export function cutBack(fd: number, offset: number): boolean {
  try {
    if (fstatSync(fd).size > offset) ftruncateSync(fd, offset);
    syncs.dataNow(fd);
    return true;
  } catch {
    return false;
  }
}
