/**
 * The pairing commands' manners of issue 37, with the real CLI in child processes and real
 * relay processes: petnames with hidden characters or that look like a peer's are refused
 * before anything is sent or stored; a flood of knocks that drops a real request is
 * counted for the person, and the requester's repeated `pair request` sends it again;
 * `pair accept` of a peer says it already was; and a request after a relay restart,
 * before the other side announced again, says why it finds nobody and what to do.
 */
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { wireOf } from '../../src/envelope/envelope.js';
import { signEnvelope } from '../../src/envelope/sign.js';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { generateSigningKey } from '../../src/identity/ed25519.js';
import { MAX_INCOMING } from '../../src/pairing/rules.js';
import { newIdentity } from '../helpers/fixtures.js';
import { person, type Listed, type Requested, pairingWorkspace } from '../helpers/pairing.js';
import { TestClient } from '../helpers/relay-test-client.js';
import { freePort, startRelay } from '../helpers/spawn-relay.js';

let root: string;
pairingWorkspace('interlink-pair-manners-', (dir) => (root = dir));
const clients: TestClient[] = [];
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close().catch(() => undefined)));
});

/** `count` pairing requests, each from a new throwaway key, to `route`; the fingerprints in order. */
async function knock(url: string, to: string, session: string, count: number): Promise<string[]> {
  const client = await TestClient.connect(url, { autoAck: true });
  clients.push(client);
  const fingerprints: string[] = [];
  for (let i = 0; i < count; i++) {
    const stranger = newIdentity();
    const envelope = wireOf(signEnvelope(stranger.signingKey, { to, to_session: session, kind: 'pair_request', text: `knock ${i}`, reply_to: `${stranger.key}#k` }));
    const reply = await client.send(`${to}#${session}`, envelope as unknown as Record<string, unknown>);
    if (reply.type !== 'accepted') throw new Error(`relay refused knock ${i}: ${JSON.stringify(reply)}`);
    fingerprints.push(stranger.fingerprint);
  }
  return fingerprints;
}

type Dropped = { count: number; since: string; since_iso?: string } | null;

const newKey = (): string => encodeBase64url(generateSigningKey().publicKey);

function ok(run: { code: number | null; stdout: string; stderr: string }): string {
  expect(run.code, run.stderr).toBe(0);
  return run.stdout;
}

function failure(run: { code: number | null; stdout: string }): { code: string; message: string } {
  expect(run.code, run.stdout).toBe(1);
  return (JSON.parse(run.stdout) as { error: { code: string; message: string } }).error;
}

describe('petnames in pairing', () => {
  it('pair request and pair accept refuse a hidden character or a look-alike of a peer, and take an accented name', async () => {
    const relay = await startRelay();
    const alice = person(root, 'alice', relay.url);
    const bob = person(root, 'bob', relay.url);
    ok(await bob.cli(['pair', 'list']));
    const bobId = await bob.identity();

    // A hidden character: refused, named, nothing stored or sent.
    const bidi = failure(await alice.cli(['pair', 'request', bobId.key, '--petname', 'bo\u202eb', '--json']));
    expect(bidi).toMatchObject({ code: 'bad_name', message: expect.stringContaining('U+202E') });
    // A look-alike of a peer Alice has.
    ok(await alice.cli(['peers', 'add', 'carol', newKey()]));
    const lookalike = failure(await alice.cli(['pair', 'request', bobId.key, '--petname', 'C\u0430rol', '--json']));
    expect(lookalike).toMatchObject({ code: 'peer_conflict', message: expect.stringContaining('"carol"') });
    expect((await bob.json<Listed>(['pair', 'list'])).incoming).toEqual([]);

    // An accented name typed in NFD is asked for, and kept, in NFC.
    const asked = await alice.json<Requested>(['pair', 'request', bobId.key, '--petname', 'Bo\u0301b']);
    expect(asked.petname).toBe('Bób');
    const aliceId = await alice.identity();

    // Bob has a peer "alice" already: accepting as "ALICE" is refused, as "alice-2" taken.
    ok(await bob.cli(['peers', 'add', 'alice', newKey()]));
    const refused = failure(await bob.cli(['pair', 'accept', aliceId.fingerprint, '--petname', 'ALICE', '--json']));
    expect(refused).toMatchObject({ code: 'peer_conflict', message: expect.stringContaining('"alice"') });
    expect(Object.keys(await bob.peers())).toEqual(['alice']);
    ok(await bob.cli(['pair', 'accept', aliceId.fingerprint, '--petname', 'alice-2']));
    expect((await bob.peers())['alice-2']).toEqual({ key: aliceId.key });
  });
});

