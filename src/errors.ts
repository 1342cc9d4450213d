/**
 * Errors are values with a stable code. The code is what tools and tests match on;
 * the message is one sentence a person can act on.
 */
export type ErrorCode =
  // identity and configuration
  | 'key_exists'
  | 'key_missing'
  | 'key_unreadable'
  | 'bad_key'
  | 'bad_name'
  | 'peer_conflict'
  | 'unknown_peer'
  | 'own_key'
  /** an INTERLINK_* variable holds a value it does not take (config/env.ts) */
  | 'bad_config'
  // envelopes and input
  | 'bad_envelope'
  | 'too_large'
  | 'empty_text'
  | 'bad_signature'
  // stores
  | 'busy'
  | 'corrupt'
  | 'storage'
  /** a write failed and could not be undone: it may or may not have been kept */
  | 'storage_uncertain'
  | 'mailbox_full'
  // sending and reading
  | 'no_route'
  | 'invalid_session'
  | 'not_pending'
  | 'idempotency_conflict'
  | 'unknown_message'
  | 'relay_unreachable'
  // pairing
  | 'ambiguous_target'
  | 'unknown_target'
  | 'already_peer'
  | 'pairing_full'
  | 'unknown_request'
  | 'confirmation_pending'
  // hosts
  | 'not_bound'
  | 'thread_mismatch'
  | 'wrong_mode'
  | 'unknown_failure'
  // usage
  | 'usage';

/**
 * What to do next, worded for each surface: an agent knows tools (`see list_pair_requests`),
 * a person at a terminal knows commands (`see \`interlink-mcp pair list\``).
 */
export interface SurfaceHint {
  tool: string;
  cli: string;
}

export class InterlinkError extends Error {
  readonly code: ErrorCode;
  readonly details: Readonly<Record<string, unknown>> | undefined;
  /** The sentence without a hint; `message` adds the tool wording (MCP results, logs). */
  readonly sentence: string;
  readonly hint: SurfaceHint | undefined;

  constructor(code: ErrorCode, message: string, details?: Record<string, unknown>, options?: { cause?: unknown; hint?: SurfaceHint }) {
    super(options?.hint ? `${message} (${options.hint.tool})` : message, options?.cause !== undefined ? { cause: options.cause } : undefined);
    this.name = 'InterlinkError';
    this.code = code;
    this.details = details;
    this.sentence = message;
    this.hint = options?.hint;
  }

  /** The message as the command line prints it: the hint names a command, not a tool. */
  get cliMessage(): string {
    return this.hint ? `${this.sentence} (${this.hint.cli})` : this.sentence;
  }

  /** The form a tool result or `--json` output carries. */
  toJSON(): { error: { code: ErrorCode; message: string } } {
    return { error: { code: this.code, message: this.message } };
  }
}

export function isInterlinkError(err: unknown, code?: ErrorCode): err is InterlinkError {
  return err instanceof InterlinkError && (code === undefined || err.code === code);
}

/** The message of anything thrown: an Error's own message, else its string form. */
export function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** errno code of a Node system error, if it is one. */
export function errnoCode(err: unknown): string | undefined {
  if (typeof err === 'object' && err !== null && 'code' in err) {
    const code = (err as { code: unknown }).code;
    return typeof code === 'string' ? code : undefined;
  }
  return undefined;
}

/** Any failure of the disk under a store becomes a `storage` error naming the file. */
export function asStorageError(err: unknown, path: string): InterlinkError {
  if (err instanceof InterlinkError) return err;
  const reason = errnoCode(err) ?? messageOf(err);
  return new InterlinkError('storage', `cannot use ${path} (${reason})`, undefined, { cause: err });
}
