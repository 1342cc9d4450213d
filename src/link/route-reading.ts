/**
 * The routes one connection reads: the session's own, and those added later (an ended
 * session's, agent/succession.ts). A route is read by proving the identity's key over the
 * relay's challenge (`auth`, wire/auth.ts), only once that relay is trusted (handshake.ts);
 * the relay answers `auth_ok` and delivers the route to this connection from then on.
 * Whether a connection reads at all is decided per connection: from the start (the
 * default), or once elected by `read()`, for a relay reached at several addresses
 * (relay-groups.ts).
 */
import type { SigningKey } from '../identity/ed25519.js';
import { signAuth } from '../wire/auth.js';
import { PROTOCOL_VERSION, type ClientFrame } from '../wire/frames.js';
import type { Challenge } from './handshake.js';

/** The relay revision that takes `auth` with `read: false` (wire/frames.ts). */
const PROOF_ONLY_REVISION = 4;

export class RouteReading {
  /** The routes read: the options' own, then those added by `add`. */
  private readonly routes: string[];
  /** The routes the relay accepted on the connection open now. */
  private readonly authenticated = new Set<string>();
  /** Whether this connection reads (authenticates) the routes; reset on every disconnect. */
  private reading: boolean;

  constructor(
    private readonly own: readonly string[],
    private readonly readOnConnect: boolean,
    private readonly key: SigningKey,
    private readonly write: (frame: ClientFrame) => void,
  ) {
    this.routes = [...own];
    this.reading = readOnConnect;
  }

  get reads(): boolean {
    return this.reading;
  }

  /** Every route accepted by the relay, if this connection reads them. */
  get complete(): boolean {
    return !this.reading || this.routes.every((r) => this.authenticated.has(r));
  }

  /** One more route: authenticated at once if this connection reads and `open` (a trusted challenge) is given. */
  add(route: string, open: Challenge | undefined): void {
    if (this.routes.includes(route)) return;
    this.routes.push(route);
    if (open !== undefined && this.reading) this.authenticateRoute(open, route);
  }

  /** Stops reading a route `add` added; true when the relay had accepted it here (it keeps delivering it to this connection). */
  remove(route: string): boolean {
    const index = this.routes.indexOf(route);
    if (index < 0 || this.own.includes(route)) return false;
    this.routes.splice(index, 1);
    return this.authenticated.delete(route);
  }

  /** Starts reading on this connection: at once if `open` (a trusted challenge) is given. */
  read(open: Challenge | undefined): void {
    if (this.reading) return;
    this.reading = true;
    if (open !== undefined) this.authenticate(open);
  }

  /**
   * The relay was trusted: the routes are authenticated against its challenge, if this
   * connection reads them; if it does not, its own route's key is proved without reading
   * (a relay of revision 4 closes a connection that proves no key).
   */
  trusted(challenge: Challenge): void {
    if (this.reading) return this.authenticate(challenge);
    const route = this.own[0];
    if (route !== undefined && (challenge.revision ?? 0) >= PROOF_ONLY_REVISION) {
      this.write({ v: PROTOCOL_VERSION, type: 'auth', route, relay: challenge.key, sig: signAuth(this.key, challenge.key, challenge.nonce, route), read: false });
    }
  }

  /** The relay's `auth_ok`; one for a proof only (`read: false`) reads nothing. */
  accepted(route: string, read: boolean): void {
    if (read) this.authenticated.add(route);
  }

  /** A connection closed: nothing is authenticated any more. */
  disconnected(): void {
    this.authenticated.clear();
  }

  /** The connection's own was replaced: whether it reads is decided again. */
  reset(): void {
    this.reading = this.readOnConnect;
  }

  private authenticate(challenge: Challenge): void {
    for (const route of this.routes) this.authenticateRoute(challenge, route);
  }

  private authenticateRoute(challenge: Challenge, route: string): void {
    this.write({ v: PROTOCOL_VERSION, type: 'auth', route, relay: challenge.key, sig: signAuth(this.key, challenge.key, challenge.nonce, route) });
  }
}
