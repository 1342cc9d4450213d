/**
 * Seeded fuzzing of every file Interlink keeps (issue 16, hostile input): a real relay
 * with `--db` and two real `serve` processes pair, exchange messages, acknowledge, wake a
 * Claude listener's inbox and record a relay key, so that every store holds what real use
 * writes. Then each file in turn — in the receiver's state root, its config root and the
 * relay's database — is replaced by hostile bytes (the valid file cut short, a bit
 * flipped, a byte dropped or doubled, a member edited, JSON nested 200,000 deep, random
 * bytes, nothing), and the code that owns that file opens it the way the product does,
 * reads it, and writes to it where a writer would.
 *
 * Every case must end in a result or a typed InterlinkError — no TypeError, no RangeError,
 * no hang — and nothing may be written outside the copy of the roots the case works in.
 *
 * Writers: 60 cases per file in `npm test`, 10,000 per file in `npm run fuzz` (RUNS).
 * Read-only views: 300 per file in `npm test`, 100,000 per file in `npm run fuzz` (VIEW_RUNS).
 */
import { peekSessions, SessionRegistry } from '../../src/succession/registry.js';
import fc from 'fast-check';
import { mkdir, mkdtemp, readdir, readFile, rm, utimes, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, relative, sep } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signEnvelope } from '../../src/envelope/sign.js';
import { InterlinkError } from '../../src/errors.js';
import { setLogLevel } from '../../src/log.js';
import { commitCursor, readInboxBatch } from '../../src/hosts/claude/inbox.js';
import { FailedDeliveries } from '../../src/hosts/codex/failed.js';
import { loadIdentity } from '../../src/identity/identity.js';
import { Mailbox } from '../../src/mailbox/mailbox.js';
import { Outbox } from '../../src/outbox/outbox.js';
import { PairingStore } from '../../src/pairing/store.js';
import { loadPeers, readPeers } from '../../src/peers/peers.js';
import { peekRejections, recordRejection } from '../../src/agent/rejected.js';
import { KnownRelays, readKnownRelays } from '../../src/link/known-relays.js';
import { readRelayPid } from '../../src/relay/pid-file.js';
import { loadOrCreateRelayKey } from '../../src/relay/relay-key.js';
import { DEFAULT_QUEUE_LIMITS } from '../../src/relay/limits.js';
import { RelayStorage } from '../../src/relay/storage.js';
import { Roster } from '../../src/relay/roster.js';
import { RosterFile } from '../../src/relay/roster-file.js';
import { signAnnouncement } from '../../src/presence/announcement.js';
import { ReplayIndex } from '../../src/replay/claims.js';
import { pairingFileSchema } from '../../src/pairing/rules.js';
import { relayQueueFormat } from '../../src/relay/queues.js';
import { loadJournaled } from '../../src/store/journal.js';
import { peekJson } from '../../src/store/json-store.js';
import { newIdentity } from '../helpers/fixtures.js';
import { fuzzLabel, fuzzParameters, fuzzRuns, fuzzShare, hostileBytes } from '../helpers/fuzz.js';
import { eventually, pair, startPeer, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { startRelay, type RelayProcess } from '../helpers/spawn-relay.js';

/**
 * Each case is a real file opened with its lock, read and written (a few ms on tmpfs), so
 * `npm run fuzz` gives each file a tenth of FUZZ_RUNS: 10,000 of 100,000.
 */
const RUNS = fuzzShare(60, 10);
/** A read-only view's case is one write and one read: FUZZ_RUNS of them per file (default 300). */
const VIEW_RUNS = fuzzRuns(300);
/** A case that takes longer than this is a hang: the slowest real one (a 300 KB file) takes a few ms, and a starved process (a niced run beside CI) a few seconds. */
const CASE_DEADLINE_MS = 60_000;
const LONG_AGO = new Date('2026-01-01T00:00:00Z');

/** The template: the receiver's roots and the relay's database after real use. */
let template: string;
/** Where cases run: tmpfs when there is one, so 100,000 cases are not 100,000 disk syncs. */
let sandbox: string;
let receiverKey: string;
const SESSION = 'work';

beforeAll(async () => {
  // Each case's damage is logged as an error; 100,000 of them would only fill the terminal.
  setLogLevel('silent');
  template = await mkdtemp(join(tmpdir(), 'interlink-state-fuzz-'));
  sandbox = await mkdtemp(join(existsSync('/dev/shm') ? '/dev/shm' : tmpdir(), 'interlink-state-fuzz-'));
  const db = join(template, 'relaydb');
  let relay: RelayProcess | undefined;
  const peers: Peer[] = [];
  try {
    relay = await startRelay({ db });
    const alice = await startPeer({ root: template, name: 'alice', session: 'desk', relays: relay.url });
    peers.push(alice);
    const bob = await startPeer({ root: template, name: 'bob', session: SESSION, relays: relay.url });
    peers.push(bob);
    const { bKey } = await pair(alice, bob);
    receiverKey = bKey;
    const sent: string[] = [];
    for (const text of ['first', 'second', 'a task', 'third']) {
      const args = text === 'a task' ? { to: 'bob', session: SESSION, text, task_id: 't-1', status: 'update' } : { to: 'bob', session: SESSION, text };
      sent.push((await alice.call<{ msg_id: string }>('send_message', args)).msg_id);
    }
    const inbox = await eventually(async () => {
      const got = await bob.call<{ messages: { receipt: unknown }[] }>('receive_messages', {});
      return got.messages.length === sent.length ? got : undefined;
    }, 20_000, 'four messages at bob');
    await bob.call('acknowledge_messages', { messages: [inbox.messages[0]!.receipt] });
    await bob.call('send_message', { to: 'alice', text: 'reply' });
    // An open pairing request, so the pairing store holds what real use writes.
    const carol = await startPeer({ root: template, name: 'carol', session: 'lab', relays: relay.url });
    peers.push(carol);
    const carolKey = (await carol.call<{ identity: string }>('get_my_session_id')).identity;
    await eventually(async () => ((await bob.call<{ sessions?: unknown[] }>('discover', {})) !== undefined ? true : undefined));
    await eventually(async () => {
      try {
        await bob.call('request_pair', { target: carolKey });
        return true;
      } catch {
        return undefined;
      }
    }, 20_000, 'a pairing request to carol');
  } finally {
    await Promise.all(peers.map((p) => p.close().catch(() => undefined)));
    await reapAll();
  }
  // Stores only Codex mode or a refusal writes, made with the product's own code.
  const state = join(template, 'bob', 'state');
  await FailedDeliveries.forSession(state, receiverKey, SESSION).save({
    kind: 'notice',
    notification_id: 'n-1',
    thread: 'thread-1',
    message: 'a notice',
    outcome: 'delivery_failed',
    reason: 'the host was busy',
    attempts: 3,
  });
  await recordRejection(join(state, 'rejected', receiverKey, `${SESSION}.json`), { from: newIdentity().key, msg_id: '0'.repeat(32), code: 'not_allowlisted', reason: 'a stranger', at: Date.now(), ts: Date.now() });
  await commitCursor(state, SESSION, 0);
}, 120_000);

afterAll(async () => {
  await rm(template, { recursive: true, force: true });
  await rm(sandbox, { recursive: true, force: true });
});

interface Roots {
  state: string;
  config: string;
  db: string;
}

/** The code that owns a file, run over a case's roots as the product runs it. */
type Owner = (roots: Roots, file: string) => Promise<unknown>;

const someone = newIdentity();
const aMessage = () => signEnvelope(someone.signingKey, { to: receiverKey, to_session: SESSION, text: 'fuzz', ts: Date.now() });

const owners: [RegExp, string, Owner][] = [
  [/^state\/mailbox\//, 'mailbox', async ({ state }) => {
    const path = join(state, 'mailbox', receiverKey, `${SESSION}.json`);
    const mailbox = await Mailbox.open(path, { lockTimeoutMs: 2_000 });
    try {
      await mailbox.fetch();
      await mailbox.noticeState();
      await mailbox.store(aMessage());
    } finally {
      await mailbox.close();
    }
  }],
  [/^state\/outbox\//, 'outbox', async ({ state }) => {
    const outbox = await Outbox.open(join(state, 'outbox', receiverKey, `${SESSION}.json`));
    try {
      await outbox.all();
      await outbox.pending();
      await outbox.lastTimestamp();
    } finally {
      await outbox.close();
    }
  }],
  [/^state\/pairing\//, 'pairing', ({ state }) => new PairingStore(join(state, 'pairing', receiverKey, `${SESSION}.json`)).read()],
  [/^state\/failed\//, 'failed deliveries', async ({ state }) => {
    const failed = FailedDeliveries.forSession(state, receiverKey, SESSION);
    await failed.peek();
    await failed.list();
  }],
  [/^state\/rejected\//, 'refused messages', async ({ state }, file) => {
    await peekRejections(file);
    await recordRejection(join(state, 'rejected', receiverKey, `${SESSION}.json`), { from: someone.key, msg_id: '1'.repeat(32), code: 'stale', reason: 'fuzz', at: 1, ts: 1 });
  }],
  [/^state\/replay\//, 'replay index', async ({ state }) => {
    const index = await ReplayIndex.open(join(state, 'replay', `${receiverKey}.json`));
    try {
      await index.holder(someone.key, '2'.repeat(32));
      await index.claim({ from: someone.key, msg_id: '3'.repeat(32), session: SESSION, ts: Date.now() });
    } finally {
      await index.close();
    }
  }],
  [/^state\/inbox\//, 'Claude inbox', ({ state }) => readInboxBatch(state, SESSION)],
  [/^state\/sessions\//, 'session registry', async ({ state }) => {
    const registry = new SessionRegistry(state, receiverKey);
    await registry.read();
    await registry.beat(SESSION, 'claude');
    await registry.leave(SESSION);
  }],
  [/^state\/relays\.json/, 'known relays', async ({ state }) => {
    await readKnownRelays(join(state, 'relays.json'));
    await new KnownRelays(join(state, 'relays.json'), ['ws://127.0.0.1:9']).admit({ url: 'ws://127.0.0.1:9', pin: undefined }, someone.key);
  }],
  [/^config\/id\.key/, 'identity', ({ config }) => loadIdentity(join(config, 'key'))],
  [/^config\/peers\.json/, 'peers', async ({ config }) => {
    await readPeers(join(config, 'peers.json'));
    await loadPeers(join(config, 'peers.json'));
  }],
  [/^relaydb\/relay-key/, 'relay key', ({ db }) => loadOrCreateRelayKey(join(db, 'relay-key.json'))],
  [/^relaydb\/relay\.pid/, 'relay pid file', ({ db }) => readRelayPid(db)],
  [/^relaydb\/roster\.json/, 'relay roster', async ({ db }) => {
    const roster = await RosterFile.open(new Roster(), join(db, 'roster.json'));
    roster.announce(signAnnouncement(someone.signingKey, { name: 'someone', session: 's', cwd: '/x', git_root: '/x', summary: '', ts: Date.now() }));
    await roster.flush();
    roster.list();
  }],
  [/^relaydb\//, 'relay queues', async ({ db }) => {
    const storage = await RelayStorage.open(db, DEFAULT_QUEUE_LIMITS, Date.now);
    await storage.release();
  }],
];

