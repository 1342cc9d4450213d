/**
 * Every socket the relay accepts is counted against the connection caps (admission.ts)
 * from the moment it is accepted until it closes: a socket that never asks for the
 * upgrade holds one of the relay's open files just as a WebSocket does, so it is counted
 * like one (and closed at the upgrade deadline, http-server.ts). A socket past a cap is
 * answered at once: over plain HTTP with a 503 and the line saying which cap (the client
 * reads it as the answer to its upgrade request), over TLS, where nothing can be said
 * before the handshake, by closing it. At the total cap a newcomer from a network holding
 * fewer connections takes the place of the heaviest network's newest one.
 */
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { log } from '../log.js';
import { normalizeAddress } from './address.js';
import { type ConnectionCaps, ConnectionCounts, type Held } from './admission.js';
import { refusalResponse, refuseUpgrade } from './http-server.js';

/** How long a refused socket may take to send its request before it is cut off (its answer is already written). */
const REFUSED_LINGER_MS = 1_000;

/** The socket's remote end, the same for a TLS socket and the TCP socket beneath it. */
function endpointOf(socket: Duplex & { remoteAddress?: string; remotePort?: number }): string {
  return `${socket.remoteAddress ?? '?'}|${socket.remotePort ?? '?'}`;
}

export class SocketAdmission {
  private readonly counts: ConnectionCounts;
  /** The counted sockets by remote end, so an upgrade over TLS finds the TCP socket's count. */
  private readonly held = new Map<string, Held>();
  /** Sockets refused and answered at accept: their upgrade request, if one comes, is not counted. */
  private readonly refused = new WeakSet<Duplex>();

  constructor(
    caps: ConnectionCaps,
    private readonly tls: boolean,
  ) {
    this.counts = new ConnectionCounts(caps);
  }

  get caps(): ConnectionCaps {
    return this.counts.caps;
  }

  /** A TCP socket was accepted: counted, or answered and closed. */
  accepted(socket: Socket): void {
    const address = normalizeAddress(socket.remoteAddress);
    const added = this.counts.tryAdd(address, () => socket.destroy());
    if (!added.admitted) {
      log.warn('relay_connection_refused', { address, cap: added.refusal.cap });
      return this.refuse(socket, added.refusal.message);
    }
    if (added.evicted !== undefined) {
      const { address: from, network } = added.evicted;
      log.warn('relay_connection_evicted', { address: from, network, for: address, message: 'the relay is full: the network holding the most connections gave up its newest' });
    }
    const endpoint = endpointOf(socket);
    this.held.set(endpoint, added.held);
    socket.once('close', () => {
      this.counts.release(added.held);
      if (this.held.get(endpoint) === added.held) this.held.delete(endpoint);
    });
  }

  /**
   * The count of the socket an upgrade arrived on; a socket accepted before the relay
   * started counting (between its bind and its store opening) is counted now. Undefined:
   * refused, and already answered.
   */
  upgrading(socket: Duplex): Held | undefined {
    if (this.refused.has(socket)) return undefined;
    const known = this.held.get(endpointOf(socket));
    if (known !== undefined) return known.gone ? undefined : known;
    const address = normalizeAddress((socket as Duplex & { remoteAddress?: string }).remoteAddress);
    const added = this.counts.tryAdd(address, () => socket.destroy());
    if (!added.admitted) {
      log.warn('relay_connection_refused', { address, cap: added.refusal.cap });
      refuseUpgrade(socket, added.refusal.message);
      return undefined;
    }
    socket.once('close', () => this.counts.release(added.held));
    return added.held;
  }

  private refuse(socket: Socket, message: string): void {
    this.refused.add(socket);
    socket.on('error', () => undefined);
    if (this.tls) return void socket.destroy();
    // The answer goes out now; what the client sends meanwhile is read and dropped, so it
    // does not meet a reset before reading the answer. Cut off soon in any case.
    socket.end(refusalResponse(message));
    const cutOff = setTimeout(() => socket.destroy(), REFUSED_LINGER_MS);
    cutOff.unref();
    socket.once('close', () => clearTimeout(cutOff));
  }
}
