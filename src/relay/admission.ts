/**
 * Connection caps: how many connections the relay holds in total and per source address
 * (DESIGN.md "Bounded by construction"). A connection past a cap is refused at the
 * upgrade, before it costs a WebSocket, a nonce or a send buffer.
 *
 * Loopback peers count only against the total: every session on the relay's own machine
 * connects from 127.0.0.1 (the zero-config relay serves only them), and behind a reverse
 * proxy on the same host so does every client, so a cap per loopback address would cap
 * honest users, not an abuser.
 */
import { isLoopbackAddress } from './address.js';

export const DEFAULT_MAX_CONNECTIONS = 1024;
export const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS = 64;

export interface ConnectionCaps {
  maxConnections: number;
  maxConnectionsPerAddress: number;
}

export type Admission = { admitted: true } | { admitted: false; cap: 'max_connections' | 'max_connections_per_address'; message: string };

/** The pure decision: may one more connection from `address` join `total` open ones, `fromAddress` of them from there? */
export function admit(total: number, fromAddress: number, address: string, caps: ConnectionCaps): Admission {
  if (total >= caps.maxConnections) {
    return { admitted: false, cap: 'max_connections', message: `the relay holds its maximum of ${caps.maxConnections} connections; try again later` };
  }
  if (!isLoopbackAddress(address) && fromAddress >= caps.maxConnectionsPerAddress) {
    return {
      admitted: false,
      cap: 'max_connections_per_address',
      message: `the relay holds its maximum of ${caps.maxConnectionsPerAddress} connections from ${address}; close one or try again later`,
    };
  }
  return { admitted: true };
}

/** Open connections (from the upgrade request until its socket closes), in total and per address. */
export class ConnectionCounts {
  private total = 0;
  private readonly byAddress = new Map<string, number>();

  constructor(private readonly caps: ConnectionCaps) {}

  /** Counts the connection if the caps allow it; the caller calls `release` once its socket closes. */
  tryAdd(address: string): Admission {
    const admission = admit(this.total, this.byAddress.get(address) ?? 0, address, this.caps);
    if (admission.admitted) {
      this.total++;
      this.byAddress.set(address, (this.byAddress.get(address) ?? 0) + 1);
    }
    return admission;
  }

  release(address: string): void {
    this.total--;
    const left = (this.byAddress.get(address) ?? 1) - 1;
    if (left > 0) this.byAddress.set(address, left);
    else this.byAddress.delete(address);
  }
}
