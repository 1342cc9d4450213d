/**
 * peers.json with real files and real processes: edits never re-point a petname, a
 * damaged file is moved aside and reported, and concurrent writers in different
 * processes — the CLI's `peers add` included — lose nothing. The sidecar lock under it
 * has its own tests in test/store/lock.test.ts; both files also run with /proc hidden.
 */
import { mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { fileState } from '../helpers/fixtures.js';
import { InterlinkError, type ErrorCode } from '../../src/errors.js';
import { captureStderr, rejectsWith } from '../helpers/assert.js';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { generateSigningKey } from '../../src/identity/ed25519.js';
import { addPeer, checkPetname, loadPeers, removePeer } from '../../src/peers/peers.js';
import { raceChildren, reapChildren, startLine, writeScript } from '../helpers/children.js';
import { reapCli, runCli } from '../helpers/codex.js';
import { expectProcAsTheRunSays } from '../helpers/noproc.js';

const DIST = fileURLToPath(new URL('../../dist/src/', import.meta.url));
const ASIDE = /^peers\.json\.corrupt-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z-[0-9a-f]{6}$/;

let dir: string;
let peersFile: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'interlink-peers-'));
  peersFile = join(dir, 'peers.json');
});

afterEach(async () => {
  vi.restoreAllMocks();
  await reapChildren();
  await reapCli();
  await rm(dir, { recursive: true, force: true });
});

const newKey = (): string => encodeBase64url(generateSigningKey().publicKey);

