/**
 * Helpers for the pairing end-to-end tests: people at a terminal (the real CLI in a child
 * process, each with its own config and state roots and announced name), strangers that
 * speak to a relay by hand (a raw relay client with an in-process key), and small readers
 * of the files a test checks (peers.json, the pairing store, a server's warning log).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach } from 'vitest';
import { isSealed, parseEnvelope, wireOf, type Envelope } from '../../src/envelope/envelope.js';
import { openEnvelope } from '../../src/envelope/open.js';
import { signEnvelope, type EnvelopeFields } from '../../src/envelope/sign.js';
import { formatRoute, parseRoute } from '../../src/envelope/route.js';
import { loadIdentity, type Identity } from '../../src/identity/identity.js';
import { pairingFileSchema, type PairingData } from '../../src/pairing/rules.js';
import { pairingPath } from '../../src/config/layout.js';
import { signAnnouncementV3 } from '../../src/presence/announcement.js';
import { nameBucket, sealDetails } from '../../src/presence/private.js';
import { newIdentity } from './fixtures.js';
import { reapAll } from './process.js';
import { MAIN, eventually, resultData, type Peer } from './mcp.js';
import { TestClient, type Deliver } from './relay-test-client.js';

export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

const running = new Set<ChildProcess>();

/** Kills and reaps every CLI child still running (a test that failed mid-command). */
export async function reapCli(): Promise<void> {
  await Promise.all(
    [...running].map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once('exit', () => resolve());
          child.kill('SIGKILL');
        }),
    ),
  );
  running.clear();
}

/**
 * For a test file of people and agents: before each test a fresh temp root (handed to
 * `onRoot`), after it every server and hand the test left open closed, every CLI run and
 * child reaped, and the root removed.
 */
export function pairingWorkspace(prefix: string, onRoot: (dir: string) => void): { peers: Peer[]; hands: Hand[] } {
  const open = { peers: [] as Peer[], hands: [] as Hand[] };
  let root: string | undefined;
  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), prefix));
    onRoot(root);
  });
  afterEach(async () => {
    await Promise.all(open.peers.splice(0).map((p) => p.close().catch(() => undefined)));
    await Promise.all(open.hands.splice(0).map((h) => h.close().catch(() => undefined)));
    await reapCli();
    await reapAll();
    if (root !== undefined) await rm(root, { recursive: true, force: true });
  });
  return open;
}

/** One person's machine: config and state roots, the relays it uses, the name it announces. */
export interface Person {
  name: string;
  dir: string;
  config: string;
  state: string;
  peersFile: string;
  keyFile: string;
  /** Runs `interlink-mcp <args>` as this person; killed (and reported) past the deadline. */
  cli: (args: string[], extra?: Record<string, string>) => Promise<Run>;
  /** Runs it and parses stdout as JSON; throws with the output when it did not exit 0. */
  json: <T = Record<string, unknown>>(args: string[], extra?: Record<string, string>) => Promise<T>;
  identity: () => Promise<Identity>;
  peers: () => Promise<Record<string, { key: string }>>;
}

/**
 * `relays` is always set (INTERLINK_URL): without it the CLI would start a detached local
 * relay on the default port, which no test may leave behind.
 */
