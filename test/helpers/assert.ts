/** Assertions shared by test files (imports vitest: never load from a child process). */
import { expect, vi } from 'vitest';
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

/** Runs `run`, which must throw an InterlinkError of `code`; returns the error. `label` names the case on failure. */
export function throwsWith(run: () => unknown, code: ErrorCode, label?: string): InterlinkError {
  let caught: unknown;
  try {
    run();
  } catch (err) {
    caught = err;
  }
  expect(caught, label).toBeInstanceOf(InterlinkError);
  expect((caught as InterlinkError).code, label ?? (caught as InterlinkError).message).toBe(code);
  return caught as InterlinkError;
}

/** Captures what is written to stderr (the structured log lines) until the spy is restored. */
export function captureStderr(): string[] {
  const lines: string[] = [];
  vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
    lines.push(String(chunk));
    return true;
  });
  return lines;
}
