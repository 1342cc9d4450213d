/**
 * Proof that a relay client holds the key of a route before it may receive or
 * acknowledge the route's messages. The relay sends a fresh random nonce when a
 * connection opens; the client signs
 *   "interlink-relay-auth-v1\0" || nonce (32 bytes) || route (u32 LE length + UTF-8)
 * with the route's key. The nonce ties the proof to one connection.
 */
import { randomBytes } from 'node:crypto';
import { lengthPrefixed } from '../envelope/bytes.js';
import { parseRoute } from '../envelope/route.js';
import { decodeBase64url, encodeBase64url } from '../identity/base64url.js';
import { PUBLIC_KEY_BYTES, SIGNATURE_BYTES, signBytes, verifyBytes, type SigningKey } from '../identity/ed25519.js';

export const AUTH_DOMAIN = 'interlink-relay-auth-v1\0';
export const NONCE_BYTES = 32;

export function newNonce(): string {
  return encodeBase64url(randomBytes(NONCE_BYTES));
}

function authBytes(nonce: string, route: string): Buffer {
  return Buffer.concat([Buffer.from(AUTH_DOMAIN, 'utf8'), decodeBase64url(nonce, NONCE_BYTES, 'nonce'), ...lengthPrefixed(route)]);
}

export function signAuth(key: SigningKey, nonce: string, route: string): string {
  return encodeBase64url(signBytes(key, authBytes(nonce, route)));
}

/** True when `sig` proves the holder of the route's key answered this nonce. */
export function verifyAuth(nonce: string, route: string, sig: string): boolean {
  const parsed = parseRoute(route);
  if (parsed === undefined) return false;
  try {
    return verifyBytes(decodeBase64url(parsed.key, PUBLIC_KEY_BYTES, 'key'), authBytes(nonce, route), decodeBase64url(sig, SIGNATURE_BYTES, 'sig'));
  } catch {
    return false;
  }
}
