/**
 * The opening of one connection (DESIGN.md "The relay's key"): our fresh nonce (`hello`),
 * the relay's `challenge` (its key, its nonce, its protocol revision), then its `welcome`,
 * its signature over both nonces. The relay is trusted only when the welcome proves the
 * challenge's key over our nonce and the trust decision (known-relays.ts) accepts that key;
 * nothing is sent to a relay before that.
 */
import type { RelayEndpoint } from '../config/relay-url.js';
import { messageOf } from '../errors.js';
import { newNonce, verifyWelcome } from '../wire/auth.js';
import { PROTOCOL_VERSION, type ClientFrame } from '../wire/frames.js';
import { PINS_ONLY, type RelayKeyVerdict, type RelayTrust } from './known-relays.js';

/** The relay's challenge: the key it claims and the nonce routes are authenticated over. */
export interface Challenge {
  key: string;
  nonce: string;
  revision?: number;
}

export class Handshake {
  private readonly clientNonce = newNonce();
  challenge: Challenge | undefined;
  trusted = false;

  /** The connection's first frame: our nonce, for the relay to sign. */
  hello(): ClientFrame {
    return { v: PROTOCOL_VERSION, type: 'hello', nonce: this.clientNonce };
  }

  /** Whether the welcome `sig` proves the challenge's key over our nonce. */
  proves(challenge: Challenge, sig: string): boolean {
    return verifyWelcome(challenge.key, challenge.nonce, this.clientNonce, sig);
  }
}

/** The trust decision on a proven key (default: its pin only); a decision that cannot be made refuses it as `unchecked`. */
export async function admitKey(trust: RelayTrust | undefined, endpoint: RelayEndpoint, key: string): Promise<RelayKeyVerdict> {
  try {
    return await (trust ?? PINS_ONLY).admit(endpoint, key);
  } catch (err) {
    return { trusted: false, refusal: { reason: 'unchecked', url: endpoint.url, error: messageOf(err) } };
  }
}
