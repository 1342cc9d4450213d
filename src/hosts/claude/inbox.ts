/**
 * The Claude listener inbox (docs/CLAUDE.md "How a message reaches an idle session"):
 * `inbox/<session>.jsonl` under the state root holds one JSON record per line; the MCP
 * server's notifier appends, `interlink-mcp wait` reads from the byte offset kept in
 * `inbox/<session>.cursor`.
 *
 * What it guarantees:
 * - Writers take `<session>.io-lock` (a name no other session's listener lock can have). Each first cuts back a partial final line left by a
 *   writer that died mid-append, so the file is always complete lines plus at most one
 *   partial tail, and a partial line is never glued to the next record.
 * - `appendInboxRecord` resolves only once its line is complete and fdatasynced.
 * - Readers return complete lines only and never consume a partial tail; a complete line
 *   that is not a valid record is skipped but consumed, so it cannot wedge the inbox.
 * - The cursor is replaced atomically and names the byte just after the last line
 *   returned, so a record appended while a batch was being read is never skipped.
 * - A damaged or implausible cursor reads as 0: re-showing notices beats losing them.
 * - The cursor belongs to the listener: call `readInboxBatch` and `commitCursor` while
 *   holding the listener lock (`<session>.lock`, `withListenerLock` in listener.ts),
 *   which at most one listener holds.
 */
import { constants } from 'node:fs';
import { open, readFile, type FileHandle } from 'node:fs/promises';
import { makePrivateDir, NO_FOLLOW, PRIVATE_FILE } from '../../store/private.js';
import { z } from 'zod';
import { inboxPaths, type InboxPaths } from '../../config/layout.js';
import { unsafePathReason } from '../../config/paths.js';
import { MAX_NOTICE_BYTES } from '../../notices/notice.js';
import { asStorageError, errnoCode, InterlinkError, messageOf } from '../../errors.js';
import { describeSchemaError, parseJsonWith } from '../../json.js';
import { log } from '../../log.js';
import { fsyncDirectory, writeFileAtomic } from '../../store/atomic.js';
import { moveAside } from '../../store/json-store.js';
import { withFileLock } from '../../store/lock.js';

export const INBOX_BATCH_MAX_RECORDS = 64;
export const INBOX_BATCH_MAX_BYTES = 256 * 1024;
/** Far beyond any record written here; a longer line is damage and is skipped unread. */
const MAX_LINE_BYTES = 1024 * 1024;
const READ_CHUNK_BYTES = 64 * 1024;
const NEWLINE = 0x0a;

const noticeRecordSchema = z.object({
  v: z.literal(1),
  kind: z.literal('notice'),
  notification_id: z.string().min(1).max(256),
  session: z.string().min(1),
  count: z.number().int().nonnegative(),
  at: z.number().int().nonnegative(),
  text: z.string().refine((text) => Buffer.byteLength(text, 'utf8') <= MAX_NOTICE_BYTES, {
    message: `longer than ${MAX_NOTICE_BYTES} bytes`,
  }),
  /** The mailbox a mail notice points at (absent on pairing notices and older records). */
  mailbox: z
    .object({
      identity: z.string().regex(/^[A-Za-z0-9_-]{43}$/),
      // A stored line: the path rule only, so a session named before the hidden-character rule keeps its notices.
      session: z.string().refine((s) => unsafePathReason(s) === undefined, 'not a safe session id'),
    })
    .optional(),
});

/** One inbox line. Discriminated on `kind` so later kinds can join; only notices exist now. */
export const inboxRecordSchema = z.discriminatedUnion('kind', [noticeRecordSchema]);
export type InboxRecord = z.infer<typeof inboxRecordSchema>;

const cursorSchema = z.object({ offset: z.number().int().nonnegative() });

function encodeRecord(session: string, record: InboxRecord): Buffer {
  const parsed = inboxRecordSchema.safeParse(record);
  if (!parsed.success) {
    const tooLarge = parsed.error.issues.some((issue) => issue.path[0] === 'text' && issue.code === 'custom');
    throw new InterlinkError(tooLarge ? 'too_large' : 'usage', `inbox record refused: ${describeSchemaError(parsed.error)}`);
  }
  if (parsed.data.session !== session) {
    throw new InterlinkError('usage', `inbox record for session ${JSON.stringify(parsed.data.session)} refused by the inbox of ${JSON.stringify(session)}`);
  }
  return Buffer.from(JSON.stringify(parsed.data) + '\n', 'utf8');
}

