/**
 * The identity file: created whole with mode 0600, never replaced without force, loaded
 * strictly; fingerprints; public keys that could never be anyone's; and first-run
 * creation racing across processes.
 */
import { createHash } from 'node:crypto';
import { chmod, mkdir, mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { InterlinkError, type ErrorCode } from '../../src/errors.js';
import { rejectsWith } from '../helpers/assert.js';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { signingKeyFromSeed } from '../../src/identity/ed25519.js';
import {
  createIdentity,
  fingerprintOf,
  loadIdentity,
  loadOrCreateIdentity,
  normalizeFingerprint,
  parsePublicKey,
} from '../../src/identity/identity.js';
import { reapChildren, startChild } from '../helpers/children.js';

const DIST_IDENTITY = fileURLToPath(new URL('../../dist/src/identity/identity.js', import.meta.url));
const FINGERPRINT = /^[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}$/;
const SEED_LINE = /^[A-Za-z0-9_-]{43}\n$/;

let dir: string;
let keyFile: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'interlink-identity-'));
  keyFile = join(dir, 'id.key');
});

afterEach(async () => {
  await reapChildren();
  await rm(dir, { recursive: true, force: true });
});

function throwsWith(fn: () => unknown, code: ErrorCode): InterlinkError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(InterlinkError);
    expect((err as InterlinkError).code).toBe(code);
    return err as InterlinkError;
  }
  throw new Error(`expected an InterlinkError with code ${code}`);
}

const modeOf = async (path: string): Promise<number> => (await stat(path)).mode & 0o777;

describe('createIdentity', () => {
  it('writes a base64url seed and a newline, readable only by the owner', async () => {
    const identity = await createIdentity(keyFile);
    const text = await readFile(keyFile, 'utf8');
    expect(text).toMatch(SEED_LINE);
    expect(await modeOf(keyFile)).toBe(0o600);
    const seed = Buffer.from(text.trim(), 'base64url');
    expect(seed).toHaveLength(32);
    expect(encodeBase64url(signingKeyFromSeed(seed).publicKey)).toBe(identity.key);
    expect(identity.fingerprint).toBe(fingerprintOf(identity.signingKey.publicKey));
    const loaded = await loadIdentity(keyFile);
    expect({ key: loaded.key, fingerprint: loaded.fingerprint }).toEqual({ key: identity.key, fingerprint: identity.fingerprint });
  });

  it('creates missing parent directories', async () => {
    const nested = join(dir, 'a', 'b', 'id.key');
    const identity = await createIdentity(nested);
    expect((await loadIdentity(nested)).key).toBe(identity.key);
  });

  it('refuses to overwrite an existing key without force, leaving it byte for byte', async () => {
    const first = await createIdentity(keyFile);
    const before = await readFile(keyFile);
    const err = await rejectsWith(createIdentity(keyFile), 'key_exists');
    expect(err.message).toContain(keyFile);
    expect(err.message).toContain('--force');
    expect(await readFile(keyFile)).toEqual(before);
    expect((await loadIdentity(keyFile)).key).toBe(first.key);
    expect(await readdir(dir)).toEqual(['id.key']);
  });

  it('refuses to overwrite even a file that is not a key', async () => {
    await writeFile(keyFile, 'precious notes\n');
    await rejectsWith(createIdentity(keyFile), 'key_exists');
    expect(await readFile(keyFile, 'utf8')).toBe('precious notes\n');
  });

  it('replaces the key with force, and the replacement is 0600 too', async () => {
    const first = await createIdentity(keyFile);
    await chmod(keyFile, 0o644);
    const second = await createIdentity(keyFile, { force: true });
    expect(second.key).not.toBe(first.key);
    expect((await loadIdentity(keyFile)).key).toBe(second.key);
    expect(await readFile(keyFile, 'utf8')).toMatch(SEED_LINE);
    expect(await modeOf(keyFile)).toBe(0o600);
    expect(await readdir(dir)).toEqual(['id.key']);
  });

  it('with force also creates a key where there was none', async () => {
    const identity = await createIdentity(keyFile, { force: true });
    expect((await loadIdentity(keyFile)).key).toBe(identity.key);
    expect(await modeOf(keyFile)).toBe(0o600);
  });
});

