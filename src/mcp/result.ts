/**
 * How a tool's result goes back to the host. Pure: the server calls it with the value a
 * tool returned.
 *
 * Text content always carries the whole result as JSON: every host reads text. Claude
 * Code and Codex prefer `structuredContent` when it is there and show the model its JSON,
 * which is the same JSON, so nothing changes for them when it is left out. It is added only
 * to results whose JSON is at most STRUCTURED_MAX_BYTES: a large result (a page of 256 KiB
 * messages) is sent once, not twice, and stays within hosts' tool-output limits. No tool
 * declares an outputSchema, so `structuredContent` is optional (MCP 2025-06-18, Tools).
 */
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';

export const STRUCTURED_MAX_BYTES = 8 * 1024;

/** Field names that hold epoch milliseconds in tool results: `ts`, `at` and `*_at`. */
function isTimeField(key: string): boolean {
  return key === 'ts' || key === 'at' || key.endsWith('_at');
}

function iso(ms: number): string | undefined {
  const date = new Date(ms);
  return Number.isFinite(date.getTime()) ? date.toISOString() : undefined;
}

/**
 * The value with an ISO 8601 string beside every epoch-millisecond time: `ts` gets
 * `ts_iso`, `at` gets `at_iso`, `created_at` gets `created_at_iso`. The numbers stay, with
 * their meaning, for callers that compute with them.
 */
export function withIsoTimes(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withIsoTimes);
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const [key, field] of Object.entries(value)) {
    out[key] = withIsoTimes(field);
    const text = typeof field === 'number' && isTimeField(key) ? iso(field) : undefined;
    if (text !== undefined) out[`${key}_iso`] = text;
  }
  return out;
}

export function toolResult(data: object, isError = false): CallToolResult {
  const shown = withIsoTimes(data) as Record<string, unknown>;
  const text = JSON.stringify(shown);
  return {
    content: [{ type: 'text', text }],
    ...(Buffer.byteLength(text, 'utf8') <= STRUCTURED_MAX_BYTES && { structuredContent: shown }),
    ...(isError && { isError: true }),
  };
}
