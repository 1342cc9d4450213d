/**
 * The pairing commands' manners of issue 37, with the real CLI in child processes and real
 * relay processes: petnames with hidden characters or that look like a peer's are refused
 * before anything is sent or stored.
 */
import { describe, expect, it } from 'vitest';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { generateSigningKey } from '../../src/identity/ed25519.js';
import { person, type Listed, type Requested, pairingWorkspace } from '../helpers/pairing.js';
import { startRelay } from '../helpers/spawn-relay.js';

let root: string;
pairingWorkspace('interlink-pair-manners-', (dir) => (root = dir));

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
