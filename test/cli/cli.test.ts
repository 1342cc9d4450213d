/**
 * The command line as a user meets it: the built binary in a child process, with the
 * config and state roots pointed at a temporary directory. Exit codes: 0 success, 1
 * failure with one line on stderr, 64 usage error.
 */
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, readdir, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { FailedDeliveries } from '../../src/hosts/codex/failed.js';
import { mailboxPath } from '../../src/config/layout.js';
import { relayAnswers } from '../../src/agent/local-relay.js';
import { Mailbox } from '../../src/mailbox/mailbox.js';
import { Outbox } from '../../src/outbox/outbox.js';
import { eventually, MAIN, startPeer } from '../helpers/mcp.js';
import { freePort, startRelay } from '../helpers/spawn-relay.js';
import { expectOneLine, expectOneLineFailure, expectSuccess, mapLimit, runCli, userEnv, type Run } from '../helpers/cli.js';
import { message, newIdentity } from '../helpers/fixtures.js';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { generateSigningKey } from '../../src/identity/ed25519.js';
import { fingerprintOf, loadIdentity } from '../../src/identity/identity.js';

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

/** `interlink-mcp <args>` as the user of this test's roots. */
function cli(args: string[], extraEnv: Record<string, string> = {}): Promise<Run> {
  return runCli(args, userEnv({ root, configDir, stateDir }, extraEnv));
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

  it('replaces the key with --force, keeping the old one as a dated backup (mode 0600) and saying where', async () => {
    expectSuccess(await cli(['keygen']));
    const first = await loadIdentity(keyFile);
    const firstText = await readFile(keyFile, 'utf8');
    const out = z.object({ key: z.string(), fingerprint: z.string(), path: z.string(), backup: z.string() }).strict().parse(JSON.parse(expectSuccess(await cli(['keygen', '--force', '--json']))));
    const second = await loadIdentity(keyFile);
    expect(second.key).not.toBe(first.key);
    expect(out).toEqual({ key: second.key, fingerprint: second.fingerprint, path: keyFile, backup: expect.stringMatching(/id\.key\.\d{8}T\d{6}Z\.bak$/) });
    expect(await readFile(out.backup, 'utf8')).toBe(firstText);
    expect((await stat(out.backup)).mode & 0o777).toBe(0o600);
    expect((await loadIdentity(out.backup)).key).toBe(first.key);

    // A second --force in the same second keeps both backups.
    const again = expectSuccess(await cli(['keygen', '--force']));
    const backups = (await readdir(configDir)).filter((name) => name.endsWith('.bak'));
    expect(backups).toHaveLength(2);
    expect(again).toMatch(/the old key is kept in .*\.bak\n$/);
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
    expectOneLineFailure(await cli(['whoami']));
    const run = await cli(['whoami', '--json']);
    expectOneLine(run, 1);
    expect(JSON.parse(run.stdout)).toMatchObject({ error: { code: 'bad_key' } });
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

  it('exits 1 with one line on a conflict, 64 on a bad key or petname, leaving peers.json as it was', async () => {
    const key = newKey();
    expectSuccess(await cli(['peers', 'add', 'alice', key]));
    const before = await readFile(peersFile, 'utf8');
    const cases: Array<[string[], number]> = [
      [['peers', 'add', 'alice', newKey()], 1],
      [['peers', 'add', 'alice2', key], 1],
      [['peers', 'remove', 'nobody'], 1],
      [['peers', 'remove', 'a/b'], 1],
      [['peers', 'add', '../x', newKey()], 64],
      [['peers', 'add', 'self', newKey()], 64],
      [['peers', 'add', 'carol', 'not-a-key'], 64],
      [['peers', 'add', 'x', 'garbage'], 64],
      [['peers', 'add', 'carol', Buffer.alloc(32).toString('base64url')], 64],
    ];
    const runs = await mapLimit(cases, 4, ([args]) => cli(args));
    for (const [i, [args, code]] of cases.entries()) {
      const err = expectOneLine(runs[i]!, code, args.join(' '));
      expect(runs[i]!.stdout).toBe('');
      expect(err.startsWith('interlink-mcp peers: '), err).toBe(true);
    }
    expect(await readFile(peersFile, 'utf8')).toBe(before);
  });

  it("refuses this identity's own key (exit 1, own_key), as --json too", async () => {
    expectSuccess(await cli(['keygen']));
    const { key } = await loadIdentity(keyFile);
    expect(expectOneLineFailure(await cli(['peers', 'add', 'me', key]))).toContain('"self"');
    const run = await cli(['peers', 'add', 'me', key, '--json']);
    expectOneLine(run, 1);
    expect(JSON.parse(run.stdout)).toEqual({ error: { code: 'own_key', message: expect.stringContaining('own') } });
    await expect(readFile(peersFile, 'utf8')).rejects.toThrow();
  });

  it('refuses to list a damaged peers.json: exit 1, one sentence naming the file, the file left as it is', async () => {
    await mkdir(configDir);
    await writeFile(peersFile, '{ not json');
    const err = expectOneLineFailure(await cli(['peers', 'list']));
    expect(err).toContain(`${peersFile} is damaged: line 1: not valid JSON`);
    expect(err).toContain('left as it is');
    const json = await cli(['peers', 'list', '--json']);
    expect(json.code).toBe(1);
    expect(JSON.parse(json.stdout)).toEqual({ error: { code: 'corrupt', message: expect.stringContaining('left as it is') } });
    expect(await readdir(configDir)).toEqual(['peers.json']);
    expect(await readFile(peersFile, 'utf8')).toBe('{ not json');
  });
});

describe('usage', () => {
  it('prints usage with exit 0 when asked', async () => {
    const cases = [['--help'], ['-h'], ['help']];
    const runs = await mapLimit(cases, 4, (args) => cli(args));
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
    const runs = await mapLimit(cases, 4, ([args]) => cli(args));
    for (const [i, [args, usage]] of cases.entries()) {
      const run = runs[i]!;
      expect(run.code, args.join(' ')).toBe(0);
      expect(run.stdout.startsWith(usage), args.join(' ')).toBe(true);
    }
    await expect(readdir(root)).resolves.toEqual([]);
  });

  it('exits 64 on an unknown command, naming it in one line', async () => {
    const run = await cli(['frobnicate']);
    expect(expectOneLine(run, 64)).toContain('frobnicate');
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
    const runs = await mapLimit(cases, 4, (args) => cli(args));
    for (const [i, args] of cases.entries()) {
      const run = runs[i]!;
      expectOneLine(run, 64, args.join(' '));
      expect(run.stdout, args.join(' ')).toBe('');
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

describe('inbox --session', () => {
  it('names a session this identity never had (exit 1, unknown_session), and lists nothing for one it had', async () => {
    expectSuccess(await cli(['keygen']));
    const me = await loadIdentity(keyFile);
    // Session "asker" has sent a message and received none.
    const outbox = await Outbox.open(join(stateDir, 'outbox', me.key, 'asker.json'));
    await outbox.add(message(me, newIdentity(12), { text: 'a question' }), `${newIdentity(12).key}#b1`);
    await outbox.close();

    for (const view of [[], ['--unread'], ['--sent'], ['--rejected']]) {
      const args = ['inbox', '--session', 'nosuch', ...view];
      const run = await cli(args);
      expect(expectOneLineFailure(run)).toBe('interlink-mcp inbox: this identity has had no session "nosuch" on this machine (`interlink-mcp status --all` lists its sessions)\n');
      const json = await cli([...args, '--json']);
      expect(json.code, args.join(' ')).toBe(1);
      expect(JSON.parse(json.stdout)).toEqual({ error: { code: 'unknown_session', message: expect.stringContaining('"nosuch"') } });
    }
    expect(expectSuccess(await cli(['inbox', '--session', 'asker']))).toBe('no messages\n');
    expect(JSON.parse(expectSuccess(await cli(['inbox', '--session', 'asker', '--json'])))).toEqual({ messages: [] });
    expect(expectSuccess(await cli(['inbox', '--session', 'asker', '--sent']))).toContain('a question');
  });
});

describe('exit codes', () => {
  // Every command's usage errors: exit 64, one line on stderr naming the command, nothing
  // on stdout, nothing created. With --json the same error is also a JSON document on stdout.
  const usageErrors: string[][] = [
    ['frobnicate'],
    ['serve', '--bogus'],
    ['serve', 'extra'],
    ['keygen', 'extra'],
    ['whoami', '--bogus'],
    ['peers'],
    ['peers', 'frob'],
    ['peers', 'add', 'x', 'garbage'],
    ['pair'],
    ['pair', 'frob'],
    ['pair', 'request'],
    ['pair', 'accept'],
    ['pair', 'list', 'extra'],
    ['status', 'extra'],
    ['status', '--bogus'],
    ['inbox', 'extra'],
    ['inbox', '--unread', '--sent'],
    ['relay', 'extra'],
    ['relay', '--addr', 'nonsense'],
    ['relay', '--addr', '127.0.0.1:99999'],
    ['relay', 'stop', 'extra'],
    ['demo', 'extra'],
    ['failed-deliveries'],
    ['failed-deliveries', 'frob'],
    ['failed-deliveries', 'read'],
    ['wait', '--renew-after-secs', '0'],
    ['wait', '--renew-after-secs', 'soon'],
    ['wait', 'extra'],
    ['wait', '--session', '../x'],
  ];

  it('usage errors of every command exit 64 with one line on stderr', async () => {
    const runs = await mapLimit(usageErrors, 4, (args) => cli(args));
    for (const [i, args] of usageErrors.entries()) {
      const line = expectOneLine(runs[i]!, 64, args.join(' '));
      expect(runs[i]!.stdout, args.join(' ')).toBe('');
      expect(line.startsWith(args[0] === 'frobnicate' ? 'interlink-mcp: ' : `interlink-mcp ${args[0]}: `), line).toBe(true);
    }
    await expect(readdir(root)).resolves.toEqual([]);
  }, 300_000);

  it('with --json, a failure is also {"error": {code, message}} on stdout', async () => {
    const cases: Array<[string[], number, string]> = [
      [['whoami', '--json'], 1, 'key_missing'],
      [['inbox', '--json'], 1, 'key_missing'],
      [['peers', 'add', 'x', 'garbage', '--json'], 64, 'usage'],
      [['status', 'extra', '--json'], 64, 'usage'],
      [['pair', 'frob', '--json'], 64, 'usage'],
    ];
    const runs = await mapLimit(cases, 4, ([args]) => cli(args));
    for (const [i, [args, code, errorCode]] of cases.entries()) {
      const line = expectOneLine(runs[i]!, code, args.join(' '));
      const printed = z.object({ error: z.object({ code: z.string(), message: z.string() }).strict() }).strict().parse(JSON.parse(runs[i]!.stdout));
      expect(printed.error.code, args.join(' ')).toBe(errorCode);
      expect(line).toBe(`interlink-mcp ${args[0]}: ${printed.error.message}\n`);
    }
  });

  it('with --json, an unknown command is also {"error": {code: "usage", message}} on stdout (exit 64)', async () => {
    for (const args of [['frobnicate', '--json'], ['--json']]) {
      const run = await cli(args);
      const line = expectOneLine(run, 64, args.join(' '));
      const printed = z.object({ error: z.object({ code: z.literal('usage'), message: z.string() }).strict() }).strict().parse(JSON.parse(run.stdout));
      expect(printed.error.message).toBe(`unknown command ${JSON.stringify(args[0])} (see interlink-mcp --help)`);
      expect(line).toBe(`interlink-mcp: ${printed.error.message}\n`);
    }
    await expect(readdir(root)).resolves.toEqual([]);
  });

  it('errors name commands, not MCP tools', async () => {
    expectSuccess(await cli(['keygen']));
    const run = await cli(['inbox', '--peer', 'nobody']);
    const line = expectOneLineFailure(run);
    expect(line).toContain('interlink-mcp peers list');
    expect(line).not.toContain('list_peers');
  });
});

describe('bare interlink-mcp', () => {
  it('on a terminal prints the help and exits 0, creating no identity and starting no relay', async () => {
    const port = await freePort();
    const env = userEnv({ root, configDir, stateDir }, { INTERLINK_LOCAL_RELAY: `127.0.0.1:${port}` });
    // `script` gives the command a pseudo-terminal as stdin (util-linux: -e passes its exit
    // status on; BSD script on macOS takes the command after the log file).
    const args = process.platform === 'darwin' ? ['-q', '/dev/null', process.execPath, MAIN] : ['-qec', `"${process.execPath}" "${MAIN}"`, '/dev/null'];
    const run = await new Promise<Run>((resolve, reject) => {
      const child = spawn('script', args, { stdio: ['ignore', 'pipe', 'pipe'], env });
      let stdout = '';
      child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
      child.once('error', reject);
      child.once('close', (code) => resolve({ code, stdout, stderr: '' }));
    });
    expect(run.code, run.stdout).toBe(0);
    expect(run.stdout).toContain('usage: interlink-mcp');
    expect(run.stdout).toContain('on a terminal this help is printed');
    await expect(readdir(root)).resolves.toEqual([]);
    expect(await relayAnswers(`ws://127.0.0.1:${port}`, 500)).toBe(false);
  });

  it('with stdin not a terminal (a host spawning it) is the MCP server', async () => {
    const peer = await startPeer({ root, name: 'host', session: 's1', relays: 'ws://127.0.0.1:9', args: [] });
    try {
      expect(await peer.call('get_my_session_id')).toMatchObject({ session_id: 's1' });
    } finally {
      await peer.close();
    }
  });
});

describe('relay', () => {
  it('on a busy port prints one line and exits 1, leaving the running relay and its pid file alone', async () => {
    const db = join(root, 'db');
    const running = await startRelay({ db });
    try {
      const pidFile = await readFile(join(db, 'relay.pid'), 'utf8');
      for (const args of [['relay', '--addr', `127.0.0.1:${running.port}`], ['relay', '--addr', `127.0.0.1:${running.port}`, '--db', db]]) {
        expect(expectOneLineFailure(await cli(args))).toContain('address in use');
      }
      expect(await readFile(join(db, 'relay.pid'), 'utf8')).toBe(pidFile);
      expect(await relayAnswers(running.url)).toBe(true);
    } finally {
      await running.child.kill('SIGTERM');
    }
    await expect(readFile(join(db, 'relay.pid'))).rejects.toThrow();
  });

  it("serve's zero-config relay shows in status and stops with `relay stop`; serve starts it again", async () => {
    const port = await freePort();
    const local = { INTERLINK_URL: '', INTERLINK_LOCAL_RELAY: `127.0.0.1:${port}` };
    const localSchema = z.object({ local_relay: z.object({ running: z.boolean(), pid: z.number().optional(), url: z.string().optional(), db: z.string() }).strict() }).loose();
    const host = { root, configDir: join(root, 'host', 'config'), stateDir: join(root, 'host', 'state') };
    const asHost = (args: string[]) => runCli(args, userEnv(host, local));
    const startServe = () => startPeer({ root, name: 'host', session: 's1', relays: '', env: local });
    const peer = await startServe();
    let pid: number | undefined;
    try {
      await peer.call('get_my_session_id');
      const shown = localSchema.parse(JSON.parse(expectSuccess(await asHost(['status', '--json']))));
      expect(shown.local_relay).toEqual({ running: true, pid: expect.any(Number), url: `ws://127.0.0.1:${port}`, db: join(host.stateDir, 'relay') });
      pid = shown.local_relay.pid;
      expect(expectSuccess(await asHost(['status']))).toMatch(new RegExp(`^local relay  running, pid ${pid}, ws://127\\.0\\.0\\.1:${port}, store .*interlink-mcp relay stop`, 'm'));
      await peer.close();

      expect(expectSuccess(await asHost(['relay', 'stop']))).toContain(`stopped the relay on ws://127.0.0.1:${port} (pid ${pid})`);
      expect(() => process.kill(pid!, 0)).toThrow();
      expect(await relayAnswers(`ws://127.0.0.1:${port}`, 500)).toBe(false);
      expect(localSchema.parse(JSON.parse(expectSuccess(await asHost(['status', '--json'])))).local_relay).toEqual({ running: false, db: join(host.stateDir, 'relay') });
      expect(JSON.parse(expectSuccess(await asHost(['relay', 'stop', '--json'])))).toEqual({ stopped: false, db: join(host.stateDir, 'relay') });

      const again = await startServe();
      try {
        await again.call('get_my_session_id');
        pid = localSchema.parse(JSON.parse(expectSuccess(await asHost(['status', '--json'])))).local_relay.pid;
        expect(pid).toEqual(expect.any(Number));
      } finally {
        await again.close();
      }
      expectSuccess(await asHost(['relay', 'stop']));
      pid = undefined;
    } finally {
      await peer.close();
      // The relay is detached, not our child: never leave it running after a failure.
      if (pid !== undefined) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    }
  });
});

describe('the zero-config relay started by pair', () => {
  it('`pair list` with no INTERLINK_URL starts it in the background, where it outlives the command until `relay stop`', async () => {
    const port = await freePort();
    const local = { INTERLINK_URL: '', INTERLINK_LOCAL_RELAY: `127.0.0.1:${port}` };
    const url = `ws://127.0.0.1:${port}`;
    expect(await relayAnswers(url, 500)).toBe(false);
    expect(expectSuccess(await cli(['pair', 'list'], local))).toContain('No incoming pairing requests.');
    // pair list has exited; the relay it started has not.
    const shown = z.object({ local_relay: z.object({ running: z.boolean(), pid: z.number() }).loose() }).loose().parse(JSON.parse(expectSuccess(await cli(['status', '--json'], local))));
    expect(shown.local_relay.running).toBe(true);
    expect(await relayAnswers(url, 500)).toBe(true);
    expect(expectSuccess(await cli(['relay', 'stop'], local))).toContain(`stopped the relay on ${url} (pid ${shown.local_relay.pid})`);
    expect(await relayAnswers(url, 500)).toBe(false);
  });
});

describe('relay --max-age', () => {
  it('refuses a duration shorter than receivers accept mail, or not a duration, in one line (exit 64)', async () => {
    for (const [value, says] of [['1d', 'shorter than receivers accept messages'], ['7d', 'shorter than receivers accept messages'], ['a week', 'is not a duration']] as const) {
      expect(expectOneLine(await cli(['relay', '--addr', '127.0.0.1:0', '--max-age', value]), 64)).toContain(says);
    }
  });
});

describe('the zero-config relay while sessions run', () => {
  it("is started again by a running serve when it is killed; a person's stop leaves the marker that tells sessions not to", async () => {
    const port = await freePort();
    const local = { INTERLINK_URL: '', INTERLINK_LOCAL_RELAY: `127.0.0.1:${port}` };
    const localSchema = z.object({ local_relay: z.object({ running: z.boolean(), pid: z.number().optional() }).loose() }).loose();
    const host = { root, configDir: join(root, 'host', 'config'), stateDir: join(root, 'host', 'state') };
    const asHost = (args: string[]) => runCli(args, userEnv(host, local));
    const relayPid = async () => localSchema.parse(JSON.parse(expectSuccess(await asHost(['status', '--json'])))).local_relay.pid;
    const peer = await startPeer({ root, name: 'host', session: 's1', relays: '', env: local });
    const pids: number[] = [];
    try {
      await peer.call('get_my_session_id');
      pids.push((await relayPid())!);
      process.kill(pids[0]!, 'SIGKILL');
      // The session finds it gone and starts it again; the store under the state root is the same.
      pids.push(await eventually(async () => {
        const pid = await relayPid();
        return pid !== undefined && pid !== pids[0] && (await relayAnswers(`ws://127.0.0.1:${port}`, 500)) ? pid : undefined;
      }, 30_000, 'the relay started again'));
      expect(peer.stderr()).toContain('local_relay_restarting');
      // A person's stop leaves a marker that running sessions respect; a new serve clears it.
      expectSuccess(await asHost(['relay', 'stop']));
      await expect(readFile(join(host.stateDir, 'relay', 'stopped'), 'utf8')).resolves.toMatch(/^stopped by a person at /);
    } finally {
      await peer.close();
      // The relay is detached, not our child: never leave it running.
      for (const pid of pids) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    }
  });
});

describe('status sessions', () => {
  it('counts sessions with nothing waiting and no activity for 3 days instead of listing them; --all lists them', async () => {
    expectSuccess(await cli(['keygen']));
    const me = await loadIdentity(keyFile);
    const sender = newIdentity(9);
    const old = Date.now() - 4 * 24 * 60 * 60 * 1000;
    for (const [session, unread] of [['recent', false], ['gone', false], ['gone-unread', true]] as const) {
      const mailbox = await Mailbox.open(mailboxPath(stateDir, me.key, session));
      const stored = message(sender, me, { text: session });
      await mailbox.store(stored);
      if (!unread) await mailbox.acknowledge([{ sender: sender.key, msg_id: stored.msg_id }]);
      await mailbox.close();
      if (session !== 'recent') {
        for (const name of await readdir(join(stateDir, 'mailbox', me.key))) {
          if (name.startsWith(`${session}.`)) await utimes(join(stateDir, 'mailbox', me.key, name), old / 1000, old / 1000);
        }
      }
    }
    const offline = { INTERLINK_URL: 'ws://127.0.0.1:9' };
    const data = z.object({ sessions: z.array(z.object({ session: z.string() }).loose()), quiet_sessions: z.number() }).loose().parse(JSON.parse(expectSuccess(await cli(['status', '--json'], offline))));
    expect(data.sessions.map((s) => s.session)).toEqual(['gone-unread', 'recent']);
    expect(data.quiet_sessions).toBe(1);
    expect(expectSuccess(await cli(['status'], offline))).toContain('and 1 more with nothing waiting and no activity for 3 days (interlink-mcp status --all)');
    const all = z.object({ sessions: z.array(z.object({ session: z.string() }).loose()), quiet_sessions: z.number() }).loose().parse(JSON.parse(expectSuccess(await cli(['status', '--all', '--json'], offline))));
    expect(all.sessions.map((s) => s.session)).toEqual(['gone', 'gone-unread', 'recent']);
  });
});

describe('inbox filters', () => {
  it('--unread shows only unacknowledged messages; --sent shows what this identity sent, from the outbox', async () => {
    expectSuccess(await cli(['keygen']));
    const me = await loadIdentity(keyFile);
    const bob = newIdentity(11);
    expectSuccess(await cli(['peers', 'add', 'bob', bob.key]));
    const mailbox = await Mailbox.open(mailboxPath(stateDir, me.key, 'main'));
    const read = message(bob, me, { text: 'already read' });
    const unread = message(bob, me, { text: 'not read yet' });
    await mailbox.store(read);
    await mailbox.store(unread);
    await mailbox.acknowledge([{ sender: bob.key, msg_id: read.msg_id }]);
    await mailbox.close();
    const outbox = await Outbox.open(join(stateDir, 'outbox', me.key, 'main.json'));
    const sent = message(me, bob, { text: 'my question' });
    await outbox.add(sent, `${bob.key}#b1`);
    await outbox.close();

    const rows = async (args: string[]) => JSON.parse(expectSuccess(await cli(['inbox', ...args, '--json']))) as Record<string, { text: string }[]>;
    expect((await rows([])).messages!.map((m) => m.text).sort()).toEqual(['already read', 'not read yet']);
    expect((await rows(['--unread'])).messages!.map((m) => m.text)).toEqual(['not read yet']);
    expect((await rows(['--sent'])).sent).toEqual([
      expect.objectContaining({ session: 'main', to: 'bob', recipient: bob.key, to_session: 'b1', msg_id: sent.msg_id, state: 'pending', text: 'my question' }),
    ]);
    expect((await rows(['--sent', '--peer', 'self'])).sent).toEqual([]);
    expect(expectSuccess(await cli(['inbox', '--sent']))).toMatch(/ main {2}to bob#b1 {2}pending {2}[0-9a-f]{32}\n {4}my question\n$/);
    expect(expectSuccess(await cli(['inbox', '--unread', '--peer', 'bob']))).toContain('not read yet');
  });
});
