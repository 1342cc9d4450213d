/**
 * Small JSON state files (peers, pairing, failed deliveries): read with a schema, edit
 * under the sidecar lock, replace atomically. A file that does not parse or does not
 * match its schema is moved aside with a timestamp and reported; the caller carries on
 * with the default value, so a bad file is never silently reset and never a crash loop.
 */
import { readFile, rename } from 'node:fs/promises';
import type { z } from 'zod';
import { errnoCode, InterlinkError } from '../errors.js';
import { log } from '../log.js';
import { writeFileAtomic } from './atomic.js';
import { withFileLock } from './lock.js';

export interface Recovery {
  file: string;
  movedTo: string;
  reason: string;
}

export function asideName(path: string, now = new Date()): string {
  return `${path}.corrupt-${now.toISOString().replace(/[:.]/g, '-')}`;
}

/** Moves a damaged file out of the way and says where it went. */
export async function moveAside(path: string, reason: string): Promise<Recovery> {
  const movedTo = asideName(path);
  await rename(path, movedTo);
  const recovery = { file: path, movedTo, reason };
  log.error('store_corrupt', { ...recovery });
  return recovery;
}

export function describeSchemaError(error: z.ZodError): string {
  const first = error.issues[0];
  if (!first) return 'does not match its schema';
  const where = first.path.length > 0 ? first.path.join('.') : 'top level';
  return `${where}: ${first.message}`;
}

export type ReadResult<T> = { value: T; recovered?: Recovery };

export async function readJson<T>(path: string, schema: z.ZodType<T>, fallback: () => T): Promise<ReadResult<T>> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return { value: fallback() };
    throw new InterlinkError('storage', `cannot read ${path} (${errnoCode(err) ?? String(err)})`, undefined, { cause: err });
  }
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch (err) {
    return { value: fallback(), recovered: await moveAside(path, `not JSON: ${(err as Error).message}`) };
  }
  const parsed = schema.safeParse(data);
  if (!parsed.success) {
    return { value: fallback(), recovered: await moveAside(path, describeSchemaError(parsed.error)) };
  }
  return { value: parsed.data };
}

/**
 * Read-modify-write under the lock. `edit` returns the new value (or `undefined` to
 * leave the file untouched) and a result for the caller. The new value is durable
 * before this resolves.
 */
export async function updateJson<T, R extends object>(
  path: string,
  schema: z.ZodType<T>,
  fallback: () => T,
  edit: (current: T) => { next: T | undefined; result: R },
): Promise<R & { recovered?: Recovery }> {
  return withFileLock(path, async () => {
    const { value, recovered } = await readJson(path, schema, fallback);
    const { next, result } = edit(value);
    if (next !== undefined) await writeFileAtomic(path, JSON.stringify(next, null, 2) + '\n');
    return recovered ? { ...result, recovered } : { ...result };
  });
}
