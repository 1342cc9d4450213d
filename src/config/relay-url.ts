/**
 * A relay URL as INTERLINK_URL writes it: `ws://host:port` or `wss://…`, optionally
 * pinning the relay's key with a fragment, `wss://relay.example:9440#key=<base64url key>`
 * (README "Files and environment"; DESIGN.md "The relay's key"). The fragment is ours:
 * it never goes on the wire (ws refuses a URL with one), so `url` is the URL without it.
 */

export interface RelayEndpoint {
  /** The URL to connect to, without the fragment: also the relay's name in logs and in relays.json. */
  url: string;
  /** The pinned relay key (base64url), if the URL names one. */
  pin: string | undefined;
}

/** The URL, and its fragment (what follows the first hash sign) if it has one. */
const WITH_FRAGMENT = /^([^#]*)(?:#(.*))?$/s;
const PIN = /^key=(.*)$/s;
/** 32 bytes of base64url: 43 characters, the last carrying 4 data bits and 2 zero bits. */
const KEY = /^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$/;

/** The endpoint, or why the text is not a relay URL this program takes. */
export function parseRelayUrl(text: string): { endpoint: RelayEndpoint } | { error: string } {
  const [, url = '', fragment] = WITH_FRAGMENT.exec(text) ?? [];
  if (fragment === undefined) return { endpoint: { url, pin: undefined } };
  const pin = PIN.exec(fragment)?.[1];
  if (pin === undefined) return { error: `${url}: the only fragment a relay URL takes is #key=<the relay's key>` };
  if (!KEY.test(pin)) return { error: `${url}: #key= takes the relay's key, 43 characters of base64url, as \`interlink-mcp relay\` prints it` };
  return { endpoint: { url, pin } };
}

/** For texts already accepted by the configuration (env.ts checked them). */
export function relayEndpoint(text: string): RelayEndpoint {
  const parsed = parseRelayUrl(text);
  if ('error' in parsed) throw new RangeError(parsed.error);
  return parsed.endpoint;
}
