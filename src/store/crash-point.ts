/**
 * Named crash points for the crash tests: when INTERLINK_CRASH_AT names a point, the
 * process kills itself with SIGKILL on reaching it, exactly as a power cut or an OOM kill
 * would stop it there. `<point>@<n>` kills it the n-th time it gets there (so a test can
 * let some operations complete first). Costs one string comparison when unset.
 */
import { crashPointTarget } from '../config/env.js';

const [target, nth] = parseTarget(crashPointTarget());
let hits = 0;

function parseTarget(spec: string | undefined): [string | undefined, number] {
  const match = spec === undefined ? null : /^(.+)@([1-9][0-9]*)$/.exec(spec);
  return match === null ? [spec, 1] : [match[1], Number(match[2])];
}

export function crashPoint(name: string): void {
  if (target !== undefined && target === name && ++hits >= nth) process.kill(process.pid, 'SIGKILL');
}
