/**
 * Seeded fuzzing of every command-line flag and variable that names a file or a file
 * name (issue 16, hostile input):
 *
 * - files a person points at — `relay --key`, `--tls-cert`/`--tls-key`, `INTERLINK_KEY`,
 *   `INTERLINK_PEERS`, `INTERLINK_TLS_CA` — hold hostile bytes (a valid file cut short, a
 *   bit flipped, a member edited, random bytes, nesting, nothing): the code each one is
 *   read with returns a result or throws a typed InterlinkError;
 * - names that become paths under the state root — `--session` / `INTERLINK_SESSION`
 *   (mailbox, outbox, inbox files) and petnames — are path-like, bidi, control, huge: each
 *   is refused as `bad_name`, or every path made from it stays inside its folder;
 * - a share of the cases run the real CLI as a person types it (`whoami`, `peers list`,
 *   `status`, `wait --session`, `relay --key`/`--tls-*`): the command exits with a
 *   sentence on stderr, never a stack trace, and writes nothing outside its roots.
 *
 * FUZZ_RUNS in-process cases per flag (default 300; `npm run fuzz` runs 100,000) and
 * a 500th of them as processes (at least 12 per command).
 */
import fc from 'fast-check';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve, sep } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inboxPaths, mailboxPath, outboxPath, pairingPath } from '../../src/config/layout.js';
import { checkSafeName } from '../../src/config/paths.js';
import { InterlinkError } from '../../src/errors.js';
import { createIdentity, loadIdentity } from '../../src/identity/identity.js';
import { setLogLevel } from '../../src/log.js';
import { addPeer, loadPeers, readPeers } from '../../src/peers/peers.js';
import { loadOrCreateRelayKey } from '../../src/relay/relay-key.js';
import { readClientTls, readServerTls } from '../../src/wire/tls.js';
import { spawn } from 'node:child_process';
import { MAIN } from '../helpers/mcp.js';
import { newIdentity } from '../helpers/fixtures.js';
import { fuzzLabel, fuzzParameters, fuzzRuns, fuzzShare, fuzzTimeout, hostileBytes, hostileString, PATH_LIKE } from '../helpers/fuzz.js';
import { reapAll } from '../helpers/process.js';
import { hasOpenssl, makeCertificate } from '../helpers/tls.js';

const RUNS = fuzzRuns(300);
/** Each process case is a node start (about 0.2 s): a 500th of the in-process count, at least 12. */
const PROCESS_RUNS = fuzzShare(12, 500);
/**
 * Linux refuses one argument of 128 KiB or more (MAX_ARG_STRLEN) before any program runs
 * (spawn fails E2BIG): nobody can type a longer session id. Longer names are fuzzed in
 * process above.
 */
const MAX_ARGUMENT_BYTES = 128 * 1024 - 1;

let root: string;
/** Valid files of every kind, the starting point of each edit. */
const valid: Record<'key' | 'peers' | 'relayKey' | 'cert' | 'tlsKey', string> = { key: '', peers: '', relayKey: '', cert: '', tlsKey: '' };

