/**
 * Named crash points for the crash tests: when INTERLINK_CRASH_AT names a point, the
 * process kills itself with SIGKILL on reaching it, exactly as a power cut or an OOM kill
 * would stop it there. Costs one string comparison when unset.
 */
import { crashPointTarget } from '../config/env.js';

const target = crashPointTarget();

export function crashPoint(name: string): void {
  if (target !== undefined && target === name) process.kill(process.pid, 'SIGKILL');
}