describe('a flood of knocks', () => {
  it(`that drops a real request from the full list is counted for the person, and a repeated pair request sends it again`, async () => {
    const relay = await startRelay();
    const alice = person(root, 'alice', relay.url);
    const bob = person(root, 'bob', relay.url);
    ok(await bob.cli(['pair', 'list']));
    const bobId = await bob.identity();

    const asked = await alice.json<Requested>(['pair', 'request', bobId.key, '--petname', 'bob']);
    expect(asked).toMatchObject({ repeated: false, resent: false, sent: true });
    // 64 throwaway knocks after it: the relay delivers Bob's route in order, so Alice's is the oldest.
    const knocks = await knock(relay.url, bobId.key, 'cli', MAX_INCOMING);
    // Bob drains them (every pair command does first) while rejecting the last one.
    ok(await bob.cli(['pair', 'reject', knocks.at(-1)!]));

    const status = await bob.json<{ sessions: { session: string; pair_requests: number; pair_requests_dropped: Dropped }[] }>(['status']);
    const cli = status.sessions.find((s) => s.session === 'cli')!;
    expect(cli).toMatchObject({ pair_requests: MAX_INCOMING - 1, pair_requests_dropped: { count: 1 } });
    expect(ok(await bob.cli(['status']))).toMatch(/1 pairing request was dropped since \S+ because the list was full/);

    // pair list says so once: a person saw it, and the count starts again.
    const seen = ok(await bob.cli(['pair', 'list']));
    expect(seen).toMatch(/1 pairing request was dropped since \S+ because the list was full/);
    expect(seen).not.toContain(asked.code);
    const after = await bob.json<Listed & { dropped_requests: Dropped }>(['pair', 'list']);
    expect(after.dropped_requests).toBeNull();
    expect(after.incoming.map((i) => i.key)).not.toContain((await alice.identity()).key);

    // Alice asks again: the same request (the same code) goes to the relay again.
    const human = ok(await alice.cli(['pair', 'request', bobId.key, '--petname', 'bob']));
    expect(human).toContain('Asked again');
    expect(human).toContain(`Verification code: ${asked.code}`);
    const listed = await bob.json<Listed & { dropped_requests: Dropped }>(['pair', 'list']);
    const aliceId = await alice.identity();
    expect(listed.incoming).toContainEqual(expect.objectContaining({ key: aliceId.key, code: asked.code }));
    // The rejected knock left room: nothing else was dropped.
    expect(listed.dropped_requests).toBeNull();
    expect(listed.incoming).toHaveLength(MAX_INCOMING);
    ok(await bob.cli(['pair', 'accept', aliceId.fingerprint, '--petname', 'alice']));
    expect(await bob.peers()).toEqual({ alice: { key: aliceId.key } });
  });
});

