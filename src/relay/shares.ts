/**
 * Fair shares (DESIGN.md "The relay": "Bounded by construction"): what one sender may
 * hold queued, so that an abuser fills its own share and not the relay. A sender is
 * counted twice, by the connection it sent on and by its source address; an IPv6 address
 * counts by its /64, the smallest block a provider hands one customer. No I/O; the
 * counting itself is in `RelayQueueState` (queues.ts).
 */
import { isIP } from 'node:net';
import { isLoopbackAddress } from './address.js';
import { DEFAULT_QUEUE_LIMITS } from './queues.js';

/** What one holder has queued, or may have. */
export interface Share {
  messages: number;
  /** UTF-8 bytes of payload */
  bytes: number;
}

export interface ShareLimits {
  perAddress: Share;
  perConnection: Share;
}

/** A tenth of a default relay per source address (beyond loopback)... */
export const DEFAULT_PER_ADDRESS = 10_000;
/** ...and a twentieth per connection: two connections fill an address's share. */
export const DEFAULT_PER_CONNECTION = 5_000;
/** A share of N messages holds N times the default relay's bytes per message (512 MiB / 100,000: about 5.2 KiB). */
const BYTES_PER_MESSAGE = DEFAULT_QUEUE_LIMITS.bytes / DEFAULT_QUEUE_LIMITS.messages;

export function isLoopback(host: string): boolean {
  return host === 'localhost' || isLoopbackAddress(host);
}

/** `count` messages and their bytes, never more than the whole relay. */
export function shareOf(total: Share, count: number): Share {
  return { messages: Math.min(count, total.messages), bytes: Math.min(Math.floor(count * BYTES_PER_MESSAGE), total.bytes) };
}

/**
 * The shares a relay listening on `host` holds senders to. A relay that listens only on
 * loopback serves one machine — its own sessions, or a reverse proxy in front, through
 * which every client arrives from the same address — so by default one address may use
 * the whole relay there; the per-connection share still keeps one runaway session from
 * taking it all.
 */
export function shareLimits(total: Share, host: string, configured: { perAddress?: number; perConnection?: number } = {}): ShareLimits {
  const perAddress = configured.perAddress === undefined && isLoopback(host) ? total : shareOf(total, configured.perAddress ?? DEFAULT_PER_ADDRESS);
  return { perAddress, perConnection: shareOf(total, configured.perConnection ?? DEFAULT_PER_CONNECTION) };
}

/** Bytes of the HMAC key that turns a sender's address into the `src` it is counted by, in every store. */
export const SOURCE_KEY_BYTES = 32;

/** Eight hex digits per group: `2001:db8::1` → `2001:0db8:0000:0000:0000:0000:0000:0001`. */
function expandIpv6(address: string): string[] {
  const [head = '', tail] = address.split('::');
  const part = (text: string) => (text === '' ? [] : text.split(':'));
  const left = part(head);
  const right = part(tail ?? '');
  const last = right.length > 0 ? right : left;
  // An IPv4 tail (`64:ff9b::192.0.2.1`) is two groups.
  if (last.length > 0 && last[last.length - 1]!.includes('.')) {
    const [a, b, c, d] = last.pop()!.split('.').map(Number) as [number, number, number, number];
    last.push(((a << 8) | b).toString(16), ((c << 8) | d).toString(16));
  }
  const zeros = tail === undefined ? [] : Array<string>(8 - left.length - right.length).fill('0');
  return [...left, ...zeros, ...right].map((g) => g.padStart(4, '0'));
}

/**
 * The address a sender is counted by: IPv4 as it is (also when written IPv4-mapped,
 * `::ffff:192.0.2.1`), IPv6 by its /64. Undefined (a socket already gone) counts by no
 * address.
 */
export function sourceGroup(remote: string | undefined): string | undefined {
  if (remote === undefined) return undefined;
  const address = remote.split('%')[0]!.toLowerCase();
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(address);
  if (mapped !== null) return mapped[1]!;
  if (isIP(address) !== 6) return address;
  return `${expandIpv6(address).slice(0, 4).join(':')}::/64`;
}
