/**
 * The session id (docs/CLAUDE.md "Session rendezvous"):
 * one rule for the MCP server and the Stop-hook listener, so the two agree.
 *   1. `--session`, else INTERLINK_SESSION: the id a person pinned, checked here for both;
 *   2. else the id Claude gives each side: CLAUDE_CODE_SESSION_ID for the server, the Stop
 *      payload's `session_id` for the listener (hosts/claude/stop-payload.ts);
 *   3. else the server generates one, and the listener waits on `main`.
 */
import { randomBytes } from 'node:crypto';
import type { Config } from '../config/env.js';
import { checkSafeName } from '../config/paths.js';
import { InterlinkError } from '../errors.js';
import { isMailSession, PAIRING_SESSION } from './routing.js';

export interface SessionChoice {
  session: string;
  /** Where it came from, for the log and for errors: `--session`, a variable, `generated`. */
  source: string;
}

/** Step 1: the session a person pinned, if any. */
export function pinnedSession(flag: string | undefined, config: Pick<Config, 'session'>): SessionChoice | undefined {
  if (flag !== undefined && flag !== '') return checked(flag, '--session');
  if (config.session !== undefined) return checked(config.session, 'INTERLINK_SESSION');
  return undefined;
}

/** The server's session id: the whole rule, with Claude's id from the environment. */
export function serverSession(flag: string | undefined, config: Pick<Config, 'session' | 'claudeSession'>): SessionChoice {
  const pinned = pinnedSession(flag, config);
  if (pinned !== undefined) return pinned;
  if (config.claudeSession !== undefined) return checked(config.claudeSession, 'CLAUDE_CODE_SESSION_ID');
  return { session: randomBytes(4).toString('hex'), source: 'generated' };
}

function checked(value: string, source: string): SessionChoice {
  const session = checkSafeName(value, 'session id');
  if (!isMailSession(session)) throw new InterlinkError('usage', `${source}: the session id ${PAIRING_SESSION} is reserved for \`interlink-mcp pair\`; choose another`);
  return { session, source };
}
