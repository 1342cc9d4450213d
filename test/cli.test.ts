/**
 * The command line as a user meets it: the built binary in a child process, with the
 * config and state roots pointed at a temporary directory. Exit codes: 0 success, 1
 * failure with one line on stderr, 64 usage error.
 */
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { FailedDeliveries } from '../src/codex/failed.js';
import { mailboxPath } from '../src/config/paths.js';
import { Mailbox } from '../src/mailbox/mailbox.js';
import { message, newIdentity } from './helpers/fixtures.js';
import { encodeBase64url } from '../src/identity/base64url.js';
import { generateSigningKey } from '../src/identity/ed25519.js';
import { fingerprintOf, loadIdentity } from '../src/identity/identity.js';

const MAIN = fileURLToPath(new URL('../dist/src/cli/main.js', import.meta.url));
const FINGERPRINT = /^[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}$/;

let root: string;
let configDir: string;
let stateDir: string;
let keyFile: string;
let peersFile: string;

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-cli-'));
  configDir = join(root, 'config');
  stateDir = join(root, 'state');
  keyFile = join(configDir, 'id.key');
  peersFile = join(configDir, 'peers.json');
});

afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The environment of a user with nothing configured except our two roots. */
function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!name.startsWith('INTERLINK_') && !name.startsWith('XDG_')) env[name] = value;
  }
  return { ...env, HOME: root, INTERLINK_CONFIG_DIR: configDir, INTERLINK_STATE_DIR: stateDir, ...extra };
}

function cli(args: string[], extraEnv: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [MAIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: cleanEnv(extraEnv) });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** A failure: exit 1, nothing on stdout, exactly one line on stderr. */
function expectOneLineFailure(run: Run): string {
  expect(run.code, run.stderr).toBe(1);
  expect(run.stdout).toBe('');
  expect(run.stderr.endsWith('\n')).toBe(true);
  expect(run.stderr.trimEnd().split('\n'), run.stderr).toHaveLength(1);
  return run.stderr;
}

function expectSuccess(run: Run): string {
  expect(run.code, run.stderr).toBe(0);
  expect(run.stderr).toBe('');
  return run.stdout;
}

const newKey = (): string => encodeBase64url(generateSigningKey().publicKey);

/** A real key whose base64url text starts with `prefix` ("-": one key in 64; "--": one in 4,096). */
function keyStartingWith(prefix: string): string {
  for (;;) {
    const key = newKey();
    if (key.startsWith(prefix) && !key.startsWith(prefix + '-')) return key;
  }
}

describe('keygen', () => {
  it('creates the key under the config root, mode 0600, and prints it', async () => {
    const out = expectSuccess(await cli(['keygen']));
    const identity = await loadIdentity(keyFile);
    expect(out).toContain(identity.key);
    expect(out).toContain(identity.fingerprint);
    expect(out).toContain(keyFile);
    expect((await stat(keyFile)).mode & 0o777).toBe(0o600);
  });

  it('refuses a second keygen with exit 1 and one line, and the key is untouched', async () => {
    expectSuccess(await cli(['keygen']));
    const before = await readFile(keyFile, 'utf8');
    const err = expectOneLineFailure(await cli(['keygen']));
    expect(err).toContain('--force');
    expect(await readFile(keyFile, 'utf8')).toBe(before);
  });

  it('replaces the key with --force', async () => {
    expectSuccess(await cli(['keygen']));
    const first = await loadIdentity(keyFile);
    const out = JSON.parse(expectSuccess(await cli(['keygen', '--force', '--json']))) as Record<string, unknown>;
    const second = await loadIdentity(keyFile);
    expect(second.key).not.toBe(first.key);
    expect(out).toEqual({ key: second.key, fingerprint: second.fingerprint, path: keyFile });
  });

  it('writes where INTERLINK_KEY points', async () => {
    const elsewhere = join(root, 'keys', 'mine.key');
    expectSuccess(await cli(['keygen'], { INTERLINK_KEY: elsewhere }));
    const identity = await loadIdentity(elsewhere);
    const shown = JSON.parse(expectSuccess(await cli(['whoami', '--json'], { INTERLINK_KEY: elsewhere }))) as unknown;
    expect(shown).toEqual({ key: identity.key, fingerprint: identity.fingerprint });
    await expect(readdir(root)).resolves.toEqual(['keys']);
  });
});

