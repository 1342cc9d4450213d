/**
 * The relay's own Ed25519 key (DESIGN.md "The relay", "The relay's key"). Clients pin it
 * or record it on first use, and every auth proof names it, so it must outlive restarts:
 * with a store it is kept in `<db>/relay-key.json` (or the file `--key` names), mode
 * 0600, created once and never replaced — a damaged file stops the relay rather than
 * silently becoming a new key its clients would refuse. Without a file the relay makes a
 * fresh key at every start, and a client that pinned or recorded it refuses the next one.
 */
import { z } from 'zod';
import { errnoCode, InterlinkError } from '../errors.js';
import { decodeBase64url, encodeBase64url } from '../identity/base64url.js';
import { generateSigningKey, SEED_BYTES, signingKeyFromSeed, type SigningKey } from '../identity/ed25519.js';
import { parseJsonWith } from '../json.js';
import { writeFileExclusive } from '../store/atomic.js';
import { readPrivateFile } from '../store/private.js';

export const RELAY_KEY_FORMAT = 'interlink-relay-key';

const keyFileSchema = z.object({ format: z.literal(RELAY_KEY_FORMAT), version: z.literal(1), seed: z.string(), key: z.string() });

export interface RelayKey {
  readonly signingKey: SigningKey;
  /** base64url public key: what the challenge carries and clients pin. */
  readonly key: string;
}

function relayKeyOf(signingKey: SigningKey): RelayKey {
  return { signingKey, key: encodeBase64url(signingKey.publicKey) };
}

/** A key for this run only (a relay without a store). */
export function freshRelayKey(): RelayKey {
  return relayKeyOf(generateSigningKey());
}

function damaged(path: string, why: string): InterlinkError {
  return new InterlinkError('bad_key', `the relay key at ${path} ${why}; clients that know this relay expect its key, so it is not replaced: restore the file, or delete it to make a new key (clients must then accept the new one)`);
}

/** The key in `path`, or undefined when there is no file; a damaged file is an error, never a new key. */
export async function readRelayKey(path: string): Promise<RelayKey | undefined> {
  let text: string;
  try {
    text = await readPrivateFile(path);
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return undefined;
    throw new InterlinkError('key_unreadable', `cannot read the relay key at ${path} (${errnoCode(err) ?? String(err)})`, undefined, { cause: err });
  }
  const parsed = parseJsonWith(keyFileSchema, text);
  if (!parsed.ok) throw damaged(path, `is not an ${RELAY_KEY_FORMAT} file`);
  let relayKey: RelayKey;
  try {
    relayKey = relayKeyOf(signingKeyFromSeed(decodeBase64url(parsed.value.seed, SEED_BYTES, 'seed')));
  } catch {
    throw damaged(path, 'holds no 32-byte base64url seed');
  }
  if (relayKey.key !== parsed.value.key) throw damaged(path, 'names a public key its seed does not give');
  return relayKey;
}

/**
 * The key in `path`, created there first if there is none. Created durably (temp file,
 * fsync, link into place, fsync of the directory) and never over an existing file, so
 * two starts cannot end with two keys.
 */
export async function loadOrCreateRelayKey(path: string): Promise<RelayKey> {
  const existing = await readRelayKey(path);
  if (existing !== undefined) return existing;
  const created = freshRelayKey();
  const content = JSON.stringify({ format: RELAY_KEY_FORMAT, version: 1, seed: encodeBase64url(created.signingKey.seed), key: created.key }, null, 2) + '\n';
  if (await writeFileExclusive(path, content)) return created;
  const raced = await readRelayKey(path);
  if (raced === undefined) throw damaged(path, 'vanished while it was being created');
  return raced;
}
