/**
 * Fair shares (DESIGN.md "The relay": "Bounded by construction"): what one sender may
 * hold queued, so that an abuser fills its own share and not the relay. A sender is
 * counted twice, by the connection it sent on and by its source address; an IPv6 address
 * counts by its /64, the smallest block a provider hands one customer. Here: the address a
 * sender is counted by, and the ledger of what each holder has queued (`ShareLedger`),
 * which `RelayQueueState` (queues.ts) keeps; the sizes of the shares are in limits.ts. No
 * I/O.
 */
import { isIP } from 'node:net';
import type { Share } from './limits.js';

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

/** One route's messages. Ids arrive in increasing order; acknowledgements remove any of them. */