describe('whoami', () => {
  it('--json prints exactly the key and fingerprint of the key file', async () => {
    expectSuccess(await cli(['keygen']));
    const identity = await loadIdentity(keyFile);
    const shown = JSON.parse(expectSuccess(await cli(['whoami', '--json']))) as Record<string, unknown>;
    expect(shown).toStrictEqual({ key: identity.key, fingerprint: identity.fingerprint });
    expect(shown.fingerprint).toMatch(FINGERPRINT);
  });

  it('prints the key and fingerprint for people', async () => {
    expectSuccess(await cli(['keygen']));
    const identity = await loadIdentity(keyFile);
    const out = expectSuccess(await cli(['whoami']));
    expect(out).toContain(identity.key);
    expect(out).toContain(identity.fingerprint);
  });

  it('without a key exits 1 with a hint to run keygen, creating nothing', async () => {
    const err = expectOneLineFailure(await cli(['whoami']));
    expect(err).toContain('keygen');
    await expect(readdir(root)).resolves.toEqual([]);
  });

  it('with a damaged key exits 1 with one line and leaves the file', async () => {
    await cli(['keygen']);
    await writeFile(keyFile, 'damaged\n', { mode: 0o600 });
    expectOneLineFailure(await cli(['whoami', '--json']));
    expect(await readFile(keyFile, 'utf8')).toBe('damaged\n');
  });
});

describe('peers', () => {
  it('adds, lists and removes, for people', async () => {
    const key = newKey();
    expect(expectSuccess(await cli(['peers', 'list']))).toContain('no peers yet');
    expect(expectSuccess(await cli(['peers', 'add', 'alice', key]))).toBe('added alice\n');
    expect(expectSuccess(await cli(['peers', 'add', 'alice', key]))).toContain('nothing changed');
    const listed = expectSuccess(await cli(['peers', 'list']));
    expect(listed).toContain('alice');
    expect(listed).toContain(key);
    expect(listed).toContain(fingerprintOf(Buffer.from(key, 'base64url')));
    expect(JSON.parse(await readFile(peersFile, 'utf8'))).toEqual({ alice: { key } });
    expect(expectSuccess(await cli(['peers', 'remove', 'alice']))).toBe('removed alice\n');
    expect(expectSuccess(await cli(['peers', 'list']))).toContain('no peers yet');
    expect(JSON.parse(await readFile(peersFile, 'utf8'))).toEqual({});
  });

  it('adds, lists and removes, as JSON', async () => {
    const [bob, alice] = [newKey(), newKey()];
    expect(JSON.parse(expectSuccess(await cli(['peers', 'add', 'bob', bob, '--json'])))).toEqual({ petname: 'bob', key: bob, outcome: 'added' });
    expect(JSON.parse(expectSuccess(await cli(['peers', 'add', '--json', 'alice', alice])))).toEqual({ petname: 'alice', key: alice, outcome: 'added' });
    expect(JSON.parse(expectSuccess(await cli(['peers', 'add', 'bob', bob, '--json'])))).toEqual({ petname: 'bob', key: bob, outcome: 'unchanged' });
    expect(JSON.parse(expectSuccess(await cli(['peers', 'list', '--json'])))).toEqual({
      peers: [
        { petname: 'alice', key: alice, fingerprint: fingerprintOf(Buffer.from(alice, 'base64url')) },
        { petname: 'bob', key: bob, fingerprint: fingerprintOf(Buffer.from(bob, 'base64url')) },
      ],
    });
    expect(JSON.parse(expectSuccess(await cli(['peers', 'remove', 'bob', '--json'])))).toEqual({ petname: 'bob', key: bob, outcome: 'removed' });
    expect(JSON.parse(expectSuccess(await cli(['peers', 'list', '--json'])))).toEqual({
      peers: [{ petname: 'alice', key: alice, fingerprint: fingerprintOf(Buffer.from(alice, 'base64url')) }],
    });
  });

  it('edits the file INTERLINK_PEERS names', async () => {
    const elsewhere = join(root, 'shared', 'peers.json');
    const key = newKey();
    expectSuccess(await cli(['peers', 'add', 'alice', key], { INTERLINK_PEERS: elsewhere }));
    expect(JSON.parse(await readFile(elsewhere, 'utf8'))).toEqual({ alice: { key } });
    await expect(readdir(root)).resolves.toEqual(['shared']);
  });

  it('takes a key that starts with "-" or "--", as it is or after --', async () => {
    const key = keyStartingWith('-');
    expectSuccess(await cli(['peers', 'add', 'alice', key]));
    const doubled = keyStartingWith('--');
    expectSuccess(await cli(['peers', 'add', 'carol', doubled]));
    const other = keyStartingWith('-');
    expectSuccess(await cli(['peers', 'add', 'bob', '--', other]));
    expect(JSON.parse(await readFile(peersFile, 'utf8'))).toEqual({ alice: { key }, carol: { key: doubled }, bob: { key: other } });
  });

  it('exits 1 with one line on a conflict or a bad value, leaving peers.json as it was', async () => {
    const key = newKey();
    expectSuccess(await cli(['peers', 'add', 'alice', key]));
    const before = await readFile(peersFile, 'utf8');
    const failures: string[][] = [
      ['peers', 'add', 'alice', newKey()],
      ['peers', 'add', 'alice2', key],
      ['peers', 'remove', 'nobody'],
      ['peers', 'add', '../x', newKey()],
      ['peers', 'add', 'self', newKey()],
      ['peers', 'add', 'carol', 'not-a-key'],
      ['peers', 'add', 'carol', Buffer.alloc(32).toString('base64url')],
      ['peers', 'remove', 'a/b'],
    ];
    const runs = await Promise.all(failures.map((args) => cli(args)));
    for (const run of runs) {
      const err = expectOneLineFailure(run);
      expect(err.startsWith('interlink-mcp peers: '), err).toBe(true);
    }
    expect(await readFile(peersFile, 'utf8')).toBe(before);
  });

  it('refuses to list a damaged peers.json: exit 1, one sentence naming the file, the file left as it is', async () => {
    await mkdir(configDir);
    await writeFile(peersFile, '{ not json');
    const err = expectOneLineFailure(await cli(['peers', 'list', '--json']));
    expect(err).toContain(`${peersFile} is damaged: line 1: not valid JSON`);
    expect(err).toContain('left as it is');
    expect(await readdir(configDir)).toEqual(['peers.json']);
    expect(await readFile(peersFile, 'utf8')).toBe('{ not json');
  });
});