describe('loadIdentity', () => {
  it('reports a missing key as key_missing, with a hint to run keygen', async () => {
    const err = await rejectsWith(loadIdentity(keyFile), 'key_missing');
    expect(err.message).toContain(keyFile);
    expect(err.message).toContain('keygen');
  });

  it('reports a directory at the key path as key_unreadable', async () => {
    await mkdir(keyFile);
    const err = await rejectsWith(loadIdentity(keyFile), 'key_unreadable');
    expect(err.message).toContain(keyFile);
  });

  it.skipIf(process.getuid?.() === 0)('reports a key file without read permission as key_unreadable', async () => {
    await createIdentity(keyFile);
    await chmod(keyFile, 0o000);
    await rejectsWith(loadIdentity(keyFile), 'key_unreadable');
  });

  const seed = encodeBase64url(Buffer.alloc(32, 7));
  const badContents: Array<[string, string]> = [
    ['empty', ''],
    ['only white space', ' \n\t\n'],
    ['garbage', 'this is not a key\n'],
    ['short', seed.slice(0, 42) + '\n'],
    ['long', seed + 'A\n'],
    ['padded', seed + '=\n'],
    ['standard base64 alphabet', Buffer.alloc(32, 0xfb).toString('base64').replace(/=+$/, '') + '\n'],
    ['non-canonical last character', seed.slice(0, 42) + 'B\n'],
    ['a 64-byte secret key', encodeBase64url(Buffer.alloc(64, 7)) + '\n'],
    ['hex', Buffer.alloc(32, 7).toString('hex') + '\n'],
    ['two seeds', `${seed}\n${seed}\n`],
  ];

  it.each(badContents)('reports %s content as bad_key', async (_what, content) => {
    await writeFile(keyFile, content, { mode: 0o600 });
    const err = await rejectsWith(loadIdentity(keyFile), 'bad_key');
    expect(err.message).toContain(keyFile);
  });

  it('accepts the seed surrounded by white space (an editor may add a newline)', async () => {
    await writeFile(keyFile, `\n  ${seed}\r\n\n`, { mode: 0o600 });
    const identity = await loadIdentity(keyFile);
    expect(identity.key).toBe(encodeBase64url(signingKeyFromSeed(Buffer.alloc(32, 7)).publicKey));
  });

  it('loads a key readable by others but warns about it', async () => {
    const created = await createIdentity(keyFile);
    await chmod(keyFile, 0o644);
    const lines: string[] = [];
    const spy = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
      lines.push(String(chunk));
      return true;
    });
    try {
      expect((await loadIdentity(keyFile)).key).toBe(created.key);
    } finally {
      spy.mockRestore();
    }
    expect(lines.join('')).toContain('identity_permissions');
  });
});

describe('fingerprints', () => {
  it('are four groups of four hex digits over a domain-separated SHA-256', () => {
    const publicKey = signingKeyFromSeed(Buffer.alloc(32, 1)).publicKey;
    const fingerprint = fingerprintOf(publicKey);
    expect(fingerprint).toMatch(FINGERPRINT);
    const digest = createHash('sha256').update(Buffer.concat([Buffer.from('interlink-fingerprint-v1\0'), publicKey])).digest('hex');
    expect(fingerprint.replaceAll('-', '')).toBe(digest.slice(0, 16));
  });

  it('differ between keys and are stable for one key', async () => {
    const a = await createIdentity(join(dir, 'a.key'));
    const b = await createIdentity(join(dir, 'b.key'));
    expect(a.fingerprint).toMatch(FINGERPRINT);
    expect(a.fingerprint).not.toBe(b.fingerprint);
    expect((await loadIdentity(join(dir, 'a.key'))).fingerprint).toBe(a.fingerprint);
  });

  it('normalize from any case, with or without dashes, around white space', () => {
    const canonical = '0a1b-2c3d-4e5f-6789';
    for (const typed of [canonical, '0A1B-2C3D-4E5F-6789', '0a1b2c3d4e5f6789', '  0a1b2c3d-4e5f6789\n', '0a1b-2c3d-4e5f-6789'.toUpperCase()]) {
      expect(normalizeFingerprint(typed), typed).toBe(canonical);
    }
  });

  it('refuse to normalize anything that is not 16 hex digits', () => {
    for (const typed of ['', '0a1b-2c3d-4e5f-678', '0a1b-2c3d-4e5f-67890', '0a1b-2c3d-4e5f-678g', '0a1b 2c3d 4e5f 6789', 'not a fingerprint', '0x0a1b2c3d4e5f67']) {
      expect(normalizeFingerprint(typed), typed).toBeUndefined();
    }
  });
});

