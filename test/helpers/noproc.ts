/**
 * The no-/proc run: `npm run test:noproc` runs the lock, store and mailbox tests through
 * scripts/test-noproc.sh, which covers /proc with an empty tmpfs in a private mount
 * namespace (as on macOS, /proc is simply not there for the tests and every process they
 * start) and sets INTERLINK_TEST_NOPROC=1 inside it.
 */
import { existsSync } from 'node:fs';
import { expect } from 'vitest';

/** True in the no-/proc run. */
const procHidden = process.env.INTERLINK_TEST_NOPROC === '1';

/** True where the OS shows processes under /proc (Linux, outside the no-/proc run). */
export const procShown = existsSync('/proc/self/stat');

/** Fails a no-/proc run in which /proc is visible after all, so it cannot pass by testing the normal path. */
export function expectProcAsTheRunSays(): void {
  if (procHidden) expect(existsSync('/proc/self/stat'), '/proc/self/stat in the no-/proc run').toBe(false);
}