describe('usage', () => {
  it('prints usage with exit 0 when asked', async () => {
    const cases = [['--help'], ['-h'], ['help']];
    const runs = await Promise.all(cases.map((args) => cli(args)));
    for (const [i, args] of cases.entries()) {
      const run = runs[i]!;
      expect(run.code, args.join(' ')).toBe(0);
      expect(run.stdout).toContain('usage: interlink-mcp');
      for (const command of ['keygen', 'whoami', 'peers']) expect(run.stdout).toContain(command);
    }
  });

  it('every command takes --help, exits 0, prints its usage and does nothing else', async () => {
    const cases: Array<[string[], string]> = [
      [['keygen', '--help'], 'usage: interlink-mcp keygen'],
      [['keygen', '--force', '-h'], 'usage: interlink-mcp keygen'],
      [['whoami', '--help'], 'usage: interlink-mcp whoami'],
      [['peers', '--help'], 'usage: interlink-mcp peers'],
      [['peers', 'add', '--help'], 'usage: interlink-mcp peers'],
      [['peers', 'remove', 'alice', '--help'], 'usage: interlink-mcp peers'],
      [['demo', '--help'], 'usage: interlink-mcp demo'],
    ];
    const runs = await Promise.all(cases.map(([args]) => cli(args)));
    for (const [i, [args, usage]] of cases.entries()) {
      const run = runs[i]!;
      expect(run.code, args.join(' ')).toBe(0);
      expect(run.stdout.startsWith(usage), args.join(' ')).toBe(true);
    }
    await expect(readdir(root)).resolves.toEqual([]);
  });

  it('exits 64 on an unknown command, naming it', async () => {
    const run = await cli(['frobnicate']);
    expect(run.code).toBe(64);
    expect(run.stderr).toContain('frobnicate');
  });

  it('exits 64 on bad options and wrong arguments', async () => {
    const cases: string[][] = [
      ['keygen', '--bogus'],
      ['keygen', '--force=yes'],
      ['whoami', '--bogus'],
      ['whoami', 'extra'],
      ['keygen', 'extra'],
      ['keygen', '-x'],
      ['demo', 'extra'],
      ['peers'],
      ['peers', 'frob'],
      ['peers', 'list', 'extra'],
      ['peers', 'list', '--bogus'],
      ['peers', 'add', 'alice'],
      ['peers', 'add', 'alice', newKey(), 'extra'],
      ['peers', 'remove'],
      ['peers', 'remove', 'a', 'b'],
    ];
    const runs = await Promise.all(cases.map((args) => cli(args)));
    for (const [i, args] of cases.entries()) {
      const run = runs[i]!;
      expect(run.code, `${args.join(' ')}: ${run.stderr}`).toBe(64);
      expect(run.stdout, args.join(' ')).toBe('');
      expect(run.stderr.length, args.join(' ')).toBeGreaterThan(0);
    }
    await expect(readdir(root)).resolves.toEqual([]);
  });
});