describe('pair accept of a peer who already was', () => {
  it('says it already was, exit 0, and --json says already_peer', async () => {
    const relay = await startRelay();
    const alice = person(root, 'alice', relay.url);
    const bob = person(root, 'bob', relay.url);
    ok(await bob.cli(['pair', 'list']));
    const bobId = await bob.identity();
    const aliceId = await alice.json<{ key: string; fingerprint: string }>(['keygen']);
    // Bob has Alice by hand already; Alice (who does not have him) asks to pair.
    ok(await bob.cli(['peers', 'add', 'alice', aliceId.key]));
    const asked = await alice.json<Requested>(['pair', 'request', bobId.key, '--petname', 'bob']);

    const said = ok(await bob.cli(['pair', 'accept', aliceId.fingerprint]));
    expect(said).toContain(`alice (fingerprint ${aliceId.fingerprint}) was already your peer`);
    expect(said).not.toContain('is now a peer');
    expect(said).toContain(`Verification code: ${asked.code}`);
    // Accepting once more: still a peer already, said the same way.
    const again = await bob.json<{ already_peer: boolean; petname: string; state: string }>(['pair', 'accept', aliceId.fingerprint]);
    expect(again).toMatchObject({ already_peer: true, petname: 'alice', state: 'accepted' });
    expect(await bob.peers()).toEqual({ alice: { key: aliceId.key } });

    // A new peer is "now a peer", already_peer false.
    const carol = person(root, 'carol', relay.url);
    const carolId = await carol.json<{ key: string; fingerprint: string }>(['keygen']);
    await carol.json<Requested>(['pair', 'request', bobId.key, '--petname', 'bob']);
    const fresh = await bob.json<{ already_peer: boolean }>(['pair', 'accept', carolId.fingerprint, '--petname', 'carol']);
    expect(fresh.already_peer).toBe(false);
    expect(await bob.peers()).toEqual({ alice: { key: aliceId.key }, carol: { key: carolId.key } });
  });
});

describe('pair request after a relay restart', () => {
  it('says the other identity has no session announcing now and what its person runs, then works once they did', async () => {
    const port = await freePort();
    const keyFile = join(root, 'relay.key');
    const relay = await startRelay({ port, keyFile });
    const alice = person(root, 'alice', relay.url);
    const bob = person(root, 'bob', relay.url);
    ok(await bob.cli(['pair', 'list']));
    const bobId = await bob.identity();
    // The relay restarts (same address and key): its in-memory roster is empty.
    await relay.child.kill('SIGKILL');
    await startRelay({ port, keyFile });

    for (const target of ['bob', bobId.fingerprint]) {
      const byName = failure(await alice.cli(['pair', 'request', target, '--json']));
      expect(byName.code, target).toBe('unknown_target');
      expect(byName.message).toContain('a relay that restarted without a store (--db) has forgotten every announcement');
      expect(byName.message).toContain('`interlink-mcp pair list` on their machine');
    }
    const byKey = failure(await alice.cli(['pair', 'request', bobId.key, '--json']));
    expect(byKey.code).toBe('no_route');
    expect(byKey.message).toContain('`interlink-mcp pair list` on their machine');
    const human = await alice.cli(['pair', 'request', 'bob']);
    expect(human.code).toBe(1);
    expect(human.stderr.trimEnd().split('\n')).toHaveLength(1);

    // Bob's person runs pair list: his identity is on the roster again, and the request goes.
    ok(await bob.cli(['pair', 'list']));
    expect(await alice.json<Requested>(['pair', 'request', 'bob'])).toMatchObject({ to: bobId.key, sent: true });
  });
});

describe('a relay with --db that restarts', () => {
  it('keeps its roster: pair request finds the identity that announced before the restart', async () => {
    const port = await freePort();
    const db = join(root, 'relay-db');
    const relay = await startRelay({ port, db });
    const alice = person(root, 'alice', relay.url);
    const bob = person(root, 'bob', relay.url);
    ok(await bob.cli(['pair', 'list']));
    const bobId = await bob.identity();
    // A clean stop (SIGTERM) and a start on the same store: no process of Bob's runs meanwhile.
    await relay.child.kill('SIGTERM');
    await startRelay({ port, db });
    expect(await alice.json<Requested>(['pair', 'request', 'bob'])).toMatchObject({ to: bobId.key, sent: true });
  });
});
