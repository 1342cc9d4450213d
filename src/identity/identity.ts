/**
 * The local identity: an Ed25519 seed in `id.key` (base64url, mode 0600). The public key
 * is the identity; the fingerprint is a short, fixed-length name for people to compare.
 */
import { createHash } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import { InterlinkError, errnoCode } from '../errors.js';
import { log } from '../log.js';
import { writeFileExclusive, writeFileAtomic } from '../store/atomic.js';
import { decodeBase64url, encodeBase64url } from './base64url.js';
import { SEED_BYTES, PUBLIC_KEY_BYTES, generateSigningKey, isAcceptablePoint, isOnCurve, signingKeyFromSeed, type SigningKey } from './ed25519.js';

export interface Identity {
  readonly signingKey: SigningKey;
  /** base64url public key: the identity's name everywhere. */
  readonly key: string;
  readonly fingerprint: string;
}

/**
 * 64 bits of SHA-256 over a domain string and the key, as four groups of four hex
 * digits. Short enough to read aloud, long enough that grinding a look-alike key costs
 * 2^64 key generations rather than the 2^48 of an 8-character key prefix.
 */
export function fingerprintOf(publicKey: Uint8Array): string {
  const digest = createHash('sha256').update('interlink-fingerprint-v1\0').update(publicKey).digest('hex');
  return `${digest.slice(0, 4)}-${digest.slice(4, 8)}-${digest.slice(8, 12)}-${digest.slice(12, 16)}`;
}

/** Accepts a fingerprint typed with or without dashes, in either case. */
export function normalizeFingerprint(text: string): string | undefined {
  const hex = text.trim().toLowerCase().replaceAll('-', '');
  if (!/^[0-9a-f]{16}$/.test(hex)) return undefined;
  return `${hex.slice(0, 4)}-${hex.slice(4, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}`;
}

/** Parses a base64url public key and refuses one that could never verify a signature. */
export function parsePublicKey(text: string, what = 'public key'): Buffer {
  const bytes = decodeBase64url(text, PUBLIC_KEY_BYTES, what);
  if (!isAcceptablePoint(bytes) || !isOnCurve(bytes)) {
    throw new InterlinkError('bad_key', `${what} is not a usable Ed25519 public key (not a canonical curve point of large order)`);
  }
  return bytes;
}

export function identityFromSigningKey(signingKey: SigningKey): Identity {
  return { signingKey, key: encodeBase64url(signingKey.publicKey), fingerprint: fingerprintOf(signingKey.publicKey) };
}

export async function loadIdentity(path: string): Promise<Identity> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    const code = errnoCode(err);
    if (code === 'ENOENT') {
      throw new InterlinkError('key_missing', `no identity at ${path}; create one with \`interlink-mcp keygen\``);
    }
    throw new InterlinkError('key_unreadable', `cannot read the identity at ${path} (${code ?? String(err)})`, undefined, { cause: err });
  }
  let seed: Buffer;
  try {
    seed = decodeBase64url(text.trim(), SEED_BYTES, 'identity seed');
  } catch {
    throw new InterlinkError('bad_key', `the identity at ${path} is not a 32-byte base64url Ed25519 seed`);
  }
  await warnIfReadableByOthers(path);
  return identityFromSigningKey(signingKeyFromSeed(seed));
}

async function warnIfReadableByOthers(path: string): Promise<void> {
  if (process.platform === 'win32') return;
  const { mode } = await stat(path);
  if ((mode & 0o077) !== 0) {
    log.warn('identity_permissions', { path, mode: (mode & 0o777).toString(8), hint: 'chmod 600 it' });
  }
}

/**
 * Creates a new identity. Without `force` an existing key is never replaced: the new
 * file is linked into place, which fails if one already exists. Either way the key is
 * on disk (file and directory synced) before this returns.
 */
export async function createIdentity(path: string, options: { force?: boolean } = {}): Promise<Identity> {
  const signingKey = generateSigningKey();
  const content = encodeBase64url(signingKey.seed) + '\n';
  if (options.force === true) {
    await writeFileAtomic(path, content, { mode: 0o600 });
  } else {
    const created = await writeFileExclusive(path, content, { mode: 0o600 });
    if (!created) {
      throw new InterlinkError('key_exists', `an identity already exists at ${path}; pass --force to replace it (peers paired with it will no longer recognise you)`);
    }
  }
  return identityFromSigningKey(signingKey);
}

/** `20261201T110045Z`: ISO 8601 basic format, safe in a file name everywhere. */
function fileStamp(at: Date): string {
  return at.toISOString().replace(/\.\d{3}Z$/, 'Z').replaceAll('-', '').replaceAll(':', '');
}

/**
 * Copies the identity at `path` to `<path>.<ISO date>.bak` (mode 0600, synced, never over
 * an existing backup) before `keygen --force` replaces it, so a key replaced by mistake
 * can be put back. Returns the backup's path, or undefined when there was no key.
 */
export async function backupIdentity(path: string, at: Date = new Date()): Promise<string | undefined> {
  let content: Buffer;
  try {
    content = await readFile(path);
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return undefined;
    throw new InterlinkError('key_unreadable', `cannot read the identity at ${path} to back it up (${errnoCode(err) ?? String(err)})`, undefined, { cause: err });
  }
  const base = `${path}.${fileStamp(at)}`;
  for (let n = 1; ; n++) {
    const backup = n === 1 ? `${base}.bak` : `${base}-${n}.bak`;
    if (await writeFileExclusive(backup, content, { mode: 0o600 })) return backup;
  }
}

/** Loads the identity, creating it first if there is none (the server's first run). */
export async function loadOrCreateIdentity(path: string): Promise<Identity> {
  try {
    return await loadIdentity(path);
  } catch (err) {
    if (!(err instanceof InterlinkError) || err.code !== 'key_missing') throw err;
  }
  try {
    return await createIdentity(path);
  } catch (err) {
    // Another process created it between our read and our write: use theirs.
    if (err instanceof InterlinkError && err.code === 'key_exists') return loadIdentity(path);
    throw err;
  }
}
