/**
 * Every error code a person, an agent or a peer can see, declared once with its meaning:
 * tool results and `--json` output (`{"error": {"code", "message"}}`), relay `refused`
 * frames (docs/PROTOCOL.md "Refusal codes"), the trust gate's verdicts (docs/PROTOCOL.md
 * "Receiving: the trust gate", logged as `inbound_rejected`) and `relay_refused_send` log
 * lines. A code that two surfaces share (`too_large`, `storage`, `bad_signature`,
 * `internal`) has one meaning here, and each surface's set below only lists it. These
 * strings are wire values: renaming one breaks peers, tools and scripts.
 */
export const CODE_MEANINGS = {
  // identity and configuration
  key_exists: 'an identity already exists where a new one would be written',
  key_missing: 'there is no identity file yet',
  key_unreadable: 'the identity file exists but cannot be read',
  bad_key: 'a public key or seed is not the right number of bytes of canonical base64url',
  bad_name: 'a petname or session id could escape a directory, holds a control, bidirectional, zero-width or other invisible character, or is reserved',
  peer_conflict: 'the petname (or one that looks the same) already names another key or an audience, or the key another petname',
  unknown_peer: 'no peer has that petname',
  audience_conflict: 'the audience name (or one that looks the same) is already a petname or another audience',
  unknown_audience: 'no audience has that name, or the petname is not one of its members',
  audience_full: 'an audience would hold more members than one send reaches, or there would be more audiences than allowed',
  own_key: "the key is this identity's own; its sessions are reached as self",
  bad_config: 'an INTERLINK_* variable holds a value it does not take',
  // envelopes and input
  bad_envelope: 'a signed envelope is malformed',
  too_large: 'a text, payload or record is over its byte limit',
  empty_text: 'a message text is empty or only white space',
  bad_signature: 'a signature does not verify under the key it names',
  // stores
  busy: 'a lock, store, address or relay is held by another process',
  corrupt: 'a file is damaged and was moved aside; what it held is not used until fixed',
  storage: 'a store could not read or write its files (the message names the file and the cause)',
  storage_uncertain: 'a write failed and could not be undone: it may or may not have been kept',
  // sending and reading
  no_route: 'no session of the recipient to send to could be chosen',
  invalid_session: 'no session can be called that',
  unknown_session: 'this identity has never had a session of that id on this machine',
  not_pending: 'the message is no longer pending, so it cannot be dropped',
  idempotency_conflict: 'the idempotency key was used for a different message',
  unknown_message: 'no message with that id in this session',
  bad_recipients: 'the recipients of one message are none, include "self", or come with a session (which only a single peer takes)',
  too_many_recipients: 'more recipients than one message may reach',
  unknown_group: 'no group of messages with that id in this session',
  relay_unreachable: 'no relay answered in time',
  relay_untrusted: 'a relay presents a key other than the one pinned or recorded for its URL, or one another listed relay presents',
  // pairing
  ambiguous_target: 'several identities announce that name',
  unknown_target: 'no identity on the rosters matches the target',
  already_peer: 'that identity is already a peer',
  pairing_full: 'too many pairing requests are open',
  unknown_request: 'no open pairing request from that fingerprint',
  confirmation_pending: 'the peer was added but the confirmation to them could not be queued',
  // hosts
  not_bound: 'no Codex thread is bound to this server yet, or it is shutting down',
  thread_mismatch: 'the Codex thread named is not the one this server serves',
  wrong_mode: 'the tool belongs to the other host mode',
  unknown_failure: 'no saved failed delivery with that id',
  // usage and the MCP layer
  usage: 'the command line or input is not one this command takes',
  unknown_tool: 'the MCP server has no tool of that name',
  bad_arguments: "a tool's arguments do not match its schema",
  internal: 'an unexpected failure inside this program; the message says what',
  // the trust gate (docs/PROTOCOL.md "Receiving: the trust gate")
  wrong_recipient: 'the envelope is addressed to another identity',
  wrong_session: 'the envelope is signed for another session of this identity',
  unsupported_kind: 'the envelope has a kind this version does not handle',
  bad_seal: 'the sealed body does not open with the key sender and receiver share, or holds invalid fields',
  unsealed: 'a clear (unsealed) envelope from a sender not marked clear in peers.json',
  not_allowlisted: 'a message from a key that is not a peer',
  unexpected_pairing: 'a pairing message from a sender that may not send it',
  unsolicited_accept: 'a pair_accept that answers no outstanding request',
  from_future: 'the timestamp is too far ahead of this clock',
  stale: 'the timestamp is more than 7 days old',
  replay: 'the message was already admitted',
  // relay refusals (docs/PROTOCOL.md "Refusal codes")
  queue_full: "the route, the relay, or the sender's share of it (per connection, per address) holds as many messages as it may",
  rate_limited: "more frames than the connection's rate allows",
  bad_frame: 'not a valid frame of the protocol version',
  auth_failed: 'the auth proof does not verify, or the connection has too many routes',
  not_authenticated: 'an ack for a route this connection has not authenticated',
  out_of_order: 'the send it follows on the connection was refused or is unknown there: offer that one first',
  // a send that got no answer from a relay (link/client.ts)
  disconnected: 'the connection closed before the relay answered',
  timeout: 'the relay did not answer in time',
} as const satisfies Record<string, string>;

