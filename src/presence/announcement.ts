/**
 * Signed presence: an announcement says "this key runs a session here, now"; a goodbye
 * says "that session has ended". Relays keep them in a roster, and every reader verifies
 * them: a relay can hide or replay an announcement, but not forge one.
 *
 * Announcement signed bytes: "interlink-announce-v1\0" || key (32) || name || session ||
 * cwd || git_root || summary (each u32 LE length + UTF-8) || ts (u64 LE).
 * Goodbye signed bytes: "interlink-goodbye-v1\0" || key (32) || session || ts.
 */
import { z } from 'zod';
import { isWellFormedUnicode, unsafeNameReason } from '../config/paths.js';
import { lengthPrefixed, u64le } from '../envelope/bytes.js';
import { InterlinkError } from '../errors.js';
import { decodeBase64url, encodeBase64url, isBase64urlOfLength } from '../identity/base64url.js';
import { PUBLIC_KEY_BYTES, SIGNATURE_BYTES, signBytes, verifyBytes, type SigningKey } from '../identity/ed25519.js';

export const ANNOUNCE_DOMAIN = 'interlink-announce-v1\0';
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

export const announcementSchema = z.object({
  key: keyText,
  name: field,
  session: sessionText,
  cwd: field,
  git_root: field,
  summary: field,
  ts,
  sig: sigText,
});
export type Announcement = z.infer<typeof announcementSchema>;

export const goodbyeSchema = z.object({ key: keyText, session: sessionText, ts, sig: sigText });
export type Goodbye = z.infer<typeof goodbyeSchema>;

function announcementBytes(a: Omit<Announcement, 'sig'>): Buffer {
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

export function signAnnouncement(key: SigningKey, fields: Omit<Announcement, 'key' | 'sig' | 'ts'> & { ts?: number }): Announcement {
  const unsigned = { key: encodeBase64url(key.publicKey), ...fields, ts: fields.ts ?? Date.now() };
  check(announcementSchema, { ...unsigned, sig: encodeBase64url(Buffer.alloc(SIGNATURE_BYTES)) }, 'announcement');
  return { ...unsigned, sig: encodeBase64url(signBytes(key, announcementBytes(unsigned))) };
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
  const parsed = announcementSchema.safeParse(data);
  if (!parsed.success) return undefined;
  const a = parsed.data;
  const id = JSON.stringify([a.key, a.name, a.session, a.cwd, a.git_root, a.summary, a.ts, a.sig]);
  if (verifiedCache.has(id)) return a;
  const ok = verifyBytes(decodeBase64url(a.key, PUBLIC_KEY_BYTES, 'key'), announcementBytes(a), decodeBase64url(a.sig, SIGNATURE_BYTES, 'sig'));
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
