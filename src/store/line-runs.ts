/**
 * A file of lines read in bounded memory: a journal's replay (journal-read.ts) and the
 * relay's snapshot (snapshot.ts) read a file of hundreds of MiB a few MiB at a time,
 * instead of holding all of it, and all that was parsed from it, at once.
 */
import type { FileHandle } from 'node:fs/promises';
import { NEWLINE } from './journal-lines.js';

/** About this much is read at a time (more only for a line longer than that). */
export const RUN_BYTES = 4 * 1024 * 1024;

export interface LineRuns {
  /** Bytes after the last newline (none when `onRun` stopped the read): a write in progress, a torn append, or an unfinished file. */
  partial: number;
}

/**
 * Hands `onRun` the file from `start` on as runs of complete lines, each run ending with a
 * newline, in order; `onRun` returning false stops the read. One buffer is read into again
 * and again, so `onRun` must copy what it keeps (`toString` does). A line longer than the
 * buffer doubles it, so a long line costs its length, not its square.
 */
export async function readLineRuns(handle: FileHandle, start: number, onRun: (run: Buffer) => boolean): Promise<LineRuns> {
  let buffer = Buffer.allocUnsafe(RUN_BYTES);
  let position = start;
  /** Bytes at the buffer's start after the last newline handed on. */
  let held = 0;
  for (;;) {
    if (held === buffer.length) {
      const bigger = Buffer.allocUnsafe(buffer.length * 2);
      buffer.copy(bigger, 0, 0, held);
      buffer = bigger;
    }
    const { bytesRead } = await handle.read(buffer, held, buffer.length - held, position);
    if (bytesRead === 0) return { partial: held };
    position += bytesRead;
    const length = held + bytesRead;
    const end = buffer.lastIndexOf(NEWLINE, length - 1);
    if (end < 0) {
      held = length;
      continue;
    }
    if (!onRun(buffer.subarray(0, end + 1))) return { partial: 0 };
    buffer.copyWithin(0, end + 1, length);
    held = length - end - 1;
  }
}

/** Each line of `run` (a run from `readLineRuns`) as text, without its newline. */
export function* linesOf(run: Buffer): Generator<string> {
  let start = 0;
  for (let end = run.indexOf(NEWLINE); end >= 0; end = run.indexOf(NEWLINE, start)) {
    yield run.toString('utf8', start, end);
    start = end + 1;
  }
}