export type Code = keyof typeof CODE_MEANINGS;

/** What an InterlinkError carries: tool results, `--json` output, log lines. */
export const ERROR_CODES = [
  'key_exists', 'key_missing', 'key_unreadable', 'bad_key', 'bad_name', 'peer_conflict', 'unknown_peer', 'own_key', 'bad_config',
  'audience_conflict', 'unknown_audience', 'audience_full',
  'bad_envelope', 'too_large', 'empty_text', 'bad_signature', 'bad_seal',
  'busy', 'corrupt', 'storage', 'storage_uncertain',
  'no_route', 'invalid_session', 'unknown_session', 'not_pending', 'idempotency_conflict', 'unknown_message', 'bad_recipients', 'too_many_recipients', 'unknown_group', 'relay_unreachable', 'relay_untrusted',
  'ambiguous_target', 'unknown_target', 'already_peer', 'pairing_full', 'unknown_request', 'confirmation_pending',
  'not_bound', 'thread_mismatch', 'wrong_mode', 'unknown_failure',
  'usage',
] as const satisfies readonly Code[];
export type ErrorCode = (typeof ERROR_CODES)[number];

/** What a tool result carries besides an ErrorCode (mcp/server.ts); `internal` is also the CLI's. */
export const TOOL_CODES = ['unknown_tool', 'bad_arguments', 'internal'] as const satisfies readonly Code[];
export type ToolCode = (typeof TOOL_CODES)[number];

/** The trust gate's verdicts, in the order the checks run (gate/decide.ts). */
export const REJECT_CODES = [
  'bad_signature', 'wrong_recipient', 'wrong_session', 'unsupported_kind', 'bad_seal', 'unsealed', 'not_allowlisted', 'unexpected_pairing', 'unsolicited_accept', 'from_future', 'stale', 'replay',
] as const satisfies readonly Code[];
export type RejectCode = (typeof REJECT_CODES)[number];

/** The `code` of a relay's `refused` frame (wire/frames.ts). */
export const REFUSAL_CODES = ['too_large', 'queue_full', 'rate_limited', 'bad_frame', 'auth_failed', 'not_authenticated', 'storage', 'out_of_order'] as const satisfies readonly Code[];
export type RefusalCode = (typeof REFUSAL_CODES)[number];

/** A send the relay never answered (link/client.ts), beside its refusals. */
export const SEND_FAILURE_CODES = ['disconnected', 'timeout'] as const satisfies readonly Code[];
export type SendFailureCode = (typeof SEND_FAILURE_CODES)[number];

/** Every set above: the whole vocabulary a user or peer can meet. */
export const CODE_SETS = { ERROR_CODES, TOOL_CODES, REJECT_CODES, REFUSAL_CODES, SEND_FAILURE_CODES } as const;

/**
 * What to do next, worded for each surface: an agent knows tools (`see list_pair_requests`),
 * a person at a terminal knows commands (`see \`interlink-mcp pair list\``).
 */
export interface SurfaceHint {
  tool: string;
  cli: string;
}

/**
 * Errors are values with a stable code (ERROR_CODES). The code is what tools and tests
 * match on; the message is one sentence a person can act on.
 */
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

/**
 * Any failure of the disk under a store becomes a `storage` error naming the file and the
 * cause: the errno code with the system's words for it (`EROFS: read-only file system`),
 * which Node puts first in a system error's message.
 */
export function asStorageError(err: unknown, path: string): InterlinkError {
  if (err instanceof InterlinkError) return err;
  return new InterlinkError('storage', `cannot use ${path} (${storageReason(err)})`, undefined, { cause: err });
}

/** `EROFS: read-only file system` from Node's `EROFS: read-only file system, open '<path>'`; else the code, else the message. */
function storageReason(err: unknown): string {
  const code = errnoCode(err);
  const message = messageOf(err);
  if (code === undefined) return message;
  if (!message.startsWith(`${code}: `)) return code;
  const comma = message.indexOf(',');
  return comma < 0 ? message : message.slice(0, comma);
}
