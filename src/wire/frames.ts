/**
 * Relay wire protocol, version 1, revision 4 (docs/PROTOCOL.md, "Relay frames"; revision 2
 * added the relay's key, `hello`/`welcome` and the auth-v2 proof): JSON text frames
 * over one WebSocket. Every frame carries `v: 1` and a `type`. These schemas are the
 * single definition of both directions; both ends validate every frame they receive.
 */
import { z } from 'zod';
import { routeText as route } from '../envelope/route.js';
import { REFUSAL_CODES } from '../errors.js';
import { isBase64urlOfLength } from '../identity/base64url.js';
import { PUBLIC_KEY_BYTES, SIGNATURE_BYTES } from '../identity/ed25519.js';
import { parseJsonWith } from '../json.js';
import { NONCE_BYTES } from './auth.js';
import { NAME_BUCKETS } from '../presence/announcement.js';

export const PROTOCOL_VERSION = 1;
/** The revision of version 1 this implementation speaks: 3 added `after` on `send`, and `defer`; 4 the proof-only `auth` (`read: false`). */
export const PROTOCOL_REVISION = 4;
/** Largest payload (the JSON of one signed envelope) a relay accepts. */
export const MAX_PAYLOAD_BYTES = 512 * 1024;
/** Largest frame; bigger than any valid frame so that oversized payloads get a clear refusal. */
export const MAX_FRAME_BYTES = 2 * 1024 * 1024;

const v = z.literal(PROTOCOL_VERSION);
const ref = z.string().min(1).max(64);
const sig = z.string().refine((s) => isBase64urlOfLength(s, SIGNATURE_BYTES), 'must be a 64-byte base64url signature');
const nonce = z.string().refine((s) => isBase64urlOfLength(s, NONCE_BYTES), 'must be a 32-byte base64url nonce');
const key = z.string().refine((s) => isBase64urlOfLength(s, PUBLIC_KEY_BYTES), 'must be a 32-byte base64url key');
/**
 * A payload: any JSON object, checked as such and passed on as it is (the receiver parses
 * it as an envelope). Not z.record, which copies every field of every message.
 */
const payload = z.custom<Record<string, unknown>>((x) => typeof x === 'object' && x !== null && !Array.isArray(x), 'must be a JSON object');
/** The time a reader may defer a delivery for (`defer`, relay/deferrals.ts). */
export const MIN_DEFER_MS = 1_000;
export const MAX_DEFER_MS = 300_000;
/** Relay-assigned message id within a route: increasing, never reused. */
const id = z.number().int().min(0);

// ---- client → relay ----

/** The client's fresh nonce, which the relay signs in its `welcome` (auth.ts). */
export const helloFrame = z.object({ v, type: z.literal('hello'), nonce });
/**
 * `relay` is the relay key the proof names (auth-v2). An auth without it is the old
 * proof, which named no relay: the relay refuses it `auth_failed`, saying so. `read:
 * false` (revision 4) proves the key without reading the route: what a connection that
 * reads nothing sends, since the relay closes one that has proved no key within its
 * deadline.
 */
export const authFrame = z.object({ v, type: z.literal('auth'), route, sig, relay: key.optional(), read: z.literal(false).optional() });
/**
 * `after`: the ref of an earlier send on this connection that this one follows; decided
 * after it, and refused `out_of_order` unless it was accepted (relay/send-chain.ts).
 */
