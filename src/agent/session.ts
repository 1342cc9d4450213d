/** The session id of this MCP server (seed 003, "Claude session rendezvous"). */
import { randomBytes } from 'node:crypto';
import { checkSafeName, type Env } from '../config/paths.js';
import { InterlinkError } from '../errors.js';
import { isMailSession, PAIRING_SESSION } from './routing.js';

export function resolveSessionId(flag: string | undefined, env: Env = process.env): { session: string; source: string } {
  const candidates: [string | undefined, string][] = [
    [flag, '--session'],
    [env.INTERLINK_SESSION, 'INTERLINK_SESSION'],
    [env.CLAUDE_CODE_SESSION_ID, 'CLAUDE_CODE_SESSION_ID'],
  ];
  for (const [value, source] of candidates) {
    if (value === undefined || value === '') continue;
    const session = checkSafeName(value, 'session id');
    if (!isMailSession(session)) throw new InterlinkError('usage', `${source}: the session id ${PAIRING_SESSION} is reserved for \`interlink-mcp pair\`; choose another`);
    return { session, source };
  }
  return { session: randomBytes(4).toString('hex'), source: 'generated' };
}
