/**
 * A relay route `<public key>#<session id>`: the one place that builds and splits the
 * convention (docs/PROTOCOL.md, "Relay frames"; an envelope's `reply_to` is one too).
 */
import { z } from 'zod';
import { unsafeNameReason } from '../config/paths.js';
import { isBase64urlOfLength } from '../identity/base64url.js';
import { PUBLIC_KEY_BYTES } from '../identity/ed25519.js';

const SEPARATOR = '#';

export interface Route {
  key: string;
  session: string;
}

export function formatRoute(route: Route): string {
  return `${route.key}${SEPARATOR}${route.session}`;
}

/** Undefined unless `text` is a full public key and a session id the name rule allows. */
export function parseRoute(text: string): Route | undefined {
  const at = text.indexOf(SEPARATOR);
  if (at < 0) return undefined;
  const key = text.slice(0, at);
  const session = text.slice(at + 1);
  if (!isBase64urlOfLength(key, PUBLIC_KEY_BYTES) || unsafeNameReason(session) !== undefined) return undefined;
  return { key, session };
}

/** A route as text on the wire or on disk (relay frames, queues, an envelope's `reply_to`). */
export const routeText = z.string().refine((s) => parseRoute(s) !== undefined, 'must be "<public key>#<session id>"');

/** A route as a person reads it: the peer's name (petname, "self", fingerprint) in place of its key. */
export function describeRoute(name: string, session: string): string {
  return `${name}${SEPARATOR}${session}`;
}
