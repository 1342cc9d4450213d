/**
 * Names at the command line (issue 37): the built CLI refuses a petname or session id with
 * a hidden character (naming it as U+XXXX) and a petname that looks the same as a peer's
 * (naming that peer), takes every name people use, and shows a name stored before the
 * rule with its hidden characters made visible.
 */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { generateSigningKey } from '../../src/identity/ed25519.js';
import { expectOneLine, expectSuccess, runCli, userEnv, type UserDirs } from '../helpers/cli.js';
import { tempDir } from '../helpers/fixtures.js';

const newKey = (): string => encodeBase64url(generateSigningKey().publicKey);

let dir: { path: string; remove: () => Promise<void> };
let dirs: UserDirs;
let env: NodeJS.ProcessEnv;
beforeEach(async () => {
  dir = await tempDir('interlink-names-');
  dirs = { root: dir.path, configDir: join(dir.path, 'config'), stateDir: join(dir.path, 'state') };
  env = userEnv(dirs);
});
afterEach(() => dir.remove());

const peersFile = () => join(dirs.configDir, 'peers.json');

describe('peers add', () => {
  it.each([
    ['U+202E', 'bob\u202egpj.exe'],
    ['U+2028', 'bob\u2028alice'],
    ['U+200B', 'b\u200bob'],
    ['U+FEFF', '\ufeffbob'],
    ['U+2066', 'bo\u2066b'],
  ])('refuses a petname holding %s, naming it, and writes nothing', async (code, name) => {
    const line = expectOneLine(await runCli(['peers', 'add', name, newKey()], env), 64, code);
    expect(line).toContain(code);
    expect(/[\p{Cf}\p{Zl}\p{Zp}]/u.test(line)).toBe(false);
    const json = await runCli(['peers', 'add', name, newKey(), '--json'], env);
    expect(JSON.parse(json.stdout)).toMatchObject({ error: { code: 'usage', message: expect.stringContaining(code) } });
    await expect(readFile(peersFile(), 'utf8')).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('refuses a petname that looks the same as a peer, naming that peer', async () => {
    expectSuccess(await runCli(['peers', 'add', 'bob', newKey()], env));
    for (const lookalike of ['Bob', 'b\u043eb', 'b0b']) {
      const run = await runCli(['peers', 'add', lookalike, newKey(), '--json'], env);
      expect(run.code, lookalike).toBe(1);
      expect(JSON.parse(run.stdout)).toMatchObject({ error: { code: 'peer_conflict', message: expect.stringContaining('"bob"') } });
    }
    expect(Object.keys(JSON.parse(await readFile(peersFile(), 'utf8')) as object)).toEqual(['bob']);
  });

  it('takes ASCII, accented and CJK petnames, stored in NFC', async () => {
    const names = ['carol-2', 'Zoe\u0308', 'José', '山田', 'Мария'];
    for (const name of names) expectSuccess(await runCli(['peers', 'add', name, newKey()], env));
    const stored = Object.keys(JSON.parse(await readFile(peersFile(), 'utf8')) as object);
    expect(stored.sort()).toEqual(names.map((n) => n.normalize('NFC')).sort());
    expect(stored).toContain('Zoë');
  });
});

describe('names stored before the rule', () => {
  it('still read: peers list shows the hidden characters as escapes, and peers remove renames them away', async () => {
    await mkdir(dirs.configDir, { recursive: true });
    const legacy = 'bob\u202egpj.exe';
    await writeFile(peersFile(), JSON.stringify({ [legacy]: { key: newKey() }, alice: { key: newKey() } }));
    const listed = expectSuccess(await runCli(['peers', 'list'], env));
    expect(listed).toContain('bob\\u{202e}gpj.exe');
    expect(listed).not.toContain('\u202e');
    const json = JSON.parse(expectSuccess(await runCli(['peers', 'list', '--json'], env))) as { peers: { petname: string }[] };
    expect(json.peers.map((p) => p.petname)).toContain(legacy);
    expectSuccess(await runCli(['peers', 'remove', legacy], env));
    expect(Object.keys(JSON.parse(await readFile(peersFile(), 'utf8')) as object)).toEqual(['alice']);
  });
});

describe('session ids', () => {
  it('INTERLINK_SESSION and inbox --session refuse a hidden character, naming it', async () => {
    const withEnv = await runCli(['status'], userEnv(dirs, { INTERLINK_SESSION: 'work\u200b' }));
    expect(withEnv.code).toBe(64);
    expect(withEnv.stderr).toContain('U+200B');
    expectSuccess(await runCli(['keygen'], env));
    const flag = expectOneLine(await runCli(['inbox', '--session', 'a\u2029b'], env), 64);
    expect(flag).toContain('U+2029');
  });
});