describe('peers.json edits', () => {
  it('adds, lists in petname order, and removes', async () => {
    const [alice, bob, carol] = [newKey(), newKey(), newKey()];
    expect(await addPeer(peersFile, 'carol', carol)).toEqual({ outcome: 'added', petname: 'carol' });
    expect(await addPeer(peersFile, 'alice', alice)).toEqual({ outcome: 'added', petname: 'alice' });
    expect(await addPeer(peersFile, 'bob', bob)).toEqual({ outcome: 'added', petname: 'bob' });

    const onDisk: unknown = JSON.parse(await readFile(peersFile, 'utf8'));
    expect(onDisk).toEqual({ alice: { key: alice }, bob: { key: bob }, carol: { key: carol } });

    const { table, recovered } = await loadPeers(peersFile);
    expect(recovered).toBeUndefined();
    expect(table.peers).toEqual([
      { petname: 'alice', key: alice },
      { petname: 'bob', key: bob },
      { petname: 'carol', key: carol },
    ]);
    expect(table.petnameOf(bob)).toBe('bob');
    expect(table.keyOf('carol')).toBe(carol);
    expect(table.has(alice)).toBe(true);

    expect(await removePeer(peersFile, 'bob')).toEqual({ key: bob });
    const after = await loadPeers(peersFile);
    expect(after.table.peers.map((p) => p.petname)).toEqual(['alice', 'carol']);
    expect(after.table.has(bob)).toBe(false);
    expect(await readdir(dir)).toEqual(['peers.json']);
  });

  it('reads a missing file as no peers and creates nothing', async () => {
    const { table, recovered } = await loadPeers(peersFile);
    expect(table.peers).toEqual([]);
    expect(recovered).toBeUndefined();
    expect(await readdir(dir)).toEqual([]);
  });

  it('adding the same key under the same petname again changes nothing, not even the inode', async () => {
    const key = newKey();
    await addPeer(peersFile, 'alice', key);
    const before = await fileState(peersFile);
    expect(await addPeer(peersFile, 'alice', key)).toEqual({ outcome: 'unchanged', petname: 'alice' });
    expect(await fileState(peersFile)).toEqual(before);
  });

  it('refuses to re-point a petname to another key and leaves the file alone', async () => {
    const original = newKey();
    await addPeer(peersFile, 'alice', original);
    const before = await fileState(peersFile);
    const err = await rejectsWith(addPeer(peersFile, 'alice', newKey()), 'peer_conflict');
    expect(err.message).toContain('alice');
    expect(await fileState(peersFile)).toEqual(before);
    expect((await loadPeers(peersFile)).table.keyOf('alice')).toBe(original);
  });

  it('refuses the same key under a second petname', async () => {
    const key = newKey();
    await addPeer(peersFile, 'alice', key);
    const before = await fileState(peersFile);
    const err = await rejectsWith(addPeer(peersFile, 'alice2', key), 'peer_conflict');
    expect(err.message).toContain('alice');
    expect(await fileState(peersFile)).toEqual(before);
  });

  it('refuses to remove an unknown petname, with or without a file', async () => {
    await rejectsWith(removePeer(peersFile, 'nobody'), 'unknown_peer');
    expect(await readdir(dir)).toEqual([]);
    await addPeer(peersFile, 'alice', newKey());
    const before = await fileState(peersFile);
    await rejectsWith(removePeer(peersFile, 'nobody'), 'unknown_peer');
    expect(await fileState(peersFile)).toEqual(before);
    expect(await readdir(dir)).toEqual(['peers.json']);
  });

  it('keeps fields it does not know on other entries', async () => {
    const bob = newKey();
    await writeFile(peersFile, JSON.stringify({ bob: { key: bob, added_by: 'pairing' } }));
    await addPeer(peersFile, 'alice', newKey());
    const onDisk = JSON.parse(await readFile(peersFile, 'utf8')) as Record<string, unknown>;
    expect(onDisk.bob).toEqual({ key: bob, added_by: 'pairing' });
  });

  const badNames: Array<[string, string]> = [
    ['a parent directory', '../x'],
    ['a bare ..', '..'],
    ['a slash', 'a/b'],
    ['a backslash', 'a\\b'],
    ['NUL', 'a\u0000b'],
    ['a control character', 'a\u001bb'],
    ['DEL', 'a\u007fb'],
    ['a C1 control character', 'a\u0085b'],
    ['129 bytes', 'x'.repeat(129)],
    ['129 bytes of multi-byte text', '€'.repeat(43)],
    ['empty', ''],
    ['leading white space', ' alice'],
    ['the reserved word self', 'self'],
  ];

  it.each(badNames)('refuses a petname with %s, adding or removing', async (_what, name) => {
    await rejectsWith(addPeer(peersFile, name, newKey()), 'bad_name');
    expect(await readdir(dir)).toEqual([]);
    await addPeer(peersFile, 'alice', newKey());
    const before = await fileState(peersFile);
    await rejectsWith(removePeer(peersFile, name), 'bad_name');
    expect(await fileState(peersFile)).toEqual(before);
    expect(() => checkPetname(name)).toThrow(InterlinkError);
  });

  it('accepts a petname of exactly 128 bytes, multi-byte included', async () => {
    await addPeer(peersFile, 'x'.repeat(128), newKey());
    await addPeer(peersFile, '€'.repeat(42) + 'ab', newKey());
    expect((await loadPeers(peersFile)).table.peers).toHaveLength(2);
  });

  it('refuses a key that is not a usable public key', async () => {
    const smallOrder = Buffer.alloc(32).toString('base64url');
    for (const key of ['not-a-key', '', newKey() + '=', smallOrder]) {
      await rejectsWith(addPeer(peersFile, 'alice', key), 'bad_key');
    }
    expect(await readdir(dir)).toEqual([]);
  });
});

