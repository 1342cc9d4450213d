/**
 * A damaged peers.json as a person meets it: a truncated file, or the common hand edit
 * `{"bob": "<key>"}`. The read-only commands leave it byte for byte where it is and say
 * what is wrong in a sentence (exit 1); a writer moves it aside and says where; the
 * server says the same in its log and in a tool error. Real CLI and serve processes.
 */
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { generateSigningKey } from '../../src/identity/ed25519.js';
import { eventually, startPeer, type Peer } from '../helpers/mcp.js';
import { person, reapCli, type Person } from '../helpers/pairing.js';
import { reapAll } from '../helpers/process.js';
import { freePort } from '../helpers/spawn-relay.js';

let root: string;
let alice: Person;
const peers: Peer[] = [];

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-damaged-'));
  // No relay answers: the commands under test must not need one to report the damage.
  alice = person(root, 'alice', `ws://127.0.0.1:${await freePort()}`);
  await mkdir(alice.config, { recursive: true });
  expect((await alice.cli(['keygen'])).code).toBe(0);
});
afterEach(async () => {
  await Promise.all(peers.splice(0).map((p) => p.close().catch(() => undefined)));
  await reapCli();
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

const newKey = (): string => encodeBase64url(generateSigningKey().publicKey);

const TRUNCATED = '{\n  "bob": {"key": ';
const HAND_EDIT = (key: string) => `{\n  "carol": {"key": "${key}"},\n  "bob": "${key.slice(0, 10)}${newKey().slice(10)}"\n}\n`;
const HAND_EDIT_PROBLEM = 'line 3: expected {"key": "<base64url public key>"} for "bob", found a string; write it as {"bob": {"key": "<key>"}}';
const UNAVAILABLE = 'Until then the peers it lists can neither message this identity (their messages wait on the relay) nor be messaged by petname.';

/** The one stderr line of a command that failed on the damage. */
function damageLine(run: { code: number | null; stderr: string }, command: string): string {
  expect(run.code, run.stderr).toBe(1);
  const lines = run.stderr.trimEnd().split('\n');
  expect(lines, run.stderr).toHaveLength(1);
  expect(lines[0]!.startsWith(`interlink-mcp ${command}: ${alice.peersFile} is damaged: `), lines[0]).toBe(true);
  expect(lines[0]).toContain('The file was left as it is; fix it in place.');
  expect(lines[0]).toContain(UNAVAILABLE);
  return lines[0]!;
}

describe('read-only commands and a damaged peers.json', () => {
  for (const [label, content, problem] of [
    ['truncated', () => TRUNCATED, 'line 2: the JSON stops in the middle (cut short?)'],
    ['hand-edited as {"bob": "<key>"}', () => HAND_EDIT(newKey()), HAND_EDIT_PROBLEM],
  ] as const) {
    it(`leave it byte for byte (${label}), say what is wrong, and exit 1`, async () => {
      const text = content();
      await writeFile(alice.peersFile, text);
      const files = (await readdir(alice.config)).sort();

      const status = await alice.cli(['status']);
      expect(damageLine(status, 'status')).toContain(`is damaged: ${problem}.`);
      // Everything else is still shown.
      expect(status.stdout).toContain(`peers        unreadable: ${alice.peersFile} is damaged (see below)`);
      expect(status.stdout).toMatch(/^identity {5}\S+/);
      expect(status.stdout).toContain('no answer (connection refused)');
      const json = await alice.cli(['status', '--json']);
      damageLine(json, 'status');
      expect(JSON.parse(json.stdout)).toMatchObject({ peers: [], damaged: [{ file: alice.peersFile, problem }] });

      const inbox = await alice.cli(['inbox']);
      expect(damageLine(inbox, 'inbox')).toContain(problem);
      expect(inbox.stdout).toBe('no messages\n');
      damageLine(await alice.cli(['inbox', '--peer', 'bob']), 'inbox');

      for (const [args, command] of [
        [['peers', 'list'], 'peers'],
        [['peers', 'list', '--json'], 'peers'],
        [['pair', 'list'], 'pair'],
      ] as const) {
        const run = await alice.cli([...args]);
        expect(damageLine(run, command)).toContain(problem);
        // With --json the error is also the one JSON document on stdout.
        if ((args as readonly string[]).includes('--json')) expect(JSON.parse(run.stdout)).toMatchObject({ error: { code: 'corrupt' } });
        else expect(run.stdout).toBe('');
      }

      expect(await readFile(alice.peersFile, 'utf8')).toBe(text);
      expect((await readdir(alice.config)).sort()).toEqual(files);
    });
  }
});

describe('writers and a damaged peers.json', () => {
  it('peers add moves it aside, says where in a sentence, and starts a fresh file', async () => {
    const text = HAND_EDIT(newKey());
    await writeFile(alice.peersFile, text);
    const key = newKey();
    const run = await alice.cli(['peers', 'add', 'dave', key]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toBe('added dave\n');
    const aside = (await readdir(alice.config)).filter((name) => name.startsWith('peers.json.corrupt-'));
    expect(aside).toHaveLength(1);
    const movedTo = join(alice.config, aside[0]!);
    expect(await readFile(movedTo, 'utf8')).toBe(text);
    expect(run.stderr).toBe(
      `interlink-mcp peers: ${alice.peersFile} is damaged: ${HAND_EDIT_PROBLEM}. ` +
        `The original was moved to ${movedTo}; fix that copy and move it back, or write the file again. ${UNAVAILABLE}\n`,
    );
    expect(await alice.peers()).toEqual({ dave: { key } });
  });

  it('serve moves it aside at start, logs the sentence, and a send by petname says why it fails', async () => {
    await writeFile(alice.peersFile, TRUNCATED);
    const server = await startPeer({ root, name: 'alice', session: 'a1', relays: `ws://127.0.0.1:${await freePort()}`, env: { INTERLINK_LOG: '' } });
    peers.push(server);
    const aside = (await readdir(alice.config)).filter((name) => name.startsWith('peers.json.corrupt-'));
    expect(aside).toHaveLength(1);
    const corruptLines = () =>
      server
        .stderr()
        .split('\n')
        .filter((line) => line.includes('"store_corrupt"'))
        .map((line) => JSON.parse(line) as { message: string });
    const logged = await eventually(async () => (corruptLines().length > 0 ? corruptLines() : undefined));
    expect(logged).toHaveLength(1);
    expect(logged[0]!.message).toContain(`The original was moved to ${join(alice.config, aside[0]!)}`);
    expect(logged[0]!.message).toContain('line 2: the JSON stops in the middle');
    const failure = await server.fail('send_message', { to: 'bob', text: 'hello' });
    expect(failure.code).toBe('unknown_peer');
    expect(failure.message).toContain('peers.json was damaged and moved aside');
  });
});