export const sendFrame = z.object({ v, type: z.literal('send'), ref, to: route, payload, after: ref.optional() });
export const ackFrame = z.object({ v, type: z.literal('ack'), route, ids: z.array(id).min(1).max(1024) });
/** The reader cannot take these now: out of its window, delivered again in `ms` (relay/deferrals.ts). */
export const deferFrame = z.object({ v, type: z.literal('defer'), route, ids: z.array(id).min(1).max(1024), ms: z.number().int().min(MIN_DEFER_MS).max(MAX_DEFER_MS) });
export const announceFrame = z.object({ v, type: z.literal('announce'), announcement: z.unknown() });
export const goodbyeFrame = z.object({ v, type: z.literal('goodbye'), goodbye: z.unknown() });
/** The most keys, fingerprints and name bytes one roster query names (relay/roster-index.ts). */
export const MAX_QUERY_KEYS = 256;
export const MAX_QUERY_FINGERPRINTS = 16;
/**
 * A roster query (revision 4): the entries of these keys, of the keys with these
 * fingerprints, and of the sessions whose version 3 announcement names this name bucket
 * (presence/private.ts `nameBucket`: the asker matches the name tags itself); at least
 * one of the three. Revision 3's `roster` without any asked for the whole roster, which a
 * revision 4 relay refuses `bad_frame`.
 */
export const rosterRequestFrame = z.object({
  v,
  type: z.literal('roster'),
  ref,
  keys: z.array(key).min(1).max(MAX_QUERY_KEYS).optional(),
  fingerprints: z
    .array(z.string().regex(/^[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}$/, 'must be a fingerprint: four groups of four lower-case hex digits'))
    .min(1)
    .max(MAX_QUERY_FINGERPRINTS)
    .optional(),
  name_bucket: z
    .number()
    .int()
    .min(0)
    .max(NAME_BUCKETS - 1)
    .optional(),
});
export type RosterRequest = z.infer<typeof rosterRequestFrame>;
/** What a roster query names. */
export type RosterQuery = Pick<RosterRequest, 'keys' | 'fingerprints' | 'name_bucket'>;
/** The relay revision that answers roster queries (and refuses a request for the whole roster). */
export const ROSTER_QUERY_REVISION = 4;

export const clientFrame = z.discriminatedUnion('type', [helloFrame, authFrame, sendFrame, ackFrame, deferFrame, announceFrame, goodbyeFrame, rosterRequestFrame]);
export type ClientFrame = z.infer<typeof clientFrame>;

// ---- relay → client ----

/** `key` is the relay's own Ed25519 key: the key clients pin and the auth proof names. */
/**
 * `revision`: the relay protocol revision the relay speaks (3: `after` and `defer`);
 * absent from a revision 2 relay.
 */
export const challengeFrame = z.object({ v, type: z.literal('challenge'), nonce, key, revision: z.number().int().min(1).optional() });
/** The relay's signature over its key, its nonce and the client's `hello` nonce (auth.ts). */
export const welcomeFrame = z.object({ v, type: z.literal('welcome'), sig });
/** `read: false` answers a proof-only auth: the route is not delivered on this connection. */
export const authOkFrame = z.object({ v, type: z.literal('auth_ok'), route, read: z.literal(false).optional() });
export const acceptedFrame = z.object({ v, type: z.literal('accepted'), ref, id });
export const refusedFrame = z.object({ v, type: z.literal('refused'), ref: ref.optional(), code: z.enum(REFUSAL_CODES), message: z.string() });
export const deliverFrame = z.object({ v, type: z.literal('deliver'), route, id, payload });
export const rosterEntry = z.object({ announcement: z.unknown(), age_ms: z.number().int().min(0) });
export type RosterEntry = z.infer<typeof rosterEntry>;
export const rosterFrame = z.object({ v, type: z.literal('roster'), ref, entries: z.array(rosterEntry) });

export const relayFrame = z.discriminatedUnion('type', [challengeFrame, welcomeFrame, authOkFrame, acceptedFrame, refusedFrame, deliverFrame, rosterFrame]);
export type RelayFrame = z.infer<typeof relayFrame>;

/** Parses one text frame; undefined if it is not JSON or not a valid frame of `schema`. */
export function parseFrame<T>(schema: z.ZodType<T>, text: string): T | undefined {
  const parsed = parseJsonWith(schema, text);
  return parsed.ok ? parsed.value : undefined;
}
