/**
 * The lines of a journal file (store/journal.ts): the header naming the format, version,
 * generation and line check, and each op as `<checksum> <JSON>\n` — the checksum being
 * the first 8 bytes of SHA-256 of the JSON, in hex, so a flipped byte that leaves valid
 * JSON is caught, never applied. Lines starting with `{` come from journals written before
 * checksums and are read as they always were.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { parseJsonWith } from '../json.js';

/** The name of the per-line checksum, written in the journal header. */
export const LINE_CHECK = 'sha256-64';
const CHECK_CHARS = 16;

export const headerSchema = z.object({ format: z.string(), version: z.number().int(), generation: z.number().int().min(0) });
export const journalHeaderSchema = headerSchema.extend({ line_check: z.literal(LINE_CHECK).optional() });

export const NEWLINE = 0x0a;

export function journalFormatName(format: { name: string }): string {
  return `${format.name}-journal`;
}

export function headerLine(format: { name: string; version: number }, generation: number): string {
  return JSON.stringify({ format: journalFormatName(format), version: format.version, generation, line_check: LINE_CHECK }) + '\n';
}

function lineCheck(json: string): string {
  return createHash('sha256').update(json, 'utf8').digest('hex').slice(0, CHECK_CHARS);
}

/** One op as a journal line, with its checksum. */
export function journalLine(op: unknown): string {
  const json = JSON.stringify(op);
  return `${lineCheck(json)} ${json}\n`;
}

/** The JSON of a checked line, or a reason it is damaged. */
function checkedJson(line: string): { json: string } | { damage: string } {
  const json = line.slice(CHECK_CHARS + 1);
  if (line.charAt(CHECK_CHARS) !== ' ' || line.slice(0, CHECK_CHARS) !== lineCheck(json)) return { damage: 'fails its checksum' };
  return { json };
}

export interface ParsedLines<Op> {
  ops: Op[];
  /** bytes consumed by complete, valid lines. */
  consumed: number;
  /** a complete line that is not a valid op. */
  damage?: string;
  /** bytes after the last newline: a write in progress or a torn append. */
  partial: number;
}

/** `base`: where `buffer` starts in the journal's body, for the byte offsets damage is reported at. */
export function parseLines<Op>(buffer: Buffer, opSchema: z.ZodType<Op>, checked: boolean, base = 0): ParsedLines<Op> {
  const ops: Op[] = [];
  let start = 0;
  for (;;) {
    const end = buffer.indexOf(NEWLINE, start);
    if (end < 0) return { ops, consumed: start, partial: buffer.length - start };
    let text = buffer.toString('utf8', start, end);
    // A line that starts with `{` carries no checksum: written by a version from before
    // checksums still running beside this one (an upgrade), it is read as it always was.
    if (checked && !text.startsWith('{')) {
      const line = checkedJson(text);
      if ('damage' in line) return { ops, consumed: start, partial: 0, damage: `journal line at byte ${base + start} ${line.damage}` };
      text = line.json;
    }
    const parsed = parseJsonWith(opSchema, text);
    if (!parsed.ok) {
      const damage = parsed.stage === 'json' ? `journal line at byte ${base + start} is not JSON` : `journal line at byte ${base + start}: ${parsed.reason}`;
      return { ops, consumed: start, partial: 0, damage };
    }
    ops.push(parsed.value);
    start = end + 1;
  }
}
