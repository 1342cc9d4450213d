/**
 * What a session announces about itself on the relays' rosters: a name (INTERLINK_NAME,
 * else user@host), the working directory and its git root. Peers see it unverified; it
 * is also the claimed name in pairing requests.
 */
import { execFileSync } from 'node:child_process';
import { hostname, userInfo } from 'node:os';
import type { PresenceInfo } from '../agent/presence.js';

function gitRoot(cwd: string): string {
  try {
    return execFileSync('git', ['rev-parse', '--show-toplevel'], { cwd, stdio: ['ignore', 'pipe', 'ignore'], timeout: 2_000 }).toString().trim();
  } catch {
    return '';
  }
}

/** INTERLINK_NAME (config/env.ts), else user@host. */
function personName(configured: string | undefined): string {
  if (configured !== undefined) return configured;
  try {
    return `${userInfo().username}@${hostname()}`;
  } catch {
    return hostname();
  }
}

export function presenceInfo(name: string | undefined, cwd = process.cwd()): PresenceInfo {
  return { name: personName(name), cwd, gitRoot: gitRoot(cwd), summary: '' };
}