beforeAll(async () => {
  setLogLevel('silent');
  root = await mkdtemp(join(existsSync('/dev/shm') ? '/dev/shm' : tmpdir(), 'interlink-flags-fuzz-'));
  const seedDir = join(root, 'valid');
  await mkdir(seedDir, { recursive: true });
  await createIdentity(join(seedDir, 'id.key'));
  valid.key = await readFile(join(seedDir, 'id.key'), 'utf8');
  await addPeer(join(seedDir, 'peers.json'), 'bob', newIdentity().key);
  await addPeer(join(seedDir, 'peers.json'), 'carol', newIdentity().key, undefined, { clear: true });
  valid.peers = await readFile(join(seedDir, 'peers.json'), 'utf8');
  await loadOrCreateRelayKey(join(seedDir, 'relay-key.json'));
  valid.relayKey = await readFile(join(seedDir, 'relay-key.json'), 'utf8');
  if (hasOpenssl) {
    const files = makeCertificate(seedDir);
    valid.cert = await readFile(files.cert, 'utf8');
    valid.tlsKey = await readFile(files.key, 'utf8');
  }
});
afterAll(async () => {
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

/** Runs `read`; a typed error is an answer, anything else thrown fails the case. */
async function typed(read: () => unknown): Promise<'ok' | string> {
  try {
    await read();
    return 'ok';
  } catch (err) {
    if (err instanceof InterlinkError) return err.code;
    throw err;
  }
}

const caseFile = (name: string) => join(root, 'case', name);

async function writeCase(name: string, bytes: Buffer): Promise<string> {
  await rm(join(root, 'case'), { recursive: true, force: true });
  await mkdir(join(root, 'case'), { recursive: true });
  await writeFile(caseFile(name), bytes);
  return caseFile(name);
}

const FILES: [string, keyof typeof valid, (path: string) => unknown][] = [
  ['INTERLINK_KEY (the identity)', 'key', (path) => loadIdentity(path)],
  ['INTERLINK_PEERS (peers.json, read)', 'peers', (path) => readPeers(path)],
  ['INTERLINK_PEERS (peers.json, written)', 'peers', (path) => loadPeers(path)],
  ['relay --key', 'relayKey', (path) => loadOrCreateRelayKey(path)],
  ['relay --tls-cert', 'cert', (path) => readServerTls(path, join(root, 'valid', 'relay.key'))],
  ['relay --tls-key', 'tlsKey', (path) => readServerTls(join(root, 'valid', 'relay.crt'), path)],
  ['INTERLINK_TLS_CA', 'cert', (path) => readClientTls(path)],
];

describe('files named on the command line, holding hostile bytes', () => {
  for (const [flag, kind, read] of FILES) {
    it(`${flag}: a result or a typed error ${fuzzLabel(RUNS)}`, async () => {
      if (valid[kind] === '') return expect(hasOpenssl).toBe(false);
      const outcomes = new Map<string, number>();
      await fc.assert(
        fc.asyncProperty(hostileBytes(valid[kind]), async (bytes) => {
          const outcome = await typed(async () => read(await writeCase('file', bytes)));
          outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
        }),
        fuzzParameters(RUNS),
      );
      // Most edits are refused; the reader that reports damage as a value (readPeers) answers 'ok' to them all.
      expect(outcomes.size).toBeGreaterThan(0);
    }, fuzzTimeout(RUNS, 3));
  }
});

describe('names that become paths under the state root', () => {
  const stateDir = '/state-root';
  const name = fc.oneof(hostileString, fc.constantFrom(...PATH_LIKE), fc.string({ unit: 'binary', maxLength: 200 }));

  it(`a session id is refused as bad_name or stays inside every folder it names ${fuzzLabel(RUNS)}`, () => {
    const identity = newIdentity().key;
    fc.assert(
      fc.property(name, (session) => {
        let paths: string[];
        try {
          paths = [mailboxPath(stateDir, identity, session), outboxPath(stateDir, identity, session), pairingPath(stateDir, identity, session), ...Object.values(inboxPaths(stateDir, session))];
        } catch (err) {
          if (err instanceof InterlinkError && err.code === 'bad_name') return;
          throw err;
        }
        for (const path of paths) {
          const resolved = resolve(path);
          expect(resolved.startsWith(`${stateDir}${sep}`), path).toBe(true);
          // One file directly in its store's identity folder (or the inbox folder): no step up or across.
          expect(resolved.split(sep).length, path).toBeLessThanOrEqual(stateDir.split(sep).length + 3);
        }
      }),
      fuzzParameters(RUNS),
    );
  }, fuzzTimeout(RUNS, 1));

  it(`a petname is refused as bad_name or is a name, not a path ${fuzzLabel(RUNS)}`, () => {
    fc.assert(
      fc.property(name, (petname) => {
        try {
          checkSafeName(petname, 'petname');
        } catch (err) {
          if (err instanceof InterlinkError && err.code === 'bad_name') return;
          throw err;
        }
        expect(petname.includes('/') || petname.includes('\\') || petname === '.' || petname === '..', petname).toBe(false);
      }),
      fuzzParameters(RUNS),
    );
  }, fuzzTimeout(RUNS, 1));
});

/**
 * Runs the CLI with stdin closed; a relay that starts (its first stdout line) has judged
 * its files and is stopped there, as is anything still running after 20 s (`wait`
 * listens until a notice comes: its judgement of the session id is already made).
 */
function runBounded(args: readonly string[], env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    // The person's working directory sits beside their home (person() below).
    const child = spawn(process.execPath, [MAIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env, cwd: join(dirname(String(env.HOME)), 'cwd') });
    let stdout = '';
    let stderr = '';
    const stop = () => child.kill('SIGTERM');
    const timer = setTimeout(stop, args[0] === 'wait' ? 1_500 : 20_000);
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk;
      if (args[0] === 'relay' && stdout.includes('\n')) stop();
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** Stack frames as Node prints them: a person must never see one. */
const STACK_FRAME = /^\s+at .+\(.+:\d+:\d+\)$|^\s+at .+:\d+:\d+$/m;

describe('the real CLI, as a person types it, with hostile files and names', () => {
  async function person(): Promise<{ env: NodeJS.ProcessEnv; home: string; cwd: string }> {
    const home = join(root, 'person', 'home');
    const cwd = join(root, 'person', 'cwd');
    await rm(join(root, 'person'), { recursive: true, force: true });
    await mkdir(home, { recursive: true });
    await mkdir(cwd, { recursive: true });
    return {
      home,
      cwd,
      env: {
        PATH: process.env.PATH ?? '',
        HOME: home,
        INTERLINK_CONFIG_DIR: join(root, 'person', 'config'),
        INTERLINK_STATE_DIR: join(root, 'person', 'state'),
        // Nothing listens: the commands under test must not need a relay to judge their input.
        INTERLINK_URL: 'ws://127.0.0.1:9',
      },
    };
  }

  function expectASentence(run: { code: number | null; stderr: string; stdout: string }, what: string): void {
    expect(run.stderr, `${what}: a stack trace`).not.toMatch(STACK_FRAME);
    expect(run.stderr, `${what}: an uncaught error`).not.toMatch(/^(TypeError|RangeError|SyntaxError|ReferenceError)\b/m);
    // Exited by itself with a failure (not stopped by this test: a relay that started, a listener still waiting).
    if (run.code !== 0 && run.code !== null) expect(run.stderr.trim().length, `${what}: failed without a word`).toBeGreaterThan(0);
  }

  async function nothingElseWritten(home: string, cwd: string): Promise<void> {
    expect(await readdir(home)).toEqual([]);
    expect(await readdir(cwd)).toEqual([]);
    expect((await readdir(join(root, 'person'))).filter((n) => !['home', 'cwd', 'config', 'state'].includes(n))).toEqual([]);
  }

  const commandCases = fc.oneof(
    fc.tuple(fc.constantFrom(['whoami'], ['peers', 'list'], ['status', '--json']), fc.constantFrom('key' as const, 'peers' as const)).chain(([args, kind]) =>
      hostileBytes(valid[kind]).map((bytes) => ({ args, file: { bytes, variable: kind === 'key' ? 'INTERLINK_KEY' : 'INTERLINK_PEERS' } })),
    ),
    fc.constantFrom(['--key'], ...(hasOpenssl ? [['--tls-cert'], ['--tls-key']] : [])).chain(([flag]) =>
      hostileBytes(flag === '--key' ? valid.relayKey : flag === '--tls-cert' ? valid.cert : valid.tlsKey).map((bytes) => ({ args: ['relay', '--addr', '127.0.0.1:0', flag!], file: { bytes, variable: undefined } })),
    ),
    fc
      .oneof(hostileString, fc.constantFrom(...PATH_LIKE))
      .filter((s) => !s.includes('\u0000') && Buffer.byteLength(s, 'utf8') < MAX_ARGUMENT_BYTES)
      .map((session) => ({ args: ['wait', '--session', session], file: undefined })),
  );

  it(`whoami, peers list, status, relay and wait with hostile files and session ids ${fuzzLabel(PROCESS_RUNS)}`, async () => {
    const seen = new Map<string, number>();
    await fc.assert(
      fc.asyncProperty(commandCases, async ({ args, file }) => {
        const { env, home, cwd } = await person();
        const path = join(root, 'input');
        let argv = args;
        let runEnv = env;
        if (file !== undefined) {
          await writeFile(path, file.bytes);
          if (file.variable === undefined) {
            // relay --key FILE, --tls-cert FILE (with the valid key) or --tls-key FILE (with the valid certificate)
            const flag = args[args.length - 1];
            argv = [...args, path, ...(flag === '--tls-cert' ? ['--tls-key', join(root, 'valid', 'relay.key')] : flag === '--tls-key' ? ['--tls-cert', join(root, 'valid', 'relay.crt')] : [])];
            if (flag === '--tls-key') argv = [...args.slice(0, -1), '--tls-key', path, '--tls-cert', join(root, 'valid', 'relay.crt')];
          } else runEnv = { ...env, [file.variable]: path };
        }
        const run = await runBounded(argv, runEnv);
        const what = argv.map((a) => JSON.stringify(a)).join(' ');
        expectASentence(run, what);
        seen.set(`${args[0]} ${run.code}`, (seen.get(`${args[0]} ${run.code}`) ?? 0) + 1);
        await nothingElseWritten(home, cwd);
      }),
      fuzzParameters(PROCESS_RUNS),
    );
    console.log(`CLI outcomes (command, exit code): ${[...seen].map(([k, n]) => `${k}: ${n}`).join(', ')}`);
  }, 3_600_000);
});