describe('status', () => {
  const THREAD = '01a227a4-1fcd-7663-ade6-117faef1cb4e';
  // Nothing listens on port 9 of the loopback: the relay is reported as not answering.
  const offline = { INTERLINK_URL: 'ws://127.0.0.1:9' };

  const statusSchema = z.object({
    identity: z.object({ key: z.string(), fingerprint: z.string() }).nullable(),
    relays: z.array(z.object({ url: z.string(), answers: z.boolean() })),
    sessions: z.array(z.object({ session: z.string(), unread: z.number(), failed_deliveries: z.union([z.number(), z.literal('unreadable')]) }).loose()),
  }).loose();

  it('says there is no identity yet, and which relays do not answer', async () => {
    const data = statusSchema.parse(JSON.parse(expectSuccess(await cli(['status', '--json'], offline))));
    expect(data).toMatchObject({ identity: null, relays: [{ url: 'ws://127.0.0.1:9', answers: false }], sessions: [] });
  });

  it('counts the saved Codex notice failures of each session, and reads a damaged file without moving it', async () => {
    expectSuccess(await cli(['keygen']));
    const { key } = await loadIdentity(keyFile);
    const failed = FailedDeliveries.forSession(stateDir, key, THREAD);
    await failed.save({ kind: 'notice', notification_id: 'n-1', thread: THREAD, message: 'notice', outcome: 'delivery_unknown', reason: 'timed out', attempts: 1 });

    const data = statusSchema.parse(JSON.parse(expectSuccess(await cli(['status', '--json'], offline))));
    expect(data.sessions).toEqual([expect.objectContaining({ session: THREAD, unread: 0, failed_deliveries: 1 })]);
    expect(expectSuccess(await cli(['status'], offline))).toContain('failed Codex notices: 1');

    await writeFile(failed.path, '{ not json');
    const run = await cli(['status', '--json'], offline);
    const damaged = statusSchema.parse(JSON.parse(run.stdout));
    expect(damaged.sessions).toEqual([expect.objectContaining({ session: THREAD, failed_deliveries: 'unreadable' })]);
    // Exit 1 with the sentence: which file, what is wrong, that it was left, what is unavailable.
    expect(run.code).toBe(1);
    expect(run.stderr).toBe(
      `interlink-mcp status: ${failed.path} is damaged: line 1: not valid JSON (expected property name or '}'). ` +
        'The file was left as it is; fix it in place. Until then the Codex notices it saved cannot be listed or retried (the messages themselves stay unread in the mailbox).\n',
    );
    // A view repairs nothing: the damaged file is still where it was.
    expect(await readFile(failed.path, 'utf8')).toBe('{ not json');
  });
});

describe('inbox', () => {
  it('finds a mailbox that has only its journal so far', async () => {
    expectSuccess(await cli(['keygen']));
    const me = await loadIdentity(keyFile);
    const sender = newIdentity(7);
    const mailbox = await Mailbox.open(mailboxPath(stateDir, me.key, 'fresh'));
    try {
      await mailbox.store(message(sender, me, { text: 'only in the journal' }));
    } finally {
      await mailbox.close();
    }
    expect(await readdir(join(stateDir, 'mailbox', me.key))).not.toContain('fresh.json');
    const out = JSON.parse(expectSuccess(await cli(['inbox', '--json']))) as { messages: { session: string; text: string }[] };
    expect(out.messages).toEqual([expect.objectContaining({ session: 'fresh', text: 'only in the journal' })]);
  });
});
