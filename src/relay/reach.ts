/**
 * Whether a relay can be reached, in the words a person reads in `status`, in the `pair`
 * commands' errors and in the server's outage log: "connection refused", not an errno;
 * "certificate not trusted" and how to trust it, not an OpenSSL code.
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

/** "no relay answered: ws://a (connection refused), ws://b (timed out)" */
export function unreachableList(relays: readonly { url: string; error: string | undefined }[]): string {
  return relays.map((r) => `${r.url} (${r.error ?? 'no answer'})`).join(', ');
}
