/**
 * Every MCP tool, in the order they are listed, and the list a server of one mode shows:
 * a host's own tools (session binding, Codex notice recovery) only in that host's mode.
 */
import { type Mode, type ToolDefinition } from './tools/define.js';
import { HOST_TOOLS } from './tools/hosts.js';
import { MESSAGE_TOOLS } from './tools/messages.js';
import { PEER_TOOLS } from './tools/peers.js';

export type { Mode, ToolContext, ToolDefinition } from './tools/define.js';
export { wrongMode } from './tools/define.js';

export const TOOLS: readonly ToolDefinition[] = [...MESSAGE_TOOLS, ...PEER_TOOLS, ...HOST_TOOLS];

/** The tools a server in `mode` lists and runs. */
export function toolsFor(mode: Mode): ToolDefinition[] {
  return TOOLS.filter((t) => t.only === undefined || t.only === mode);
}
