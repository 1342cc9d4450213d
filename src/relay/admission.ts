/**
 * Connection caps (DESIGN.md "Bounded by construction"): how many connections the relay
 * holds in total, from one source address and from one network (IPv6: a /64, the block a
 * provider hands one customer; IPv4: the address itself). They hold on every interface,
 * loopback aliases included. A connection past a cap is refused at the upgrade, before it
 * costs a WebSocket, a nonce or a send buffer, so a cap fills only for the address that
 * exhausted it.
 *
 * At the total cap the relay still admits a newcomer whose network holds at least two
 * connections fewer than the heaviest network: the heaviest gives up its newest
 * connection. The rule only ever moves a connection from a network with more to one with
 * fewer, so two networks never take turns evicting each other, and no one locks the others
 * out without holding more networks than the total cap divided by what each of them keeps.
 */
import { isLoopback } from './address.js';
import { sourceGroup } from './shares.js';

export const DEFAULT_MAX_CONNECTIONS = 1024;
export const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS = 64;
/**
 * On a relay that listens on loopback every local session connects from 127.0.0.1 (and
 * every client of a reverse proxy on this host): a quarter of the total, so one machine's
 * sessions fit and four addresses are still needed to fill the relay.
 */
export const DEFAULT_LOOPBACK_CONNECTIONS_PER_ADDRESS = 256;
/** Connections from one IPv6 /64: several addresses of one host or one customer. */
export const DEFAULT_NETWORK_MULTIPLE = 4;

export interface ConnectionCaps {
  maxConnections: number;
  maxConnectionsPerAddress: number;
  /** Connections from one network (sourceGroup): at least the per-address cap. */
  maxConnectionsPerNetwork: number;
}

/** The caps a relay listening on `host` runs with, from its flags where given. */
export function connectionCaps(host: string, configured: { maxConnections?: number; maxConnectionsPerAddress?: number }): ConnectionCaps {
  const maxConnections = configured.maxConnections ?? DEFAULT_MAX_CONNECTIONS;
  const perAddressDefault = isLoopback(host) ? DEFAULT_LOOPBACK_CONNECTIONS_PER_ADDRESS : DEFAULT_MAX_CONNECTIONS_PER_ADDRESS;
  const maxConnectionsPerAddress = Math.min(maxConnections, configured.maxConnectionsPerAddress ?? perAddressDefault);
  return { maxConnections, maxConnectionsPerAddress, maxConnectionsPerNetwork: Math.min(maxConnections, maxConnectionsPerAddress * DEFAULT_NETWORK_MULTIPLE) };
}

export type AdmissionCap = 'max_connections' | 'max_connections_per_address' | 'max_connections_per_network';

export type Admission =
  | { admitted: true; evict?: undefined }
  /** Admitted in place of the newest connection of `evict`, the heaviest network. */
  | { admitted: true; evict: string }
  | { admitted: false; cap: AdmissionCap; message: string };

/** What is open when a connection asks: in total, from its address, from its network, and the heaviest network. */
export interface Load {
  total: number;
  fromAddress: number;
  fromNetwork: number;
  heaviest?: { network: string; count: number };
}

/** The pure decision: may one more connection from `address` (in `network`) join what `load` says is open? */
export function admit(load: Load, address: string, network: string, caps: ConnectionCaps): Admission {
  if (load.fromAddress >= caps.maxConnectionsPerAddress) {
    return {
      admitted: false,
      cap: 'max_connections_per_address',
      message: `the relay holds its maximum of ${caps.maxConnectionsPerAddress} connections from ${address}; close one or try again later`,
    };
  }
  if (load.fromNetwork >= caps.maxConnectionsPerNetwork) {
    return {
      admitted: false,
      cap: 'max_connections_per_network',
      message: `the relay holds its maximum of ${caps.maxConnectionsPerNetwork} connections from ${network}; close one or try again later`,
    };
  }
  if (load.total < caps.maxConnections) return { admitted: true };
  const heaviest = load.heaviest;
  if (heaviest !== undefined && heaviest.network !== network && heaviest.count >= load.fromNetwork + 2) return { admitted: true, evict: heaviest.network };
  return { admitted: false, cap: 'max_connections', message: `the relay holds its maximum of ${caps.maxConnections} connections, and your address holds about as many as any other; try again later` };
}

/** One counted connection: `evict` closes it when a lighter network needs its place. */
export interface Held {
  readonly address: string;
  readonly network: string;
  evict: () => void;
  /** Counted no more (released or evicted): a later release changes nothing. */
  gone: boolean;
}

export type Refused = { admitted: false; refusal: Extract<Admission, { admitted: false }> };
export type Added = { admitted: true; held: Held; evicted?: Held };

/** Open connections (from the upgrade request until its socket closes), in total, per address and per network. */
export class ConnectionCounts {
  private total = 0;
  private readonly byAddress = new Map<string, number>();
  /** Each network's connections, oldest first. */
  private readonly byNetwork = new Map<string, Set<Held>>();

  constructor(readonly caps: ConnectionCaps) {}

  /**
   * Counts the connection if the caps allow it, evicting the heaviest network's newest
   * connection when that is what lets it in; the caller releases the returned handle
   * once its socket closes, and sets `evict` to what closes it.
   */
  tryAdd(address: string, evict: () => void): Refused | Added {
    const network = sourceGroup(address) ?? address;
    const load: Load = { total: this.total, fromAddress: this.byAddress.get(address) ?? 0, fromNetwork: this.byNetwork.get(network)?.size ?? 0 };
    if (this.total >= this.caps.maxConnections) load.heaviest = this.heaviest();
    const admission = admit(load, address, network, this.caps);
    if (!admission.admitted) return { admitted: false, refusal: admission };
    let evicted: Held | undefined;
    if (admission.evict !== undefined) {
      evicted = newest(this.byNetwork.get(admission.evict)!);
      this.release(evicted);
      evicted.evict();
    }
    const held: Held = { address, network, evict, gone: false };
    this.total++;
    this.byAddress.set(address, load.fromAddress + 1);
    const set = this.byNetwork.get(network) ?? new Set<Held>();
    set.add(held);
    this.byNetwork.set(network, set);
    return { admitted: true, held, ...(evicted !== undefined && { evicted }) };
  }

  release(held: Held): void {
    if (held.gone) return;
    held.gone = true;
    this.total--;
    const left = (this.byAddress.get(held.address) ?? 1) - 1;
    if (left > 0) this.byAddress.set(held.address, left);
    else this.byAddress.delete(held.address);
    const set = this.byNetwork.get(held.network);
    set?.delete(held);
    if (set?.size === 0) this.byNetwork.delete(held.network);
  }

  get size(): number {
    return this.total;
  }

  /** Connections open from `address`'s network. */
  fromNetwork(address: string): number {
    return this.byNetwork.get(sourceGroup(address) ?? address)?.size ?? 0;
  }

  /** A scan of the networks, made only at the total cap. */
  private heaviest(): { network: string; count: number } | undefined {
    let best: { network: string; count: number } | undefined;
    for (const [network, set] of this.byNetwork) if (best === undefined || set.size > best.count) best = { network, count: set.size };
    return best;
  }
}

function newest(set: Set<Held>): Held {
  let last: Held | undefined;
  for (const held of set) last = held;
  return last!;
}