/** Length of the file's complete lines: everything up to and including its last newline. */
async function completeLength(handle: FileHandle, size: number): Promise<number> {
  const buf = Buffer.alloc(Math.min(READ_CHUNK_BYTES, size));
  let end = size;
  while (end > 0) {
    const start = Math.max(0, end - buf.length);
    const { bytesRead } = await handle.read(buf, 0, end - start, start);
    const newline = buf.subarray(0, bytesRead).lastIndexOf(NEWLINE);
    if (newline >= 0) return start + newline + 1;
    end = start;
  }
  return 0;
}

async function writeAll(handle: FileHandle, data: Buffer): Promise<void> {
  let written = 0;
  while (written < data.length) {
    const { bytesWritten } = await handle.write(data, written, data.length - written);
    written += bytesWritten;
  }
}

async function appendLine(paths: InboxPaths, line: Buffer): Promise<void> {
  await makePrivateDir(paths.dir);
  // Never through a link: one planted in place of the inbox would send notices elsewhere.
  const handle = await open(paths.file, constants.O_RDWR | constants.O_APPEND | constants.O_CREAT | NO_FOLLOW, PRIVATE_FILE);
  let size: number;
  try {
    size = (await handle.stat()).size;
    const complete = await completeLength(handle, size);
    if (complete < size) {
      await handle.truncate(complete);
      log.warn('inbox_tail_repaired', { file: paths.file, dropped_bytes: size - complete });
    }
    try {
      await writeAll(handle, line);
    } catch (err) {
      // Leave no partial line behind when we can; the next writer repairs it otherwise.
      await handle.truncate(complete).catch(() => undefined);
      throw err;
    }
    await handle.datasync();
  } finally {
    await handle.close();
  }
  // A new (or emptied) file: make its directory entry durable too.
  if (size === 0) await fsyncDirectory(paths.dir);
}

/**
 * Appends one record as one line. Durable when it resolves: the line is complete and
 * fdatasynced (and a new file's directory entry synced), so the notifier may report
 * `inbox_queued`. Creates the inbox directory on first use.
 */
export async function appendInboxRecord(stateDir: string, session: string, record: InboxRecord): Promise<void> {
  const paths = inboxPaths(stateDir, session);
  const line = encodeRecord(session, record);
  await withFileLock(paths.file, async () => {
    try {
      await appendLine(paths, line);
    } catch (err) {
      throw asStorageError(err, paths.file);
    }
  }, { lockPath: paths.ioLock });
}

async function readCursor(paths: InboxPaths): Promise<number> {
  let text: string;
  try {
    text = await readFile(paths.cursor, 'utf8');
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return 0;
    throw err;
  }
  const parsed = parseJsonWith(cursorSchema, text);
  if (parsed.ok) return parsed.value.offset;
  await moveAside(paths.cursor, parsed.reason);
  return 0;
}

/** The cursor if it sits at a line boundary inside the file, else 0 (re-show, never lose). */
async function checkedStart(handle: FileHandle, paths: InboxPaths, cursor: number): Promise<number> {
  if (cursor === 0) return 0;
  const size = (await handle.stat()).size;
  let boundary = false;
  if (cursor <= size) {
    const byte = Buffer.alloc(1);
    await handle.read(byte, 0, 1, cursor - 1);
    boundary = byte[0] === NEWLINE;
  }
  if (!boundary) log.warn('inbox_cursor_reset', { file: paths.cursor, offset: cursor, size, reason: 'not at a line boundary of the inbox' });
  return boundary ? cursor : 0;
}

function parseLine(line: Buffer): { record: InboxRecord } | { reason: string } {
  let data: unknown;
  try {
    data = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(line));
  } catch (err) {
    return { reason: `not JSON: ${messageOf(err)}` };
  }
  const parsed = inboxRecordSchema.safeParse(data);
  return parsed.success ? { record: parsed.data } : { reason: describeSchemaError(parsed.error) };
}

export interface InboxBatch {
  records: InboxRecord[];
  /** The records' texts, one paragraph each: what the listener shows. */
  text: string;
  /** Where this batch began (the cursor, or 0 where the cursor was unusable). */
  startOffset: number;
  /** The byte just after the last line consumed; equals `startOffset` when nothing was. */
  endOffset: number;
  /** Complete lines consumed that were not valid records. */
  skipped: number;
}

