/**
 * Signed presence: an announcement says "this key runs a session here, now"; a goodbye
 * says "that session has ended". Relays keep them in a roster, and every reader verifies
 * them: a relay can hide or replay an announcement, but not forge one.
 *
 * Version 2 (`"v": 2`, what this implementation announces): in public only the key, the
 * session, the time, a name tag (presence/private.ts: who knows a name can find it, nobody
 * can read it) and the details — name, cwd, git root, summary — sealed so that only the
 * announcer's peers and its own sessions open them (`details`).
 *   signed bytes: "interlink-announce-v2\0" || key (32) || session || ts (u64 LE) ||
 *   name_tag (16) || sealed details || slot count (u32 LE) || each slot: hint (8) || sealed key
 * (each variable part a u32 LE length and the bytes).
 *
 * Version 3 (`"v": 3`, what this implementation announces to a relay of revision 4 or
 * later): version 2 and a name bucket, 12 bits of a hash of the name alone
 * (presence/private.ts `nameBucket`), which a relay indexes so that pairing by name asks
 * for one bucket, never sending the name nor being handed the roster.
 *   signed bytes: "interlink-announce-v3\0" || the version 2 bytes after its domain ||
 *   name_bucket (u16 LE).
 *
 * Version 1 (no `v`), still read: every field in clear.
 *   signed bytes: "interlink-announce-v1\0" || key (32) || name || session || cwd ||
 *   git_root || summary (each u32 LE length + UTF-8) || ts (u64 LE).
 * Goodbye signed bytes: "interlink-goodbye-v1\0" || key (32) || session || ts.
 */
import { z } from 'zod';
import { isWellFormedUnicode, unsafeNameReason } from '../config/paths.js';
import { lengthPrefixed, u64le } from '../envelope/bytes.js';
import { InterlinkError } from '../errors.js';
import { decodeBase64url, encodeBase64url, isBase64urlOfLength } from '../identity/base64url.js';
import { PUBLIC_KEY_BYTES, SIGNATURE_BYTES, signBytes, verifyBytes, type SigningKey } from '../identity/ed25519.js';

export const ANNOUNCE_DOMAIN = 'interlink-announce-v1\0';
export const ANNOUNCE_V2_DOMAIN = 'interlink-announce-v2\0';
export const ANNOUNCE_V3_DOMAIN = 'interlink-announce-v3\0';
/** Name buckets: 12 bits, so a bucket of 18,000 sessions holds about four. */
export const NAME_BUCKETS = 4096;
/** Peers (and this identity) an announcement opens for: more would not fit a roster's share. */
export const MAX_SLOTS = 128;
export const HINT_BYTES = 8;
export const NAME_TAG_BYTES = 16;
/** A sealed content key: nonce (12), key (32), tag (16). */
export const SEALED_KEY_BYTES = 60;
/** Sealed details: nonce, the four fields padded (at most 4 × 1,028 bytes and 12%), tag. */
const MAX_SEALED_DETAILS_CHARS = 8_000;
export const GOODBYE_DOMAIN = 'interlink-goodbye-v1\0';
/** Each of name, cwd, git_root and summary. */
export const MAX_FIELD_BYTES = 1024;

const keyText = z.string().refine((s) => isBase64urlOfLength(s, PUBLIC_KEY_BYTES), 'must be a 32-byte base64url public key');
const sigText = z.string().refine((s) => isBase64urlOfLength(s, SIGNATURE_BYTES), 'must be a 64-byte base64url signature');
const sessionText = z.string().refine((s) => unsafeNameReason(s) === undefined, 'must be a safe session id');
const field = z
  .string()
  .refine((s) => isWellFormedUnicode(s) && Buffer.byteLength(s, 'utf8') <= MAX_FIELD_BYTES, `must be well-formed Unicode of at most ${MAX_FIELD_BYTES} bytes`);
const ts = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);

export const announcementV1Schema = z.object({
  key: keyText,
  name: field,
  session: sessionText,
  cwd: field,
  git_root: field,
  summary: field,
  ts,
  sig: sigText,
});
export type AnnouncementV1 = z.infer<typeof announcementV1Schema>;

const canonicalBase64url = (bytes: number) => z.string().refine((s) => isBase64urlOfLength(s, bytes), `must be ${bytes} bytes of base64url`);
const sealedDetailsText = z
  .string()
  .max(MAX_SEALED_DETAILS_CHARS)
  .refine((s) => /^[A-Za-z0-9_-]+$/.test(s) && Buffer.from(s, 'base64url').toString('base64url') === s && Buffer.from(s, 'base64url').length >= 28, 'must be canonical base64url of a nonce, a body and a tag');

