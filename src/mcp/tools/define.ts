/**
 * What a tool is: a name, a description and per-parameter descriptions a model reads, the
 * four behaviour hints a host reads, the mode it belongs to, one zod schema for its
 * arguments (both what the client is told and what is enforced) and a handler. Results
 * are plain JSON objects; failures are InterlinkErrors, which the server turns into
 * `{error: {code, message}}` results.
 */
import type { ToolAnnotations } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import type { Agent } from '../../agent/agent.js';
import type { ClaudeSession } from '../../hosts/claude/session.js';
import type { CodexHost } from '../../hosts/codex/host.js';
import type { Mode } from '../../config/env.js';
import { MAX_NAME_BYTES } from '../../config/paths.js';
import { InterlinkError } from '../../errors.js';

/** Which host a server runs for (INTERLINK_MODE, or `serve --codex`). */
export type { Mode };

/** What a tool call can reach: the session, and its host's binding (Claude session or Codex thread). */
export interface ToolContext {
  /** The running session; in Codex mode a `not_bound` error until a hook binds the thread. */
  agent(): Promise<Agent>;
  /** Present in Claude mode only. */
  claude: ClaudeSession | undefined;
  /** Present in Codex mode only. */
  codex: CodexHost | undefined;
  /** The thread the call's `_meta` names (Codex), if any. */
  metaThread: string | undefined;
}

/**
 * Hints are static, so each is the honest answer for the tool's usual call, and every
 * one is stated (hosts assume the worst for a missing hint). The reason for a choice that
 * is not obvious sits beside the tool.
 */
export type Hints = Required<Pick<ToolAnnotations, 'readOnlyHint' | 'destructiveHint' | 'idempotentHint' | 'openWorldHint'>>;

export interface ToolDefinition {
  name: string;
  description: string;
  annotations: Hints;
  /** Listed and callable in this mode only; absent: in both. */
  only?: Mode;
  input: z.ZodObject;
  run: (context: ToolContext, args: never) => Promise<object> | object;
}

interface Spec<S extends z.ZodObject, C> {
  name: string;
  description: string;
  annotations: Hints;
  only?: Mode;
  input: S;
  run: (context: C, args: z.infer<S>) => Promise<object> | object;
}

/** A tool that needs the server's context (the Codex binding). */
export function hostTool<S extends z.ZodObject>(spec: Spec<S, ToolContext>): ToolDefinition {
  return { ...spec, run: spec.run as ToolDefinition['run'] };
}

/** A tool of the running session. */
export function tool<S extends z.ZodObject>(spec: Spec<S, Agent>): ToolDefinition {
  return hostTool({ ...spec, run: async (context, args) => spec.run(await context.agent(), args) });
}

/** Read-only and local: the hints of every tool that only looks at this machine's state. */
export const LOCAL_READ: Hints = { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false };

const MODE_NAMES: Record<Mode, string> = { claude: 'Claude mode', codex: 'Codex mode' };

/** The error for a call to a tool of the other mode (such a tool is not listed either). */
export function wrongMode(tool: string, toolMode: Mode): InterlinkError {
  const serverMode: Mode = toolMode === 'codex' ? 'claude' : 'codex';
  return new InterlinkError('wrong_mode', `${tool} is for ${MODE_NAMES[toolMode]}; this server runs in ${MODE_NAMES[serverMode]} (INTERLINK_MODE)`);
}

/**
 * A string of 1 to `maxBytes` bytes of UTF-8, the unit the envelope, announcements and
 * the name rule count in. `max` (characters) only tells clients a bound: a string never
 * has more UTF-16 units than UTF-8 bytes, so the byte check decides.
 */
export function utf8Text(maxBytes: number, minLength = 1): z.ZodString {
  return z
    .string()
    .min(minLength)
    .max(maxBytes)
    .refine((s) => Buffer.byteLength(s, 'utf8') <= maxBytes, `must be at most ${maxBytes} bytes of UTF-8`);
}

/** A petname as peers.json allows it; each use describes what it names. */
export const peerName = utf8Text(MAX_NAME_BYTES);
/**
 * A session id, or a unique prefix of one where the tool says so. The name rule (at most
 * 128 bytes, no path characters) is checked by the agent, which answers `invalid_session`
 * with the reason; the schema only keeps absurd input out.
 */
export const sessionId = z.string().min(1).max(1024);