/**
 * The read-only views of the same files: what `status`, `inbox`, `peers list` and the
 * tools that only read use. Each must leave the file byte for byte where it is (a view
 * never repairs: the next writer does). A case costs one write and one read, so these run
 * FUZZ_RUNS cases per file (100,000 in `npm run fuzz`).
 */
const readers: [RegExp, string, Owner][] = [
  [/^state\/mailbox\//, 'mailbox view', async ({ state }) => {
    const mailbox = await Mailbox.open(join(state, 'mailbox', receiverKey, `${SESSION}.json`), { readOnly: true });
    try {
      await mailbox.fetch();
    } finally {
      await mailbox.close();
    }
  }],
  [/^state\/outbox\//, 'outbox view', async ({ state }) => {
    const outbox = await Outbox.open(join(state, 'outbox', receiverKey, `${SESSION}.json`), { readOnly: true });
    try {
      await outbox.all();
    } finally {
      await outbox.close();
    }
  }],
  [/^state\/pairing\//, 'pairing view', (_roots, file) => peekJson(file, pairingFileSchema)],
  [/^state\/failed\//, 'failed deliveries view', ({ state }) => FailedDeliveries.forSession(state, receiverKey, SESSION).peek()],
  [/^state\/rejected\//, 'refused messages view', (_roots, file) => peekRejections(file)],
  [/^state\/replay\//, 'replay index view', async ({ state }) => {
    const index = await ReplayIndex.open(join(state, 'replay', `${receiverKey}.json`), { readOnly: true });
    try {
      await index.holder(someone.key, '2'.repeat(32));
    } finally {
      await index.close();
    }
  }],
  [/^state\/inbox\/.*\.jsonl$/, 'Claude inbox read', ({ state }) => readInboxBatch(state, SESSION)],
  [/^state\/sessions\//, 'session registry view', ({ state }) => peekSessions(state, receiverKey)],
  [/^state\/relays\.json/, 'known relays view', ({ state }) => readKnownRelays(join(state, 'relays.json'))],
  [/^config\/id\.key/, 'identity', ({ config }) => loadIdentity(join(config, 'id.key'))],
  [/^config\/peers\.json/, 'peers view', ({ config }) => readPeers(join(config, 'peers.json'))],
  [/^relaydb\/relay\.pid/, 'relay pid file', ({ db }) => readRelayPid(db)],
  [/^relaydb\/queues\.(json|journal)$/, 'relay queues view', ({ db }) => loadJournaled(join(db, 'queues.json'), relayQueueFormat(), false)],
];

function readerOf(file: string): [string, Owner] | undefined {
  // A lock file is read by the writers that take it, not by any view.
  if (file.endsWith('.lock')) return undefined;
  const found = readers.find(([pattern]) => pattern.test(file));
  return found === undefined ? undefined : [found[1], found[2]];
}

function ownerOf(file: string): [string, Owner] | undefined {
  const found = owners.find(([pattern]) => pattern.test(file));
  return found === undefined ? undefined : [found[1], found[2]];
}

/** Every file of the template under the receiver's roots and the relay's database, as `state/…`, `config/…`, `relaydb/…`. */
async function templateFiles(): Promise<string[]> {
  const roots: [string, string][] = [
    ['state', join(template, 'bob', 'state')],
    ['config', join(template, 'bob', 'config')],
    ['relaydb', join(template, 'relaydb')],
  ];
  const files: string[] = [];
  for (const [label, dir] of roots) {
    for (const entry of await readdir(dir, { recursive: true, withFileTypes: true })) {
      if (entry.isFile()) files.push(join(label, relative(dir, join(entry.parentPath, entry.name))).split(sep).join('/'));
    }
  }
  return files.sort();
}

function templatePath(file: string): string {
  const [label, ...rest] = file.split('/');
  const base = label === 'relaydb' ? join(template, 'relaydb') : join(template, 'bob', label!);
  return join(base, ...rest);
}

/** Runs `run` with the case deadline: a typed InterlinkError is an answer; anything else thrown, or no answer, fails the case. */
async function typedWithin(run: () => Promise<unknown>): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${CASE_DEADLINE_MS} ms`)), CASE_DEADLINE_MS);
  });
  try {
    await Promise.race([run(), deadline]);
  } catch (err) {
    if (!(err instanceof InterlinkError)) throw err;
  } finally {
    clearTimeout(timer);
  }
}

/** The attacked file's folder as real use left it: the owner reads nothing else. */
interface Folder {
  /** `state/mailbox/<key>`, relative to a case's roots. */
  path: string;
  files: Map<string, Buffer>;
}

async function folderOf(file: string): Promise<Folder> {
  const source = dirname(templatePath(file));
  const files = new Map<string, Buffer>();
  for (const entry of await readdir(source, { withFileTypes: true })) {
    if (entry.isFile()) files.set(entry.name, await readFile(join(source, entry.name)));
  }
  return { path: dirname(file), files };
}

/** Runs one case in a fresh copy of the file's folder, the file replaced by `bytes`. */
async function runCase(file: string, folder: Folder, owner: Owner, bytes: Buffer, caseDir: string): Promise<void> {
  await rm(caseDir, { recursive: true, force: true });
  const roots: Roots = { state: join(caseDir, 'state'), config: join(caseDir, 'config'), db: join(caseDir, 'relaydb') };
  await mkdir(join(caseDir, folder.path), { recursive: true });
  for (const [name, content] of folder.files) await writeFile(join(caseDir, folder.path, name), content);
  await writeFile(join(caseDir, file), bytes);
  // A damaged lock is debris from long ago: one written this instant is waited on for 2 s
  // first (lock-file.ts), which the lock tests show; here it would only slow every case.
  if (file.endsWith('.lock')) await utimes(join(caseDir, file), LONG_AGO, LONG_AGO);
  await typedWithin(() => owner(roots, join(caseDir, file)));
}

/** Runs a read-only view on `bytes` in place of the file, in a folder set up once; returns the folder's files after it. */
async function runView(file: string, view: Owner, bytes: Buffer, caseDir: string): Promise<Map<string, Buffer>> {
  const roots: Roots = { state: join(caseDir, 'state'), config: join(caseDir, 'config'), db: join(caseDir, 'relaydb') };
  await writeFile(join(caseDir, file), bytes);
  await typedWithin(() => view(roots, join(caseDir, file)));
  const after = new Map<string, Buffer>();
  const folder = join(caseDir, dirname(file));
  for (const name of await readdir(folder)) after.set(name, await readFile(join(folder, name)));
  return after;
}

describe('every file under the state root, the config root and a relay database, replaced by hostile bytes', () => {
  it('has an owner for every file real use writes (a file nobody reads would go unfuzzed)', async () => {
    const files = await templateFiles();
    expect(files.length).toBeGreaterThan(10);
    const unowned = files.filter((file) => ownerOf(file) === undefined && !/\.(lock|io-lock|log)$/.test(file));
    expect(unowned).toEqual([]);
    // What real use wrote, so that a store that stopped writing is noticed here.
    for (const expected of ['state/mailbox/', 'state/outbox/', 'state/replay/', 'state/inbox/', 'state/sessions/', 'state/relays.json', 'state/pairing/', 'config/id.key', 'config/peers.json', 'relaydb/relay-key.json', 'relaydb/roster.json']) {
      expect(files.some((file) => file.startsWith(expected)), expected).toBe(true);
    }
  });

  it(`read-only views end every case in a result or a typed error and change nothing ${fuzzLabel(VIEW_RUNS)} per file`, async () => {
    const only = process.env.FUZZ_FILE;
    const files = (await templateFiles()).filter((file) => readerOf(file) !== undefined && (only === undefined || file.includes(only)));
    expect(files.length).toBeGreaterThan(10);
    const counts: string[] = [];
    for (const file of files) {
      const [what, view] = readerOf(file)!;
      const valid = await readFile(templatePath(file), 'utf8');
      const folder = await folderOf(file);
      const caseDir = join(sandbox, 'view');
      await rm(caseDir, { recursive: true, force: true });
      await mkdir(join(caseDir, folder.path), { recursive: true });
      for (const [name, content] of folder.files) await writeFile(join(caseDir, folder.path, name), content);
      const started = Date.now();
      let cases = 0;
      await fc.assert(
        fc.asyncProperty(hostileBytes(valid), async (bytes) => {
          cases++;
          const after = await runView(file, view, bytes, caseDir);
          // The folder as the case left it: the damaged file byte for byte, nothing added, nothing moved.
          expect([...after.keys()].sort(), `${what}: the folder changed`).toEqual([...folder.files.keys()].sort());
          expect(after.get(basename(file))!.equals(bytes), `${what}: the file was rewritten`).toBe(true);
          for (const [name, content] of folder.files) if (name !== basename(file)) expect(after.get(name)!.equals(content), `${what}: ${name} was rewritten`).toBe(true);
        }),
        fuzzParameters(VIEW_RUNS),
      );
      counts.push(`${file} (${what}): ${cases} in ${Date.now() - started} ms`);
    }
    console.log(`state-file view fuzz cases:\n  ${counts.join('\n  ')}`);
  }, 7_200_000);

  it(`ends every case in a result or a typed error, writing nothing outside the case ${fuzzLabel(RUNS)} per file`, async () => {
    const only = process.env.FUZZ_FILE;
    const files = (await templateFiles()).filter((file) => ownerOf(file) !== undefined && (only === undefined || file.includes(only)));
    const counts: string[] = [];
    for (const file of files) {
      const [what, owner] = ownerOf(file)!;
      const valid = await readFile(templatePath(file), 'utf8');
      const folder = await folderOf(file);
      const caseDir = join(sandbox, 'case');
      let cases = 0;
      const started = Date.now();
      await fc.assert(
        fc.asyncProperty(hostileBytes(valid), async (bytes) => {
          cases++;
          await runCase(file, folder, owner, bytes, caseDir);
          const outside = (await readdir(sandbox)).filter((name) => name !== 'case' && name !== 'view');
          expect(outside, `${what}: written beside the case`).toEqual([]);
        }),
        fuzzParameters(RUNS),
      );
      counts.push(`${file} (${what}): ${cases} in ${Date.now() - started} ms`);
    }
    console.log(`state-file fuzz cases:\n  ${counts.join('\n  ')}`);
  }, 3_600_000);
});
