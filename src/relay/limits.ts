/**
 * The relay's bounds (DESIGN.md "The relay": "Bounded by construction"): what it queues in
 * all and per route, and the fair shares one sender may hold, by its connection and by its
 * source address. Values only; the queues count against them (queues.ts, shares.ts).
 */
import { isLoopback } from './address.js';

export interface QueueLimits {
  /** messages queued for one route */
  routeMessages: number;
  /** messages queued in all */
  messages: number;
  /** bytes of payload JSON (UTF-8) queued in all */
  bytes: number;
  /** what one source address may hold (none: no bound) */
  perAddress?: Share;
  /** what one connection may hold (none: no bound) */
  perConnection?: Share;
}

export const DEFAULT_QUEUE_LIMITS: Readonly<QueueLimits> = { routeMessages: 10_000, messages: 100_000, bytes: 512 * 1024 * 1024 };

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