export interface BatchLimits {
  maxRecords?: number;
  maxBytes?: number;
}

/** Collects complete lines from `start` until a limit is reached or only a partial tail is left. */
class BatchScan {
  readonly records: InboxRecord[] = [];
  skipped = 0;
  end: number;
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private oversized = false;

  constructor(
    private readonly file: string,
    private readonly start: number,
    private readonly limits: Required<BatchLimits>,
  ) {
    this.end = start;
  }

  get full(): boolean {
    return this.records.length >= this.limits.maxRecords || this.end - this.start >= this.limits.maxBytes;
  }

  /** Feeds bytes that begin at file offset `at`; returns false once the batch is full. */
  feed(chunk: Buffer, at: number): boolean {
    let lineStart = 0;
    for (let newline = chunk.indexOf(NEWLINE); newline >= 0; newline = chunk.indexOf(NEWLINE, lineStart)) {
      this.takeLine(chunk.subarray(lineStart, newline), at + newline + 1);
      lineStart = newline + 1;
      if (this.full) return false;
    }
    this.keepTail(chunk.subarray(lineStart));
    return true;
  }

  private takeLine(lastPart: Buffer, lineEnd: number): void {
    const result = this.oversized ? { reason: `longer than ${MAX_LINE_BYTES} bytes` } : parseLine(Buffer.concat([...this.pending, lastPart]));
    if ('record' in result) {
      this.records.push(result.record);
    } else {
      this.skipped++;
      log.warn('inbox_record_skipped', { file: this.file, offset: this.end, reason: result.reason });
    }
    this.end = lineEnd;
    this.pending = [];
    this.pendingBytes = 0;
    this.oversized = false;
  }

  private keepTail(tail: Buffer): void {
    if (this.oversized || tail.length === 0) return;
    this.pendingBytes += tail.length;
    if (this.pendingBytes > MAX_LINE_BYTES) {
      this.oversized = true;
      this.pending = [];
      return;
    }
    this.pending.push(Buffer.from(tail));
  }
}

/**
 * The next batch after the cursor: complete records only, at most 64, stopping once
 * the lines consumed reach 256 KiB (so one large record still comes alone). Reads only;
 * the caller commits `endOffset` with `commitCursor` after handing the batch over.
 */
export async function readInboxBatch(stateDir: string, session: string, limits: BatchLimits = {}): Promise<InboxBatch> {
  const paths = inboxPaths(stateDir, session);
  const bounds = { maxRecords: limits.maxRecords ?? INBOX_BATCH_MAX_RECORDS, maxBytes: limits.maxBytes ?? INBOX_BATCH_MAX_BYTES };
  try {
    const cursor = await readCursor(paths);
    let handle: FileHandle;
    try {
      handle = await open(paths.file, 'r');
    } catch (err) {
      if (errnoCode(err) === 'ENOENT') return { records: [], text: '', startOffset: cursor, endOffset: cursor, skipped: 0 };
      throw err;
    }
    try {
      const start = await checkedStart(handle, paths, cursor);
      const scan = new BatchScan(paths.file, start, bounds);
      const buf = Buffer.alloc(READ_CHUNK_BYTES);
      for (let at = start; ; ) {
        const { bytesRead } = await handle.read(buf, 0, buf.length, at);
        if (bytesRead === 0 || !scan.feed(buf.subarray(0, bytesRead), at)) break;
        at += bytesRead;
      }
      const records = scan.records;
      return { records, text: records.map((r) => r.text).join('\n\n'), startOffset: start, endOffset: scan.end, skipped: scan.skipped };
    } finally {
      await handle.close();
    }
  } catch (err) {
    throw asStorageError(err, paths.file);
  }
}

/** Replaces the cursor atomically (temp, fsync, rename, fsync of the directory). */
export async function commitCursor(stateDir: string, session: string, endOffset: number): Promise<void> {
  const paths = inboxPaths(stateDir, session);
  if (!Number.isSafeInteger(endOffset) || endOffset < 0) throw new InterlinkError('usage', `inbox cursor ${endOffset} is not a byte offset`);
  try {
    await writeFileAtomic(paths.cursor, JSON.stringify({ offset: endOffset }) + '\n', { mode: 0o600 });
  } catch (err) {
    throw asStorageError(err, paths.cursor);
  }
}