describe('parsePublicKey', () => {
  const fromHex = (hex: string): string => Buffer.from(hex, 'hex').toString('base64url');

  it('accepts a real key and returns its 32 bytes', () => {
    const publicKey = signingKeyFromSeed(Buffer.alloc(32, 9)).publicKey;
    expect(parsePublicKey(encodeBase64url(publicKey))).toEqual(publicKey);
  });

  const smallOrder = [
    '0000000000000000000000000000000000000000000000000000000000000000',
    '0000000000000000000000000000000000000000000000000000000000000080',
    '0100000000000000000000000000000000000000000000000000000000000000',
    '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05',
    '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85',
    'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a',
    'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa',
    'ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
  ];
  it.each(smallOrder)('rejects the small-order point %s', (hex) => {
    const err = throwsWith(() => parsePublicKey(fromHex(hex), 'key for bob'), 'bad_key');
    expect(err.message).toContain('key for bob');
  });

  const nonCanonical: Array<[string, string]> = [
    ['y = p', 'edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f'],
    ['y = p + 1 (1 again)', 'eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f'],
    ['y = p + 2', 'efffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f'],
    ['y = 2^255 - 1', 'ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f'],
    ['y = 2^255 - 1 with the sign bit', 'ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff'],
    ['y = 1 with a negative zero x', '0100000000000000000000000000000000000000000000000000000000000080'],
    ['y = p - 1 with a negative zero x', 'ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff'],
  ];
  it.each(nonCanonical)('rejects the non-canonical encoding %s', (_what, hex) => {
    throwsWith(() => parsePublicKey(fromHex(hex)), 'bad_key');
  });

  it('rejects text that is not 32 bytes of canonical unpadded base64url', () => {
    const good = encodeBase64url(signingKeyFromSeed(Buffer.alloc(32, 9)).publicKey);
    for (const text of ['', good.slice(1), good + 'A', good + '=', ` ${good}`, good.replace(/./, '+'), good.slice(0, 42) + '/']) {
      throwsWith(() => parsePublicKey(text), 'bad_key');
    }
  });
});

describe('loadOrCreateIdentity', () => {
  it('creates the key on first use and loads it afterwards', async () => {
    const first = await loadOrCreateIdentity(keyFile);
    const again = await loadOrCreateIdentity(keyFile);
    expect(again.key).toBe(first.key);
  });

  it('never masks a damaged key by creating a new one', async () => {
    await writeFile(keyFile, 'damaged\n');
    await rejectsWith(loadOrCreateIdentity(keyFile), 'bad_key');
    expect(await readFile(keyFile, 'utf8')).toBe('damaged\n');
  });

  it('gives every concurrent caller in one process the same key', async () => {
    const identities = await Promise.all(Array.from({ length: 8 }, () => loadOrCreateIdentity(keyFile)));
    const onDisk = await loadIdentity(keyFile);
    expect(new Set(identities.map((i) => i.key))).toEqual(new Set([onDisk.key]));
  });

  it('gives 8 processes racing on first run the same key', async () => {
    const script = join(dir, 'race.mjs');
    await writeFile(
      script,
      [
        `import { loadOrCreateIdentity } from ${JSON.stringify(DIST_IDENTITY)};`,
        `process.stdout.write('ready\\n');`,
        `process.stdin.once('data', async () => {`,
        `  const identity = await loadOrCreateIdentity(process.argv[2]);`,
        `  process.stdout.write(JSON.stringify({ key: identity.key }) + '\\n');`,
        `});`,
      ].join('\n'),
    );
    const racers = Array.from({ length: 8 }, () => startChild(script, [keyFile]));
    // Start line: every process is loaded and waiting before any of them touches the key.
    await Promise.all(racers.map((r) => r.waitFor('ready\n')));
    for (const r of racers) r.child.stdin?.end('go\n');
    const results = await Promise.all(racers.map((r) => r.done));
    const keys = results.map(({ code, stdout, stderr }) => {
      expect(code, stderr).toBe(0);
      return (JSON.parse(stdout.split('\n')[1] ?? '') as { key: string }).key;
    });
    const onDisk = await loadIdentity(keyFile);
    expect(new Set(keys)).toEqual(new Set([onDisk.key]));
    expect(await readdir(dir)).toEqual(['id.key', 'race.mjs']);
  });
});
