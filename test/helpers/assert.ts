/** Assertions shared by test files (imports vitest: never load from a child process). */
import { expect } from 'vitest';
import { InterlinkError, type ErrorCode } from '../../src/errors.js';

/** Awaits a promise that must reject with an InterlinkError of `code`; returns the error. */
export async function rejectsWith(promise: Promise<unknown>, code: ErrorCode): Promise<InterlinkError> {
  const err: unknown = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(InterlinkError);
  expect((err as InterlinkError).code).toBe(code);
  return err as InterlinkError;
}
