/**
 * Named fault points for the fault tests (docs/RELIABILITY.md, "Faults below"): when
 * INTERLINK_FAULT_AT names a point, the write or sync step there throws the error the
 * kernel would give (EIO by default; ENOSPC, EROFS) instead of doing its I/O, so a test
 * meets a failing disk in a real process. `<point>@<n>` fails from the n-th passage on,
 * `*<count>` at most count times, and ` while <file>` only while that file exists, so a
 * test clears the fault by removing the file while the process keeps running. Costs one
 * comparison when unset.
 *
 * The points: `<store>.append.write` and `<store>.append.sync` (journal.ts: the append
 * of a commit and its fdatasync; the store is `mailbox`, `outbox`, `replay` or `relay`),
 * `atomic.write` and `atomic.sync` (atomic.ts: the temp file of every atomic write).
 */
import { existsSync } from 'node:fs';
import { constants } from 'node:os';
import { faultPointSpec } from '../config/env.js';

const spec = faultPointSpec();
const target = spec?.point;
let passages = 0;
let failures = 0;

const DESCRIPTIONS: Readonly<Record<string, string>> = { EIO: 'i/o error', ENOSPC: 'no space left on device', EROFS: 'read-only file system' };

/** Throws the injected error at `name` when the fault asks for it now; `syscall` names the step in the error. */
export function faultPoint(name: string, syscall: string): void {
  if (target === undefined || target !== name) return;
  const { from, code, count, whileFile } = spec!;
  if (++passages < from || (count !== undefined && failures >= count)) return;
  if (whileFile !== undefined && !existsSync(whileFile)) return;
  failures++;
  // Shaped like Node's own system errors, which is what the callers handle.
  throw Object.assign(new Error(`${code}: ${DESCRIPTIONS[code]}, ${syscall} (injected by INTERLINK_FAULT_AT at ${name})`), {
    code,
    errno: -constants.errno[code],
    syscall,
  });
}