export const slotSchema = z.object({ hint: canonicalBase64url(HINT_BYTES), key: canonicalBase64url(SEALED_KEY_BYTES) });
export type Slot = z.infer<typeof slotSchema>;

export const announcementV2Schema = z.object({
  v: z.literal(2),
  key: keyText,
  session: sessionText,
  ts,
  name_tag: canonicalBase64url(NAME_TAG_BYTES),
  details: sealedDetailsText,
  slots: z.array(slotSchema).max(MAX_SLOTS),
  sig: sigText,
});
export type AnnouncementV2 = z.infer<typeof announcementV2Schema>;

export const announcementV3Schema = announcementV2Schema.extend({ v: z.literal(3), name_bucket: z.number().int().min(0).max(NAME_BUCKETS - 1) });
export type AnnouncementV3 = z.infer<typeof announcementV3Schema>;
/** Version 2 or 3: the sealed kinds, which a reader opens alike. */
export type SealedAnnouncement = AnnouncementV2 | AnnouncementV3;

export type Announcement = AnnouncementV1 | SealedAnnouncement;

/** The schema for `data`'s version (`v`: 3, 2, or none for version 1). */
function schemaFor(data: unknown): z.ZodType<Announcement> {
  const v = typeof data === 'object' && data !== null ? (data as { v?: unknown }).v : undefined;
  return v === 3 ? announcementV3Schema : v === 2 ? announcementV2Schema : announcementV1Schema;
}

/** Any version, by `v`; the relay and every reader accept all three. */
export const announcementSchema: z.ZodType<Announcement> = z.custom<Announcement>((data) => schemaFor(data).safeParse(data).success, 'must be an announcement of version 1, 2 or 3');

function parseAnnouncement(data: unknown): Announcement | undefined {
  const parsed = schemaFor(data).safeParse(data);
  return parsed.success ? parsed.data : undefined;
}

export const goodbyeSchema = z.object({ key: keyText, session: sessionText, ts, sig: sigText });
export type Goodbye = z.infer<typeof goodbyeSchema>;

function lengthPrefixedBytes(bytes: Buffer): Buffer[] {
  const length = Buffer.allocUnsafe(4);
  length.writeUInt32LE(bytes.length, 0);
  return [length, bytes];
}

/** An announcement of either sealed version without its signature. */
type UnsignedSealed = Omit<AnnouncementV2, 'sig'> | Omit<AnnouncementV3, 'sig'>;

/** The signed bytes of a version 2 or 3 announcement (by its `v`). */
export function announcementV2Bytes(a: UnsignedSealed): Buffer {
  const count = Buffer.allocUnsafe(4);
  count.writeUInt32LE(a.slots.length, 0);
  const bucket = Buffer.allocUnsafe(2);
  if (a.v === 3) bucket.writeUInt16LE(a.name_bucket, 0);
  return Buffer.concat([
    Buffer.from(a.v === 3 ? ANNOUNCE_V3_DOMAIN : ANNOUNCE_V2_DOMAIN, 'utf8'),
    decodeBase64url(a.key, PUBLIC_KEY_BYTES, 'key'),
    ...lengthPrefixed(a.session),
    u64le(a.ts),
    ...lengthPrefixedBytes(Buffer.from(a.name_tag, 'base64url')),
    ...lengthPrefixedBytes(Buffer.from(a.details, 'base64url')),
    count,
    ...a.slots.flatMap((slot) => [Buffer.from(slot.hint, 'base64url'), Buffer.from(slot.key, 'base64url')]),
    ...(a.v === 3 ? [bucket] : []),
  ]);
}

function announcementBytes(a: Omit<AnnouncementV1, 'sig'>): Buffer {
  return Buffer.concat([
    Buffer.from(ANNOUNCE_DOMAIN, 'utf8'),
    decodeBase64url(a.key, PUBLIC_KEY_BYTES, 'key'),
    ...lengthPrefixed(a.name),
    ...lengthPrefixed(a.session),
    ...lengthPrefixed(a.cwd),
    ...lengthPrefixed(a.git_root),
    ...lengthPrefixed(a.summary),
    u64le(a.ts),
  ]);
}

function goodbyeBytes(g: Omit<Goodbye, 'sig'>): Buffer {
  return Buffer.concat([Buffer.from(GOODBYE_DOMAIN, 'utf8'), decodeBase64url(g.key, PUBLIC_KEY_BYTES, 'key'), ...lengthPrefixed(g.session), u64le(g.ts)]);
}

