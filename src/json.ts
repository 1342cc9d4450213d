/**
 * JSON text from outside (a frame, a file, a hook's stdin) parsed and validated with its
 * zod schema in one step. The result says which step failed, so a caller that words its
 * own report (damage.ts names the line; the journal names the byte offset) still can.
 */
import type { z } from 'zod';

export type JsonParsed<T> =
  | { ok: true; value: T }
  /** not JSON; `reason` is `not JSON: <parser message>` */
  | { ok: false; stage: 'json'; reason: string; error: Error }
  /** JSON, but not of the schema; `reason` is describeSchemaError's, `data` what was parsed */
  | { ok: false; stage: 'schema'; reason: string; error: z.ZodError; data: unknown };

/** The first issue of a failed validation, as `<path>: <message>` (`top level` for the root). */
export function describeSchemaError(error: z.ZodError): string {
  const first = error.issues[0];
  if (!first) return 'does not match its schema';
  const where = first.path.length > 0 ? first.path.join('.') : 'top level';
  return `${where}: ${first.message}`;
}

export function parseJsonWith<T>(schema: z.ZodType<T>, text: string): JsonParsed<T> {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch (err) {
    // JSON.parse throws only SyntaxError for a string argument.
    const error = err as Error;
    return { ok: false, stage: 'json', reason: `not JSON: ${error.message}`, error };
  }
  const parsed = schema.safeParse(data);
  if (parsed.success) return { ok: true, value: parsed.data };
  return { ok: false, stage: 'schema', reason: describeSchemaError(parsed.error), error: parsed.error, data };
}
