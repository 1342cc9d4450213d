/**
 * Whether a relay can be reached, in the words a person reads in `status`, in the `pair`
 * commands' errors and in the server's outage log: "connection refused", not an errno.
 */
import { errnoCode } from '../errors.js';

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

/** Why a WebSocket connection attempt failed, in a few words. */
export function connectError(err: Error): string {
  const code = errnoCode(err);
  if (code !== undefined && WORDS[code] !== undefined) return WORDS[code];
  if (/handshake has timed out/i.test(err.message)) return 'no answer (timed out)';
  if (/Unexpected server response: (\d+)/.test(err.message)) return `not a relay (${err.message.toLowerCase()})`;
  return err.message;
}

/** "no relay answered: ws://a (connection refused), ws://b (timed out)" */
export function unreachableList(relays: readonly { url: string; error: string | undefined }[]): string {
  return relays.map((r) => `${r.url} (${r.error ?? 'no answer'})`).join(', ');
}
