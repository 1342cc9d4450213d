/**
 * A relay URL as INTERLINK_URL writes it: `ws://host:port` or `wss://…`, optionally
 * pinning the relay's key with a fragment, `wss://relay.example:9440#key=<base64url key>`
 * (README "Files and environment"; DESIGN.md "The relay's key"). The fragment is ours:
 * it never goes on the wire (ws refuses a URL with one), so `url` is the URL without it.
 */
import { isBase64urlOfLength } from '../identity/base64url.js';
import { isAcceptablePoint, PUBLIC_KEY_BYTES } from '../identity/ed25519.js';

export interface RelayEndpoint {
  /** The URL to connect to, without the fragment: also the relay's name in logs and in relays.json. */
  url: string;
  /** The pinned relay key (base64url), if the URL names one. */
  pin: string | undefined;
}

const PIN = /^key=(.*)$/;

/** The endpoint, or why the text is not a relay URL this program takes. */
export function parseRelayUrl(text: string): { endpoint: RelayEndpoint } | { error: string } {
  const hash = text.indexOf('#');
  if (hash < 0) return { endpoint: { url: text, pin: undefined } };
  const url = text.slice(0, hash);
  const pin = PIN.exec(text.slice(hash + 1))?.[1];
  if (pin === undefined) return { error: `${url}: the only fragment a relay URL takes is #key=<the relay's key>` };
  if (!isBase64urlOfLength(pin, PUBLIC_KEY_BYTES) || !isAcceptablePoint(Buffer.from(pin, 'base64url'))) {
    return { error: `${url}: #key= takes the relay's key, 43 characters of base64url, as \`interlink-mcp relay\` prints it` };
  }
  return { endpoint: { url, pin } };
}

/** For texts already accepted by the configuration (env.ts checked them). */
export function relayEndpoint(text: string): RelayEndpoint {
  const parsed = parseRelayUrl(text);
  if ('error' in parsed) throw new RangeError(parsed.error);
  return parsed.endpoint;
}
