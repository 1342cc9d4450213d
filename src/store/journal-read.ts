/**
 * A journal file read from the start (journal.ts `loadJournaled`): its header, then its ops
 * applied as they are parsed, a few MiB at a time (line-runs.ts). A journal may be as big
 * as its snapshot; reading it whole held the file and every op parsed from it at once.
 */
import { constants } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import type { z } from 'zod';
import { errnoCode, InterlinkError } from '../errors.js';
import { parseJsonWith } from '../json.js';
import { journalFormatName, journalHeaderSchema, LINE_CHECK, NEWLINE, parseLines } from './journal-lines.js';
import { readLineRuns } from './line-runs.js';
import { NO_FOLLOW } from './private.js';

export interface JournalRead {
  ino: number;
  /** -1 when the header is damaged */
  generation: number;
  /** whether its lines carry checksums */
  checked: boolean;
  /** whether its ops were applied (`onHeader` asked for them) */
  applied: boolean;
  /** byte offset where the body starts (after the header line) */
  bodyStart: number;
  /** bytes of the body in complete, valid lines */
  consumed: number;
  /** bytes after the last newline: a write in progress or a torn append */
  partial: number;
  damage?: string;
}

interface Header<Op> {
  generation: number;
  checked: boolean;
  bodyStart: number;
  apply: ((op: Op) => void) | undefined;
}

/**
 * Reads the journal at `path` (undefined: there is none). Once its header is read,
 * `onHeader` is told its generation and returns what applies each valid op, in order, or
 * undefined to only check them; it may throw, which stops the read.
 */
export async function readJournal<Op>(
  path: string,
  format: { name: string; version: number; opSchema: z.ZodType<Op> },
  onHeader: (generation: number) => ((op: Op) => void) | undefined,
): Promise<JournalRead | undefined> {
  let handle: FileHandle;
  try {
    handle = await open(path, constants.O_RDONLY | NO_FOLLOW);
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return undefined;
    throw new InterlinkError('storage', `cannot open ${path} (${errnoCode(err) ?? String(err)})`, undefined, { cause: err });
  }
  try {
    const info = await handle.stat();
    let header: Header<Op> | undefined;
    let badHeader = false;
    let consumed = 0;
    let damage: string | undefined;
    const read = await readLineRuns(handle, 0, (run) => {
      let body = run;
      if (header === undefined) {
        const end = run.indexOf(NEWLINE);
        const parsed = parseJsonWith(journalHeaderSchema, run.toString('utf8', 0, end));
        if (!parsed.ok || parsed.value.format !== journalFormatName(format) || parsed.value.version !== format.version) {
          badHeader = true;
          return false;
        }
        header = { generation: parsed.value.generation, checked: parsed.value.line_check === LINE_CHECK, bodyStart: end + 1, apply: onHeader(parsed.value.generation) };
        body = run.subarray(end + 1);
      }
      const lines = parseLines(body, format.opSchema, header.checked, consumed);
      if (header.apply !== undefined) for (const op of lines.ops) header.apply(op);
      consumed += lines.consumed;
      damage = lines.damage;
      return damage === undefined;
    });
    if (header === undefined) {
      return { ino: info.ino, generation: -1, checked: true, applied: false, bodyStart: 0, consumed: 0, partial: 0, damage: badHeader ? 'journal header is invalid' : 'journal has no header' };
    }
    const { generation, checked, bodyStart, apply } = header;
    return { ino: info.ino, generation, checked, applied: apply !== undefined, bodyStart, consumed, partial: read.partial, ...(damage !== undefined && { damage }) };
  } finally {
    await handle.close();
  }
}
