/**
 * Whose share a send counts against (issue 38, point 2). A connection's share
 * (`--max-per-connection`) used to be the connection's own, so a sender that reconnected
 * had a fresh one: on the zero-config relay, where every client is 127.0.0.1 and the
 * address's share is the whole relay, one program reconnecting 21 times filled all
 * 100,000 messages. Now the share belongs to the key the connection proved (every
 * connection proves one within 10 s, connection.ts), which reconnecting does not renew;
 * connections that proved none the relay gives a share of its own share one per network.
 *
 * Keys are free, so a new key gets its own share only while its network's budget of new
 * keys lasts (a burst of NEW_KEY_BURST, then NEW_KEYS_PER_HOUR); a key the relay has
 * given a share before keeps getting one. A session's identity key is the same for all
 * its sessions and across restarts, so honest sessions use the budget once per identity.
 * The worst one network can hold is therefore the pool of its keyless connections plus
 * one share per key it was given: (1 + NEW_KEY_BURST) shares at once, one more share per
 * NEW_KEYS_PER_HOUR⁻¹ it keeps at it, within its address's share.
 */
import { TokenBucket } from './connection.js';
import { sourceGroup } from './shares.js';

export const NEW_KEY_BURST = 4;
export const NEW_KEYS_PER_HOUR = 1;
/** Keys remembered as given a share, and networks whose budget is tracked (the least recently used forgotten past it). */
const REMEMBERED_KEYS = 65_536;
const REMEMBERED_NETWORKS = 4_096;

export class SenderKeys {
  /** key → when it was last given a share (ms), least recently first. */
  private readonly known = new Map<string, number>();
  private readonly budgets = new Map<string, TokenBucket>();

  constructor(private readonly now: () => number = Date.now) {}

  /** Whether `key`, proved by a connection from `address`, gets a share of its own. */
  admit(key: string, address: string | undefined): boolean {
    const now = this.now();
    if (this.known.has(key)) {
      this.remember(this.known, key, now, REMEMBERED_KEYS);
      return true;
    }
    const network = sourceGroup(address) ?? 'unknown';
    const budget = this.budgets.get(network) ?? new TokenBucket(NEW_KEYS_PER_HOUR / 3600, NEW_KEY_BURST, now);
    this.remember(this.budgets, network, budget, REMEMBERED_NETWORKS);
    if (!budget.take(now)) return false;
    this.remember(this.known, key, now, REMEMBERED_KEYS);
    return true;
  }

  private remember<V>(map: Map<string, V>, key: string, value: V, limit: number): void {
    map.delete(key);
    map.set(key, value);
    if (map.size > limit) map.delete(map.keys().next().value!);
  }
}