export function person(root: string, name: string, relays: string, announced = name): Person {
  const dir = join(root, name);
  const config = join(dir, 'config');
  const state = join(dir, 'state');
  const baseEnv = (extra: Record<string, string>): NodeJS.ProcessEnv => ({
    PATH: process.env.PATH ?? '',
    HOME: dir,
    INTERLINK_CONFIG_DIR: config,
    INTERLINK_STATE_DIR: state,
    INTERLINK_URL: relays,
    INTERLINK_NAME: announced,
    INTERLINK_LOG: 'warn',
    ...extra,
  });
  const cli = async (args: string[], extra: Record<string, string> = {}, timeoutMs = 20_000): Promise<Run> => {
    await mkdir(dir, { recursive: true });
    return new Promise((resolve, reject) => {
      const child = spawn(process.execPath, [MAIN, ...args], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'], env: baseEnv(extra) });
      running.add(child);
      let stdout = '';
      let stderr = '';
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`interlink-mcp ${args.join(' ')} (${name}) did not finish in ${timeoutMs} ms; stderr: ${stderr}`));
      }, timeoutMs);
      child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
      child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
      child.once('error', (err) => {
        clearTimeout(timer);
        running.delete(child);
        reject(err);
      });
      child.once('close', (code) => {
        clearTimeout(timer);
        running.delete(child);
        resolve({ code, stdout, stderr });
      });
    });
  };
  const json = async <T>(args: string[], extra: Record<string, string> = {}): Promise<T> => {
    const run = await cli([...args, '--json'], extra);
    if (run.code !== 0) throw new Error(`interlink-mcp ${args.join(' ')} (${name}) exited ${run.code}: ${run.stderr}${run.stdout}`);
    return JSON.parse(run.stdout) as T;
  };
  const peersFile = join(config, 'peers.json');
  const keyFile = join(config, 'id.key');
  return {
    name,
    dir,
    config,
    state,
    peersFile,
    keyFile,
    cli,
    json,
    identity: () => loadIdentity(keyFile),
    peers: () => readPeers(peersFile),
  };
}

/** peers.json as a plain object; {} when there is none. */
export async function readPeers(path: string): Promise<Record<string, { key: string }>> {
  try {
    return JSON.parse(await readFile(path, 'utf8')) as Record<string, { key: string }>;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return {};
    throw err;
  }
}

/** The file's exact bytes, or undefined when it does not exist (to compare before/after). */
export async function snapshot(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/** A session's pairing store, validated with its schema. */
export async function readPairing(state: string, key: string, session: string): Promise<PairingData> {
  const text = await snapshot(pairingPath(state, key, session));
  return text === undefined ? { v: 1, outgoing: [], incoming: [], control: [], handled: [] } : pairingFileSchema.parse(JSON.parse(text));
}

/** The JSON log lines of a process's stderr with this event (and, if given, this msg_id). */
export function logged(stderr: string, event: string, msgId?: string): Record<string, unknown>[] {
  return stderr
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => {
      try {
        return JSON.parse(line) as Record<string, unknown>;
      } catch {
        return {};
      }
    })
    .filter((entry) => entry.event === event && (msgId === undefined || entry.msg_id === msgId));
}

/**
 * Someone who speaks to a relay by hand: an identity (in-process, or loaded from a real
 * person's key file) and one raw connection. It can sign anything as that identity,
 * send it to any route, announce itself, and read its own route.
 */
export class Hand {
  private constructor(
    readonly identity: Identity,
    readonly client: TestClient,
    readonly session: string,
  ) {}

  static async connect(url: string, options: { identity?: Identity; session?: string } = {}): Promise<Hand> {
    const client = await TestClient.connect(url, { autoAck: true });
    return new Hand(options.identity ?? newIdentity(), client, options.session ?? 'hand');
  }

  get key(): string {
    return this.identity.key;
  }

  get fingerprint(): string {
    return this.identity.fingerprint;
  }

  get route(): string {
    return formatRoute({ key: this.identity.key, session: this.session });
  }

  /** Signs an envelope from this identity, with its own route as reply_to. */
  sign(to: string, fields: Omit<EnvelopeFields, 'to'>): Envelope {
    return signEnvelope(this.identity.signingKey, { reply_to: this.route, ...fields, to });
  }

  /**
   * Sends a payload to a route; throws unless the relay accepted it. An envelope this hand
   * signed without a session (`sign`) is sealed for the route's session first, with the
   * same msg_id, ts and fields: receivers refuse clear envelopes from keys not marked clear.
   */
  async send(route: string, envelope: Envelope): Promise<void> {
    const session = parseRoute(route)?.session;
    const { v, from, sig: _sig, sealed: _sealed, ...fields } = envelope;
    const sealed = v === undefined && from === this.key && session !== undefined ? wireOf(signEnvelope(this.identity.signingKey, { ...fields, to_session: session })) : wireOf(envelope);
    const reply = await this.client.send(route, sealed as unknown as Record<string, unknown>);
    if (reply.type !== 'accepted') throw new Error(`relay refused: ${JSON.stringify(reply)}`);
  }

