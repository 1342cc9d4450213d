/**
 * The two proofs of a relay connection (docs/PROTOCOL.md "Relay frames", "Challenge and
 * authentication"; DESIGN.md "The relay", "Authenticated reads" and "The relay's key").
 *
 * The relay proves its key first. Its challenge names its key and a fresh nonce; the
 * client answers with a fresh nonce of its own (`hello`), and the relay signs
 *   "interlink-relay-welcome-v1\0" || relay key (32) || relay nonce (32) || client nonce (32)
 * with its key (`welcome`). The client's nonce makes the signature new for this
 * connection, so a recorded welcome cannot be played back.
 *
 * Then the client proves a route's key: it signs
 *   "interlink-relay-auth-v2\0" || relay key (32) || relay nonce (32) || route (u32 LE length + UTF-8)
 * with the route's key. The nonce ties the proof to one connection; the relay key ties it
 * to one relay, so a proof a relay obtained for its own key is worthless on any other
 * (the forwarding attack of issue 13, point 4).
 */
import { randomBytes } from 'node:crypto';
import { lengthPrefixed } from '../envelope/bytes.js';
import { parseRoute } from '../envelope/route.js';
import { decodeBase64url, encodeBase64url } from '../identity/base64url.js';
import { PUBLIC_KEY_BYTES, SIGNATURE_BYTES, signBytes, verifyBytes, type SigningKey } from '../identity/ed25519.js';

export const AUTH_DOMAIN = 'interlink-relay-auth-v2\0';
export const WELCOME_DOMAIN = 'interlink-relay-welcome-v1\0';
export const NONCE_BYTES = 32;

export function newNonce(): string {
  return encodeBase64url(randomBytes(NONCE_BYTES));
}

/** Decoding throws on a malformed value; the verifiers turn that into `false`. */
function keyBytes(key: string): Buffer {
  return decodeBase64url(key, PUBLIC_KEY_BYTES, 'relay key');
}

function nonceBytes(nonce: string): Buffer {
  return decodeBase64url(nonce, NONCE_BYTES, 'nonce');
}

export function authBytes(relayKey: string, nonce: string, route: string): Buffer {
  return Buffer.concat([Buffer.from(AUTH_DOMAIN, 'utf8'), keyBytes(relayKey), nonceBytes(nonce), ...lengthPrefixed(route)]);
}

export function welcomeBytes(relayKey: string, relayNonce: string, clientNonce: string): Buffer {
  return Buffer.concat([Buffer.from(WELCOME_DOMAIN, 'utf8'), keyBytes(relayKey), nonceBytes(relayNonce), nonceBytes(clientNonce)]);
}

/** The route's proof for the relay whose key and nonce the challenge gave. */
export function signAuth(key: SigningKey, relayKey: string, nonce: string, route: string): string {
  return encodeBase64url(signBytes(key, authBytes(relayKey, nonce, route)));
}

/** True when `sig` proves the holder of the route's key answered this relay's nonce. */
export function verifyAuth(relayKey: string, nonce: string, route: string, sig: string): boolean {
  const parsed = parseRoute(route);
  if (parsed === undefined) return false;
  try {
    return verifyBytes(decodeBase64url(parsed.key, PUBLIC_KEY_BYTES, 'key'), authBytes(relayKey, nonce, route), decodeBase64url(sig, SIGNATURE_BYTES, 'sig'));
  } catch {
    return false;
  }
}

/** The relay's proof that it holds `relayKey`, for the client that sent `clientNonce`. */
export function signWelcome(key: SigningKey, relayNonce: string, clientNonce: string): string {
  return encodeBase64url(signBytes(key, welcomeBytes(encodeBase64url(key.publicKey), relayNonce, clientNonce)));
}

export function verifyWelcome(relayKey: string, relayNonce: string, clientNonce: string, sig: string): boolean {
  try {
    return verifyBytes(keyBytes(relayKey), welcomeBytes(relayKey, relayNonce, clientNonce), decodeBase64url(sig, SIGNATURE_BYTES, 'sig'));
  } catch {
    return false;
  }
}
