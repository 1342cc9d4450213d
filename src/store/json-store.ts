/**
 * Small JSON state files (peers, pairing, failed deliveries): read with a schema, edit
 * under the sidecar lock, replace atomically. A writer that finds a file that does not
 * parse or does not match its schema moves it aside with a timestamp and reports it in
 * a sentence (damage.ts); the caller carries on with the default value, so a bad file is
 * never silently reset and never a crash loop. A view (`peekJson`) never moves anything.
 */
import { randomBytes } from 'node:crypto';
import { readFile, rename } from 'node:fs/promises';
import type { z } from 'zod';
import { errnoCode, InterlinkError } from '../errors.js';
import { parseJsonWith } from '../json.js';
import { writeFileAtomic } from './atomic.js';
import { jsonProblem, reportDamage, schemaProblem } from './damage.js';
import { withFileLock } from './lock.js';

export interface Recovery {
  file: string;
  movedTo: string;
  reason: string;
  /** The sentence reported to the person: file, problem, where the original went, what is unavailable. */
  message: string;
}

/** What does not work while a file is damaged, for the report (damage.ts). */
export interface StoreOptions {
  unavailable?: string;
}

/** `<file>.corrupt-<timestamp>-<random>`: the random part keeps two asides apart. */
export function asideName(path: string, now = new Date()): string {
  return `${path}.corrupt-${now.toISOString().replace(/[:.]/g, '-')}-${randomBytes(3).toString('hex')}`;
}

/** Moves a damaged file out of the way and says where it went. Caller holds the lock. */
export async function moveAside(path: string, reason: string, options: StoreOptions = {}): Promise<Recovery> {
  const movedTo = asideName(path);
  await rename(path, movedTo);
  const message = reportDamage({ file: path, problem: reason, movedTo, ...(options.unavailable !== undefined && { unavailable: options.unavailable }) });
  return { file: path, movedTo, reason, message };
}

export type ReadResult<T> = { value: T; recovered?: Recovery };

export type Validated<T> = { kind: 'ok'; value: T } | { kind: 'missing' } | { kind: 'damaged'; reason: string };

/** Reads and validates without the lock and without repairing anything (for views). */
export async function peekJson<T>(path: string, schema: z.ZodType<T>): Promise<Validated<T>> {
  return readValidated(path, schema);
}

async function readValidated<T>(path: string, schema: z.ZodType<T>): Promise<Validated<T>> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return { kind: 'missing' };
    throw new InterlinkError('storage', `cannot read ${path} (${errnoCode(err) ?? String(err)})`, undefined, { cause: err });
  }
  const parsed = parseJsonWith(schema, text);
  if (parsed.ok) return { kind: 'ok', value: parsed.value };
  // damage.ts words the report for a person: the line, and what was expected where.
  return { kind: 'damaged', reason: parsed.stage === 'json' ? jsonProblem(text, parsed.error) : schemaProblem(text, parsed.data, parsed.error) };
}

/** Reads the file; a damaged one is moved aside and the fallback used. Caller holds the lock. */
async function readOrRepair<T>(path: string, schema: z.ZodType<T>, fallback: () => T, options: StoreOptions): Promise<ReadResult<T>> {
  const read = await readValidated(path, schema);
  if (read.kind === 'ok') return { value: read.value };
  if (read.kind === 'missing') return { value: fallback() };
  return { value: fallback(), recovered: await moveAside(path, read.reason, options) };
}

/**
 * Reads without the lock. Only when the file looks damaged does it take the lock and
 * look again, so a writer's fresh file is never mistaken for damage and two readers
 * never both move it.
 */
export async function readJson<T>(path: string, schema: z.ZodType<T>, fallback: () => T, options: StoreOptions = {}): Promise<ReadResult<T>> {
  const read = await readValidated(path, schema);
  if (read.kind === 'ok') return { value: read.value };
  if (read.kind === 'missing') return { value: fallback() };
  return withFileLock(path, () => readOrRepair(path, schema, fallback, options));
}

export interface Edited<T, R> {
  next: T | undefined;
  result: R;
}

/**
 * Read-modify-write under the lock. `edit` returns the new value (or `undefined` to
 * leave the file untouched) and a result for the caller. The new value is durable
 * before this resolves. An `edit` may wait (to read or edit a file that depends on this
 * one while the lock keeps this one still); it must not take this file's lock again.
 */
export async function updateJson<T, R extends object>(
  path: string,
  schema: z.ZodType<T>,
  fallback: () => T,
  edit: (current: T) => Edited<T, R> | Promise<Edited<T, R>>,
  options: StoreOptions = {},
): Promise<R & { recovered?: Recovery }> {
  return withFileLock(path, async () => {
    const { value, recovered } = await readOrRepair(path, schema, fallback, options);
    const { next, result } = await edit(value);
    if (next !== undefined) await writeFileAtomic(path, JSON.stringify(next, null, 2) + '\n');
    return recovered ? { ...result, recovered } : { ...result };
  });
}
