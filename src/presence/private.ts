/**
 * Presence only peers can read (announcement version 2). What a session tells the roster
 * beyond its key and session — the name its person chose, its working directory, git root
 * and summary — is sealed so that only the announcer's peers and its own sessions open it:
 *
 *   details  the four fields, length-prefixed and padded to a size class (envelope/seal.ts),
 *            sealed with ChaCha20-Poly1305 under a content key drawn fresh for each
 *            announcement; associated data: "interlink-presence-v2\0" || key || session || ts.
 *   slots    one per reader: the content key sealed under the message direction key from
 *            the announcer to that reader (envelope/seal.ts `directionKey`), with the same
 *            associated data and "key" after it; and a hint, the first 8 bytes of
 *            HMAC-SHA256(direction key, "interlink-presence-hint\0" || ts || session), so a
 *            reader finds its slot without trying each, and a hint says nothing to anyone
 *            else (it changes with every announcement). Slots are sorted by hint.
 *   name_tag the first 16 bytes of SHA-256("interlink-name-v1\0" || key || name): whoever
 *            knows the name finds the session by it (pairing by name), nobody reads it off
 *            the roster. A name is a guessable claim, not a secret: a stranger who guesses
 *            it can confirm the guess, as with any name a person tells others.
 *
 * A relay and a stranger learn the key, the session, the time, the details' size class
 * and how many slots there are.
 */
import { createHash, createHmac, randomBytes } from 'node:crypto';
import { lengthPrefixed, u64le } from '../envelope/bytes.js';
import { SealError, aeadOpen, aeadSeal, directionKey, paddedFields, readFields } from '../envelope/seal.js';
import type { SigningKey } from '../identity/ed25519.js';
import { HINT_BYTES, MAX_FIELD_BYTES, MAX_SLOTS, NAME_BUCKETS, NAME_TAG_BYTES, type AnnouncementV2, type SealedAnnouncement, type Slot } from './announcement.js';

export interface Details {
  name: string;
  cwd: string;
  git_root: string;
  summary: string;
}

const DETAILS_DOMAIN = 'interlink-presence-v2\0';
const HINT_DOMAIN = 'interlink-presence-hint\0';
const NAME_DOMAIN = 'interlink-name-v1\0';
const BUCKET_DOMAIN = 'interlink-name-bucket-v1\0';

/**
 * The bucket of a name: the first 12 bits of SHA-256("interlink-name-bucket-v1\0" ||
 * name). Announced (version 3) and asked for by pairing by name: the relay learns 12 bits
 * of the name's hash, and hands back the few sessions of that bucket, whose name tags the
 * asker then checks.
 */
export function nameBucket(name: string): number {
  const digest = createHash('sha256').update(BUCKET_DOMAIN).update(name, 'utf8').digest();
  return digest.readUInt16BE(0) % NAME_BUCKETS;
}

export function nameTag(key: string, name: string): string {
  return createHash('sha256').update(NAME_DOMAIN).update(Buffer.from(key, 'base64url')).update(name, 'utf8').digest().subarray(0, NAME_TAG_BYTES).toString('base64url');
}

function associatedData(key: string, session: string, ts: number): Buffer {
  return Buffer.concat([Buffer.from(DETAILS_DOMAIN, 'utf8'), Buffer.from(key, 'base64url'), ...lengthPrefixed(session), u64le(ts)]);
}

function hintOf(direction: Buffer, session: string, ts: number): string {
  return createHmac('sha256', direction).update(HINT_DOMAIN).update(u64le(ts)).update(Buffer.concat(lengthPrefixed(session))).digest().subarray(0, HINT_BYTES).toString('base64url');
}

/**
 * The sealed parts of an announcement from `me` for `readers` (base64url keys: the peers
 * and this identity's own key; at most MAX_SLOTS, the rest are left out).
 */
export function sealDetails(me: SigningKey, session: string, ts: number, details: Details, readers: readonly string[]): Pick<AnnouncementV2, 'name_tag' | 'details' | 'slots'> {
  const mine = me.publicKey.toString('base64url');
  const aad = associatedData(mine, session, ts);
  const contentKey = randomBytes(32);
  const sealed = aeadSeal(contentKey, aad, paddedFields([details.name, details.cwd, details.git_root, details.summary]));
  const slotAad = Buffer.concat([aad, Buffer.from('key', 'utf8')]);
  const slots: Slot[] = [...new Set(readers)].slice(0, MAX_SLOTS).map((reader) => {
    const direction = directionKey(me, mine, reader);
    return { hint: hintOf(direction, session, ts), key: aeadSeal(direction, slotAad, contentKey).toString('base64url') };
  });
  slots.sort((a, b) => (a.hint < b.hint ? -1 : a.hint > b.hint ? 1 : 0));
  return { name_tag: nameTag(mine, details.name), details: sealed.toString('base64url'), slots };
}

/** The details of a verified version 2 announcement, when `me` is one of its readers; else undefined. */
export function openDetails(me: SigningKey, announcement: SealedAnnouncement): Details | undefined {
  const mine = me.publicKey.toString('base64url');
  let direction: Buffer;
  try {
    direction = directionKey(me, announcement.key, mine);
  } catch {
    return undefined;
  }
  const hint = hintOf(direction, announcement.session, announcement.ts);
  const slot = announcement.slots.find((s) => s.hint === hint);
  if (slot === undefined) return undefined;
  const aad = associatedData(announcement.key, announcement.session, announcement.ts);
  const contentKey = aeadOpen(direction, Buffer.concat([aad, Buffer.from('key', 'utf8')]), Buffer.from(slot.key, 'base64url'));
  if (contentKey === undefined || contentKey.length !== 32) return undefined;
  const plaintext = aeadOpen(contentKey, aad, Buffer.from(announcement.details, 'base64url'));
  if (plaintext === undefined) return undefined;
  try {
    const [name = '', cwd = '', git_root = '', summary = ''] = readFields(plaintext, ['name', 'cwd', 'git_root', 'summary']);
    const details = { name, cwd, git_root, summary };
    // The announcer signed the name tag: details that name another name are not its details.
    if (nameTag(announcement.key, name) !== announcement.name_tag) return undefined;
    return Object.values(details).every((v) => Buffer.byteLength(v, 'utf8') <= MAX_FIELD_BYTES) ? details : undefined;
  } catch (err) {
    if (err instanceof SealError) return undefined;
    throw err;
  }
}
