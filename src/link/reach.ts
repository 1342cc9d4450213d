/**
 * Whether a relay can be reached, in the words a person reads in `status`, in the `pair`
 * commands' errors, in `send_message`'s note and in the server's outage log: "connection
 * refused", not an errno; "certificate not trusted" and how to trust it, not an OpenSSL
 * code; a relay that answers with a key the sessions refuse, in key-refusal.ts's words.
 */
import { errnoCode, InterlinkError } from '../errors.js';
import { keyRefusalSentence, type KeyRefusal } from './key-refusal.js';

/** Why nothing is read at a relay now: no connection, or a key this user's sessions refuse. */
export type RelayTrouble = { kind: 'unreachable'; error: string } | { kind: 'untrusted'; refusal: KeyRefusal };

/** A relay that is not usable, and why (undefined: it gave no answer in time). */
export interface Unanswered {
  url: string;
  trouble: RelayTrouble | undefined;
}

const WORDS: Record<string, string> = {
  ECONNREFUSED: 'connection refused',
  ECONNRESET: 'connection reset',
  EPIPE: 'connection reset',
  ETIMEDOUT: 'timed out',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  ENOTFOUND: 'host not found',
  EAI_AGAIN: 'host name lookup failed',
  EADDRNOTAVAIL: 'address not available',
};

/** OpenSSL's names, as Node reports them, for a certificate chain that ends nowhere the client trusts. */
const UNTRUSTED = new Set(['DEPTH_ZERO_SELF_SIGNED_CERT', 'SELF_SIGNED_CERT_IN_CHAIN', 'UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'UNABLE_TO_GET_ISSUER_CERT', 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY']);

/** Why a `wss://` relay's certificate was refused, and for an unknown one how a person trusts it. */
function certificateError(code: string, err: Error): string | undefined {
  if (UNTRUSTED.has(code)) return `certificate not trusted (${err.message}): to trust it, set INTERLINK_TLS_CA to a PEM file with its certificate or its CA`;
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') return `certificate is for another host (${err.message})`;
  if (code === 'CERT_HAS_EXPIRED') return 'certificate expired';
  if (code === 'CERT_NOT_YET_VALID') return 'certificate not yet valid';
  return undefined;
}

/** Why a WebSocket connection attempt failed, in a few words. */
export function connectError(err: Error): string {
  const code = errnoCode(err);
  if (code !== undefined && WORDS[code] !== undefined) return WORDS[code];
  const certificate = code === undefined ? undefined : certificateError(code, err);
  if (certificate !== undefined) return certificate;
  if (/handshake has timed out/i.test(err.message)) return 'no answer (timed out)';
  // OpenSSL read a plain HTTP answer where a TLS record belongs.
  if (/wrong version number/i.test(err.message)) return 'no TLS on that port (a plain ws:// relay? then use ws://)';
  if (/Unexpected server response: (\d+)/.test(err.message)) return `not a relay (${err.message.toLowerCase()})`;
  return err.message;
}

const untrusted = (r: Unanswered): boolean => r.trouble?.kind === 'untrusted';

function unansweredText({ url, trouble }: Unanswered): string {
  if (trouble?.kind === 'untrusted') return keyRefusalSentence(trouble.refusal);
  return `${url} (${trouble?.error ?? 'no answer'})`;
}

/** "ws://a (connection refused), ws://b (timed out)"; with a refused key, "…; relay ws://c answers with a NEW key …". */
export function unreachableList(relays: readonly Unanswered[]): string {
  return relays.map(unansweredText).join(relays.some(untrusted) ? '; ' : ', ');
}

/** Why a command that needs a relay did nothing: none answered, or those that answered are refused. */
export function noUsableRelay(relays: readonly Unanswered[]): InterlinkError {
  if (relays.some(untrusted)) return new InterlinkError('relay_untrusted', `no relay can be used: ${unreachableList(relays)}. Nothing was done.`);
  return new InterlinkError(
    'relay_unreachable',
    `no relay answered: ${unreachableList(relays)}. Is the relay running? Start one with \`interlink-mcp relay\`, or set INTERLINK_URL to one that runs. Nothing was done.`,
  );
}

/** The relays a command went on without: "no answer from …", or "not with …" when a key is refused. */
export function goingOnWithout(relays: readonly Unanswered[]): string {
  return `${relays.some(untrusted) ? 'not with' : 'no answer from'} ${unreachableList(relays)}`;
}

/**
 * `send_message`'s note when no relay is connected and a refused key is part of why
 * (sending.ts keeps its own note otherwise): each relay and why, and when the message goes.
 */
export function untrustedNote(relays: readonly Unanswered[]): string | undefined {
  if (!relays.some(untrusted)) return undefined;
  return `no relay is connected: ${unreachableList(relays)}. The message waits in the outbox and goes out once a relay is trusted (see list_pending)`;
}