function check<T>(schema: z.ZodType<T>, data: unknown, what: string): T {
  const parsed = schema.safeParse(data);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  throw new InterlinkError('bad_envelope', `${what} ${issue?.path.join('.') ?? ''} ${issue?.message ?? 'is invalid'}`.replace(/\s+/g, ' '));
}

/** A version 1 announcement (every field in clear): what older versions sent; kept for tests and older readers. */
export function signAnnouncement(key: SigningKey, fields: Omit<AnnouncementV1, 'key' | 'sig' | 'ts'> & { ts?: number }): AnnouncementV1 {
  const unsigned = { key: encodeBase64url(key.publicKey), ...fields, ts: fields.ts ?? Date.now() };
  check(announcementV1Schema, { ...unsigned, sig: encodeBase64url(Buffer.alloc(SIGNATURE_BYTES)) }, 'announcement');
  return { ...unsigned, sig: encodeBase64url(signBytes(key, announcementBytes(unsigned))) };
}

/** Signs a version 3 announcement whose sealed parts and name bucket presence/private.ts made. */
export function signAnnouncementV3(key: SigningKey, fields: Omit<AnnouncementV3, 'v' | 'key' | 'sig'>): AnnouncementV3 {
  const unsigned = { v: 3 as const, key: encodeBase64url(key.publicKey), ...fields };
  check(announcementV3Schema, { ...unsigned, sig: encodeBase64url(Buffer.alloc(SIGNATURE_BYTES)) }, 'announcement');
  return { ...unsigned, sig: encodeBase64url(signBytes(key, announcementV2Bytes(unsigned))) };
}

/** Signs a version 2 announcement whose sealed parts presence/private.ts made (for a relay older than revision 4). */
export function signAnnouncementV2(key: SigningKey, fields: Omit<AnnouncementV2, 'v' | 'key' | 'sig'>): AnnouncementV2 {
  const unsigned = { v: 2 as const, key: encodeBase64url(key.publicKey), ...fields };
  check(announcementV2Schema, { ...unsigned, sig: encodeBase64url(Buffer.alloc(SIGNATURE_BYTES)) }, 'announcement');
  return { ...unsigned, sig: encodeBase64url(signBytes(key, announcementV2Bytes(unsigned))) };
}

export function signGoodbye(key: SigningKey, session: string, now = Date.now()): Goodbye {
  const unsigned = { key: encodeBase64url(key.publicKey), session, ts: now };
  check(goodbyeSchema, { ...unsigned, sig: encodeBase64url(Buffer.alloc(SIGNATURE_BYTES)) }, 'goodbye');
  return { ...unsigned, sig: encodeBase64url(signBytes(key, goodbyeBytes(unsigned))) };
}

/**
 * Announcements are re-read every few seconds from every relay; each distinct one is
 * verified once. The key is the whole parsed announcement, signature included, so a
 * changed field is never mistaken for a verified one.
 */
const VERIFIED_CACHE_LIMIT = 4096;
const verifiedCache = new Set<string>();

/** Parses and verifies; undefined for anything that is not a valid, signed announcement. */
export function verifiedAnnouncement(data: unknown): Announcement | undefined {
  const a = parseAnnouncement(data);
  if (a === undefined) return undefined;
  const id = 'v' in a ? JSON.stringify([a.v, a.key, a.session, a.ts, a.name_tag, a.details, a.slots, a.v === 3 ? a.name_bucket : null, a.sig]) : JSON.stringify([a.key, a.name, a.session, a.cwd, a.git_root, a.summary, a.ts, a.sig]);
  if (verifiedCache.has(id)) return a;
  const bytes = 'v' in a ? announcementV2Bytes(a) : announcementBytes(a);
  const ok = verifyBytes(decodeBase64url(a.key, PUBLIC_KEY_BYTES, 'key'), bytes, decodeBase64url(a.sig, SIGNATURE_BYTES, 'sig'));
  if (!ok) return undefined;
  if (verifiedCache.size >= VERIFIED_CACHE_LIMIT) verifiedCache.delete(verifiedCache.values().next().value!);
  verifiedCache.add(id);
  return a;
}

export function verifiedGoodbye(data: unknown): Goodbye | undefined {
  const parsed = goodbyeSchema.safeParse(data);
  if (!parsed.success) return undefined;
  const g = parsed.data;
  const ok = verifyBytes(decodeBase64url(g.key, PUBLIC_KEY_BYTES, 'key'), goodbyeBytes(g), decodeBase64url(g.sig, SIGNATURE_BYTES, 'sig'));
  return ok ? g : undefined;
}