describe('a damaged peers.json', () => {
  const damaged: Array<[string, () => string]> = [
    ['not JSON', () => '{"alice": {"key": '],
    ['a bad key inside', () => JSON.stringify({ alice: { key: 'AAAA' } })],
    ['a small-order key inside', () => JSON.stringify({ alice: { key: Buffer.alloc(32).toString('base64url') } })],
    ['an entry without a key', () => JSON.stringify({ alice: { name: 'alice' } })],
    ['an unsafe petname inside', () => JSON.stringify({ '../alice': { key: newKey() } })],
    ['a reserved petname inside', () => JSON.stringify({ self: { key: newKey() } })],
    ['an array', () => '[]'],
  ];

  it.each(damaged)('with %s is moved aside, reported and logged, never silently reset', async (_what, content) => {
    const text = content();
    await writeFile(peersFile, text);
    const logged = captureStderr();
    const { table, recovered } = await loadPeers(peersFile);
    expect(table.peers).toEqual([]);
    expect(recovered).toBeDefined();
    expect(recovered?.file).toBe(peersFile);
    expect(recovered?.reason.length).toBeGreaterThan(0);
    const entries = await readdir(dir);
    expect(entries).toHaveLength(1);
    expect(entries[0]).toMatch(ASIDE);
    expect(recovered?.movedTo).toBe(join(dir, entries[0]!));
    expect(await readFile(join(dir, entries[0]!), 'utf8')).toBe(text);
    expect(logged.join('')).toContain('store_corrupt');
  });

  it('is moved aside once when several readers find it at the same moment', async () => {
    await writeFile(peersFile, 'garbage');
    captureStderr();
    const results = await Promise.allSettled(Array.from({ length: 6 }, () => loadPeers(peersFile)));
    expect(results.every((r) => r.status === 'fulfilled')).toBe(true);
    const recoveries = results.flatMap((r) => (r.status === 'fulfilled' && r.value.recovered ? [r.value.recovered] : []));
    expect(recoveries).toHaveLength(1);
    const entries = await readdir(dir);
    expect(entries).toHaveLength(1);
    expect(entries[0]).toMatch(ASIDE);
  });

  it('is moved aside by an edit too, which reports it and starts a fresh file', async () => {
    await writeFile(peersFile, 'garbage');
    captureStderr();
    const key = newKey();
    const result = await addPeer(peersFile, 'alice', key);
    expect(result).toMatchObject({ outcome: 'added', recovered: { file: peersFile } });
    const entries = (await readdir(dir)).sort();
    expect(entries[0]).toBe('peers.json');
    expect(entries[1]).toMatch(ASIDE);
    expect(entries).toHaveLength(2);
    expect(await readFile(join(dir, entries[1]!), 'utf8')).toBe('garbage');
    expect(JSON.parse(await readFile(peersFile, 'utf8'))).toEqual({ alice: { key } });
  });
});

// ---------------------------------------------------------------------------------------
// Processes.
// ---------------------------------------------------------------------------------------

describe('peers.json across processes', () => {
  it('keeps all 60 peers when 6 processes each add 10 at once', async () => {
    const script = await writeScript(dir, 'add-peers.mjs', [
      `import { addPeer } from ${JSON.stringify(join(DIST, 'peers/peers.js'))};`,
      `import { generateSigningKey } from ${JSON.stringify(join(DIST, 'identity/ed25519.js'))};`,
      ...startLine,
      `const [file, writer] = process.argv.slice(2);`,
      `const added = {};`,
      `for (let i = 0; i < 10; i++) {`,
      `  const key = generateSigningKey().publicKey.toString('base64url');`,
      `  const petname = 'w' + writer + '-' + i;`,
      `  const { outcome } = await addPeer(file, petname, key);`,
      `  if (outcome !== 'added') throw new Error(petname + ' ' + outcome);`,
      `  added[petname] = key;`,
      `}`,
      `process.stdout.write(JSON.stringify(added) + '\\n');`,
    ]);
    const outputs = await raceChildren(script, (i) => [peersFile, String(i)], 6);
    const expected: Record<string, string> = Object.assign({}, ...outputs.map((o) => JSON.parse(o) as Record<string, string>));
    expect(Object.keys(expected)).toHaveLength(60);
    const { table, recovered } = await loadPeers(peersFile);
    expect(recovered).toBeUndefined();
    expect(Object.fromEntries(table.peers.map((p) => [p.petname, p.key]))).toEqual(expected);
    expect((await readdir(dir)).filter((name) => name.startsWith('peers.json') || name.startsWith('.peers.json'))).toEqual(['peers.json']);
  });

  it('keeps all 24 peers when 24 `peers add` commands run at once, each exiting 0', async () => {
    expectProcAsTheRunSays();
    const keys = Array.from({ length: 24 }, newKey);
    const env = { HOME: dir, INTERLINK_CONFIG_DIR: dir, INTERLINK_STATE_DIR: join(dir, 'state') };
    // Deadlines far beyond need: 24 Node processes starting at once on a small, busy
    // machine take a while, and the test is about what they leave, not how fast.
    const runs = await Promise.all(keys.map((key, i) => runCli(['peers', 'add', `name${i}`, key], env, 240_000)));
    for (const run of runs) expect(run, run.stderr).toMatchObject({ code: 0 });
    const onDisk = JSON.parse(await readFile(peersFile, 'utf8')) as Record<string, { key: string }>;
    expect(onDisk).toEqual(Object.fromEntries(keys.map((key, i) => [`name${i}`, { key }])));
  }, 300_000);
});