  /** Puts this session on the relay's roster under `name`. */
  async announce(name: string): Promise<void> {
    // Version 3, as sessions announce to a revision 4 relay: its name bucket is how pairing by name finds it.
    const ts = Date.now();
    const sealed = sealDetails(this.identity.signingKey, this.session, ts, { name, cwd: '/', git_root: '', summary: '' }, [this.key]);
    this.client.frame({ type: 'announce', announcement: signAnnouncementV3(this.identity.signingKey, { session: this.session, ts, ...sealed, name_bucket: nameBucket(name) }) });
    // Frames are handled in order: once a roster answer comes back, the announcement is in.
    const ref = `roster-${Date.now()}`;
    this.client.frame({ type: 'roster', ref, keys: [this.key] });
    await this.client.waitFor('roster answer', (f) => f.type === 'roster' && f.ref === ref);
  }

  /** Reads this identity's route (delivered frames are acknowledged on arrival). */
  async listen(): Promise<void> {
    const reply = await this.client.auth({ key: this.identity.signingKey, route: this.route });
    if (reply.type !== 'auth_ok') throw new Error(`auth refused: ${JSON.stringify(reply)}`);
  }

  /** The first delivery on this route whose payload, opened when it is sealed to this identity, matches. */
  async received(what: string, match: (envelope: Envelope) => boolean, timeoutMs = 15_000): Promise<Envelope> {
    const opened = (d: Deliver): Envelope => {
      const wire = parseEnvelope(d.payload);
      return isSealed(wire) ? openEnvelope(this.identity.signingKey, wire) : wire;
    };
    const frame = await this.client.when(what, () => this.client.deliveries(this.route).find((d: Deliver) => match(opened(d))), timeoutMs);
    return opened(frame);
  }

  close(): Promise<void> {
    return this.client.close();
  }
}

/**
 * Calls request_pair, retrying while the target is not on the roster yet (a server's
 * first announcement may still be on its way); any other outcome is returned.
 */
export async function requestPair<T = Record<string, unknown>>(peer: Peer, args: Record<string, unknown>, timeoutMs = 15_000): Promise<T> {
  return eventually(
    async () => {
      const result = await peer.client.callTool({ name: 'request_pair', arguments: args });
      const data = resultData(result) as { error?: { code: string } };
      if (result.isError !== true) return data as T;
      if (data?.error?.code === 'unknown_target' || data?.error?.code === 'no_route') return undefined;
      throw new Error(`request_pair failed: ${JSON.stringify(data)}`);
    },
    timeoutMs,
    `${JSON.stringify(args.target)} on the roster`,
  );
}

/** What request_pair (and `pair request --json`) returns. */
export interface Requested {
  request_id: string;
  to: string;
  fingerprint: string;
  session: string;
  petname: string;
  code: string;
  repeated: boolean;
  /** an open request queued again by this call (the other side may have dropped it) */
  resent?: boolean;
  /** the tool's result */
  state?: string;
  /** the CLI's: a relay took the request */
  sent?: boolean;
  /** what the people do next, with the real fingerprint */
  next: string;
}

/** What list_pair_requests (and `pair list --json`) returns. */
export interface Listed {
  incoming: { fingerprint: string; key: string; claimed_name: string; session: string; code: string }[];
  outgoing: { fingerprint: string; key: string; petname: string; code: string; state: string }[];
  unsent_control_messages: number;
  /** requests dropped from a full list since a person last saw it in `pair list` */
  dropped_requests?: { count: number; since: number; since_iso: string } | null;
  /** the CLI's: open requests that completed during this run */
  completed?: { petname: string; fingerprint: string; key: string }[];
  /** the CLI's: open requests closed because their key is a peer already (added by hand) */
  closed_already_peers?: { petname: string; fingerprint: string; key: string }[];
}
