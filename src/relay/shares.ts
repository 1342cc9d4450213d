/**
 * Fair shares (DESIGN.md "The relay": "Bounded by construction"): what one sender may
 * hold queued, so that an abuser fills its own share and not the relay. A sender is
 * counted twice, by the connection it sent on and by its source address; an IPv6 address
 * counts by its /64, the smallest block a provider hands one customer. No I/O.
 */
import { isIP } from 'node:net';

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

/** A tenth of the relay's messages and bytes per source address (beyond loopback)... */
export const ADDRESS_SHARE_DIVISOR = 10;
/** ...and a twentieth per connection: two connections fill an address's share. */
export const CONNECTION_SHARE_DIVISOR = 20;

export function isLoopback(host: string): boolean {
  if (host === 'localhost' || host === '::1') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  return isIP(host) === 6 && host.toLowerCase().startsWith('::ffff:127.');
}

/** `count` messages, with the same fraction of the relay's bytes. */
export function shareOf(total: Share, count: number): Share {
  const messages = Math.min(count, total.messages);
  return { messages, bytes: Math.floor((total.bytes * messages) / total.messages) };
}

/**
 * The shares a relay listening on `host` holds senders to. A relay that listens only on
 * loopback serves one machine — its own sessions, or a reverse proxy in front, through
 * which every client arrives from the same address — so by default one address may use
 * the whole relay there; the per-connection share still keeps one runaway session from
 * taking it all.
 */
export function shareLimits(total: Share, host: string, configured: { perAddress?: number; perConnection?: number } = {}): ShareLimits {
  const addressDefault = isLoopback(host) ? total.messages : Math.floor(total.messages / ADDRESS_SHARE_DIVISOR);
  return {
    perAddress: shareOf(total, configured.perAddress ?? addressDefault),
    perConnection: shareOf(total, configured.perConnection ?? Math.floor(total.messages / CONNECTION_SHARE_DIVISOR)),
  };
}

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

/** What each holder has queued. A holder leaves the ledger when it holds nothing. */
export class ShareLedger<Holder> {
  private readonly held = new Map<Holder, Share>();

  get(holder: Holder): Share {
    return this.held.get(holder) ?? { messages: 0, bytes: 0 };
  }

  /** Whether one more message of `bytes` stays within `limit`. */
  fits(holder: Holder, bytes: number, limit: Share): boolean {
    const share = this.get(holder);
    return share.messages < limit.messages && share.bytes + bytes <= limit.bytes;
  }

  add(holder: Holder, bytes: number): void {
    const share = this.get(holder);
    this.held.set(holder, { messages: share.messages + 1, bytes: share.bytes + bytes });
  }

  remove(holder: Holder, bytes: number): void {
    const share = this.get(holder);
    if (share.messages <= 1) this.held.delete(holder);
    else this.held.set(holder, { messages: share.messages - 1, bytes: share.bytes - bytes });
  }
}
