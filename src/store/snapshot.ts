/**
 * The snapshot of a journaled store (journal.ts): `{"format", "version", "generation",
 * "data"}` in one JSON file, replaced atomically.
 *
 * A format with `lines` (the relay's queues: up to 512 MiB of payload) has its data
 * written and read line by line, never as one string: the envelope's members on a first
 * line ending in `"data":`, the data's lines, and a last line `}`. That is still one JSON
 * document, which a reader of the whole file (an older version) parses as before. A file
 * whose first line is anything else is read whole, as every snapshot written before was.
 */
import { constants } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { z } from 'zod';
import { errnoCode, InterlinkError } from '../errors.js';
import { describeSchemaError, parseJsonWith } from '../json.js';
import { writeFileAtomic } from './atomic.js';
import { headerSchema, NEWLINE } from './journal-lines.js';
import type { JournalFormat, SnapshotLines } from './journal.js';
import { linesOf, readLineRuns } from './line-runs.js';
import { NO_FOLLOW } from './private.js';

const snapshotEnvelopeSchema = headerSchema.extend({ data: z.unknown() });

/** The envelope's first line in the line layout is short; a first line not within this many bytes is the whole-file layout. */
const HEAD_BYTES = 4096;

type AnyFormat<State, Op> = JournalFormat<State, Op, unknown, unknown>;

export interface SnapshotRead<State> {
  snapshot?: { generation: number; state: State };
  bytes: number;
  damage?: string;
}

function cannot(verb: string, path: string, err: unknown): InterlinkError {
  return new InterlinkError('storage', `cannot ${verb} ${path} (${errnoCode(err) ?? String(err)})`, undefined, { cause: err });
}

function wrongFormat<State, Op>(header: { format: string; version: number }, format: AnyFormat<State, Op>): string | undefined {
  if (header.format === format.name && header.version === format.version) return undefined;
  return `snapshot is ${header.format} v${header.version}, expected ${format.name} v${format.version}`;
}

export async function readSnapshot<State, Op>(path: string, format: AnyFormat<State, Op>): Promise<SnapshotRead<State>> {
  let handle: FileHandle;
  try {
    handle = await open(path, constants.O_RDONLY | NO_FOLLOW);
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return { bytes: 0 };
    throw cannot('read', path, err);
  }
  try {
    const bytes = (await handle.stat()).size;
    const head = Buffer.alloc(Math.min(HEAD_BYTES, bytes));
    await handle.read(head, 0, head.length, 0);
    const headEnd = head.indexOf(NEWLINE);
    const first = headEnd < 0 ? undefined : head.toString('utf8', 0, headEnd);
    if (format.lines !== undefined && first?.endsWith('"data":') === true) return await readLines(handle, headEnd + 1, first, bytes, format, format.lines);
    return readWhole((await handle.readFile()).toString('utf8'), bytes, format);
  } catch (err) {
    if (err instanceof InterlinkError) throw err;
    throw cannot('read', path, err);
  } finally {
    await handle.close();
  }
}

function readWhole<State, Op>(text: string, bytes: number, format: AnyFormat<State, Op>): SnapshotRead<State> {
  const outer = parseJsonWith(snapshotEnvelopeSchema, text);
  if (!outer.ok) return { bytes, damage: outer.stage === 'json' ? 'snapshot is not JSON' : `snapshot ${outer.reason}` };
  const wrong = wrongFormat(outer.value, format);
  if (wrong !== undefined) return { bytes, damage: wrong };
  const data = format.dataSchema.safeParse(outer.value.data);
  if (!data.success) return { bytes, damage: `snapshot data ${describeSchemaError(data.error)}` };
  return { snapshot: { generation: outer.value.generation, state: format.fromData(data.data) }, bytes };
}

/** The line layout: each line handed to the format's reader as it is read, so only a few MiB of the file are in memory at once. */
async function readLines<State, Op>(handle: FileHandle, start: number, first: string, bytes: number, format: AnyFormat<State, Op>, lines: SnapshotLines<State>): Promise<SnapshotRead<State>> {
  const outer = parseJsonWith(snapshotEnvelopeSchema, `${first}null}`);
  if (!outer.ok) return { bytes, damage: `snapshot ${outer.reason}` };
  const wrong = wrongFormat(outer.value, format);
  if (wrong !== undefined) return { bytes, damage: wrong };
  const reader = lines.reader();
  let closed = false;
  let damage: string | undefined;
  const read = await readLineRuns(handle, start, (run) => {
    for (const line of linesOf(run)) {
      if (closed) damage = 'has lines after its end';
      else if (line === '}') closed = true;
      else damage = reader.line(line);
      if (damage !== undefined) return false;
    }
    return true;
  });
  if (damage === undefined && read.partial > 0) damage = 'ends without a newline';
  if (damage === undefined && !closed) damage = 'ends before its data does';
  const end = damage === undefined ? reader.end() : { damage };
  if ('damage' in end) return { bytes, damage: `snapshot data ${end.damage}` };
  return { snapshot: { generation: outer.value.generation, state: end.state }, bytes };
}

/** The snapshot's text in the line layout, a line at a time. */
function* snapshotPieces<State>(head: string, state: State, lines: SnapshotLines<State>): Generator<string> {
  yield `${head.slice(0, -1)},"data":\n`;
  for (const line of lines.write(state)) yield `${line}\n`;
  yield '}\n';
}

/**
 * Writes the snapshot atomically; resolves with its size in bytes. A format with `lines`
 * is written a batch of lines at a time: the state must not change until this resolves
 * (the store's commits wait for it).
 */
export async function writeSnapshot<State, Op>(path: string, format: AnyFormat<State, Op>, state: State, generation: number): Promise<number> {
  if (format.lines === undefined) return writeFileAtomic(path, JSON.stringify({ format: format.name, version: format.version, generation, data: format.toData(state) }));
  const head = JSON.stringify({ format: format.name, version: format.version, generation });
  return writeFileAtomic(path, snapshotPieces(head, state, format.lines));
}
