/**
 * Reading JSON-lines logs that another process is still appending to.
 *
 * A writer appends `JSON + '\n'`; a reader that runs at the same moment can see the first
 * part of a long line (a read is not atomic with a concurrent write). Only a line that its
 * newline ends is whole, so the text after the last newline is left for the next read.
 */
import { existsSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';

/** The lines of `text` that a newline ends, without empty ones. */
export function wholeLines(text: string): string[] {
  const end = text.lastIndexOf('\n');
  return end < 0 ? [] : text.slice(0, end).split('\n').filter((line) => line !== '');
}

/** Each whole line of the log at `path`, parsed as JSON; none when the file is not there yet. */
export async function readJsonLines(path: string): Promise<unknown[]> {
  if (!existsSync(path)) return [];
  return wholeLines(await readFile(path, 'utf8')).map((line): unknown => JSON.parse(line));
}

/** readJsonLines without waiting (for callers that poll synchronously). */
export function readJsonLinesSync(path: string): unknown[] {
  if (!existsSync(path)) return [];
  return wholeLines(readFileSync(path, 'utf8')).map((line): unknown => JSON.parse(line));
}
