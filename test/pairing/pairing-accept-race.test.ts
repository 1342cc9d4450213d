/**
 * Pairing.accept (src/pairing/pairing.ts) when the request closes between the read and
 * the commit: a real Pairing on a real PairingStore and peers.json in a temporary
 * directory, with no relays. The store is wrapped so that, right before the accept's
 * commit runs, another transition (a reject, a newer request from the same key, another
 * accept) is applied first, as if another process had won the race. The requester is
 * already in peers.json by then (checked), so what is tested is whether that trust stays.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Identity } from '../../src/identity/identity.js';
import { verificationCode } from '../../src/pairing/code.js';
import { Pairing } from '../../src/pairing/pairing.js';
import { admitRequest, commitAccept, findIncoming, reject, type Change, type ControlJob, type Incoming, type PairingData } from '../../src/pairing/rules.js';
import { PairingStore } from '../../src/pairing/store.js';
import { addPeer, loadPeers, type Peer } from '../../src/peers/peers.js';
import { rejectsWith } from '../helpers/assert.js';
import { newIdentity, tempDir } from '../helpers/fixtures.js';

const T0 = 1_900_000_000_000;
const msgId = (n: number): string => n.toString(16).padStart(32, '0');

const host = newIdentity(31);
const requester = newIdentity(32);
const bystander = newIdentity(33);

/** A request from `from` to the host as receiveRequest builds it: real fingerprint and code. */
function incoming(from: Identity, requestId: string, now: number, ts = now): Incoming {
  return {
    request_id: requestId,
    from: from.key,
    fingerprint: from.fingerprint,
    claimed_name: 'ann',
    session: 'their-session',
    received_at: now,
    code: verificationCode(from.key, host.key, requestId),
    ts,
  };
}

/** A store where one transition can be made to win the race against the next update. */
class RacingStore extends PairingStore {
  private race: ((data: PairingData) => Change<unknown>) | undefined;
  private onRace: (() => Promise<void>) | undefined;
  /** Results of the racing transitions that ran. */
  readonly raced: unknown[] = [];

  /** Before the next update's transition, `transition` is applied (after `observe`, if given). */
  arm(transition: (data: PairingData) => Change<unknown>, observe?: () => Promise<void>): void {
    this.race = transition;
    this.onRace = observe;
  }

  override async update<R>(transition: (data: PairingData) => Change<R>): Promise<R> {
    const race = this.race;
    if (race !== undefined) {
      this.race = undefined;
      await this.onRace?.();
      this.raced.push(await super.update(race));
    }
    return super.update(transition);
  }
}

let dir: { path: string; remove: () => Promise<void> };
let store: RacingStore;
let peersPath: string;
let pairing: Pairing;
const now = T0 + 1000;
const open = incoming(requester, msgId(1), T0);

const peers = async (): Promise<Peer[]> => [...(await loadPeers(peersPath)).table.peers];

/** Arms the race and records peers.json as the accept left it just before its commit. */
function race(transition: (data: PairingData) => Change<unknown>): { seen: Peer[][] } {
  const record = { seen: [] as Peer[][] };
  store.arm(transition, async () => {
    record.seen.push(await peers());
  });
  return record;
}

beforeEach(async () => {
  dir = await tempDir('interlink-accept-race-');
  store = new RacingStore(join(dir.path, 'pairing', 'cli.json'));
  peersPath = join(dir.path, 'config', 'peers.json');
  pairing = new Pairing({ identity: host, session: 'cli', store, peersPath, relays: [], lookup: async () => [], name: 'host', now: () => now });
  // Someone else is a peer already: the undo must leave them alone.
  await addPeer(peersPath, 'bob', bystander.key);
  expect(await store.update((d) => admitRequest(d, open, T0))).toBe('stored');
});

afterEach(async () => {
  // Lets a background control pass (kick) finish before the files go.
  await pairing.flush(0);
  await dir.remove();
});

const bob: Peer = { petname: 'bob', key: bystander.key };
const ann: Peer = { petname: 'ann', key: requester.key };

describe('the petname of an accepted requester', () => {
  it('is never the name it claims: without one from the person, it is made from the fingerprint', async () => {
    const result = await pairing.accept(requester.fingerprint);
    expect(result.petname).toBe(`peer-${requester.fingerprint.slice(0, 9)}`);
    expect(await peers()).toContainEqual({ petname: result.petname, key: requester.key });
    expect((await peers()).some((p) => p.petname === 'ann')).toBe(false);
  });
});

describe('accept when the request closes between the read and the commit', () => {
  it('without a race: adds the peer and queues one pair_accept', async () => {
    const result = await pairing.accept(requester.fingerprint, { petname: 'ann' });
    expect(result).toEqual({ fingerprint: requester.fingerprint, key: requester.key, petname: 'ann', code: open.code, state: 'accepted', confirmation: 'queued', already_peer: false });
    expect(await peers()).toEqual([ann, bob]);
    const data = await store.read();
    expect(data.incoming).toEqual([]);
    expect(data.control).toHaveLength(1);
    expect(data.control[0]).toMatchObject({ kind: 'pair_accept', to: requester.key, session: 'their-session', text: 'host', in_reply_to: open.request_id, created_at: now });
    expect(data.handled).toEqual([expect.objectContaining({ from: requester.key, msg_id: open.request_id, outcome: 'accepted' })]);
    // No relay: the job waits.
    expect(await pairing.flush(0)).toBe(1);
    expect(store.raced).toEqual([]);
  });

  it('rejected meanwhile: throws unknown_request and takes the peer it added out again', async () => {
    const record = race((d) => reject(d, requester.fingerprint, now));
    const err = await rejectsWith(pairing.accept(requester.fingerprint, { petname: 'ann' }), 'unknown_request');
    expect(err.message).toContain('nothing was accepted');
    expect(err.message).toContain(requester.fingerprint);
    // The race ran after the accept had added the requester, and before its commit.
    expect(record.seen).toEqual([[ann, bob]]);
    expect(store.raced).toEqual([open]);
    expect(await peers()).toEqual([bob]);
    const data = await store.read();
    expect(data.incoming).toEqual([]);
    expect(data.control).toEqual([]);
    expect(data.handled).toEqual([expect.objectContaining({ from: requester.key, msg_id: open.request_id, outcome: 'rejected' })]);
  });

  it('replaced meanwhile by a newer request from the same key: throws unknown_request, takes the peer out, and the newer request stays open', async () => {
    const newer = incoming(requester, msgId(2), T0 + 10);
    const record = race((d) => admitRequest(d, newer, T0 + 10));
    const err = await rejectsWith(pairing.accept(requester.fingerprint, { petname: 'ann' }), 'unknown_request');
    expect(err.message).toContain('nothing was accepted');
    expect(record.seen).toEqual([[ann, bob]]);
    expect(store.raced).toEqual(['replaced']);
    expect(await peers()).toEqual([bob]);
    const data = await store.read();
    expect(data.incoming).toEqual([newer]);
    expect(findIncoming(data, requester.fingerprint)).toEqual(newer);
    expect(data.control).toEqual([]);
    expect(data.handled).toEqual([]);
    // A person can now decide on the newer request: accepting it works, under the same petname.
    const result = await pairing.accept(requester.fingerprint, { petname: 'ann' });
    expect(result).toMatchObject({ key: requester.key, petname: 'ann', code: newer.code, state: 'accepted', confirmation: 'queued' });
    expect(await peers()).toEqual([ann, bob]);
    expect((await store.read()).control).toEqual([expect.objectContaining({ kind: 'pair_accept', in_reply_to: newer.request_id })]);
  });

  it('accepted meanwhile by another accept: returns that acceptance and the peer stays', async () => {
    const other: ControlJob = { msg_id: msgId(900), kind: 'pair_accept', to: requester.key, session: open.session, text: 'host', in_reply_to: open.request_id, created_at: now };
    const record = race((d) => commitAccept(d, open, other, now));
    const result = await pairing.accept(requester.fingerprint, { petname: 'ann' });
    // The other accept made it a peer: this one reports that acceptance, a peer already.
    expect(result).toEqual({ fingerprint: requester.fingerprint, key: requester.key, petname: 'ann', code: open.code, state: 'accepted', confirmation: 'queued', already_peer: true });
    expect(record.seen).toEqual([[ann, bob]]);
    expect(store.raced).toEqual([{ queued: true }]);
    expect(await peers()).toEqual([ann, bob]);
    const data = await store.read();
    expect(data.incoming).toEqual([]);
    // Only the other accept's confirmation: this one queued nothing.
    expect(data.control).toEqual([other]);
  });

  for (const petname of ['ann', 'ann-before'] as const) {
    it(`rejected meanwhile while the requester was already a peer (as ${petname}): throws unknown_request and the peer stays`, async () => {
      await addPeer(peersPath, petname, requester.key);
      const before = await peers();
      const record = race((d) => reject(d, requester.fingerprint, now));
      const err = await rejectsWith(pairing.accept(requester.fingerprint), 'unknown_request');
      expect(err.message).toContain('nothing was accepted');
      expect(record.seen).toEqual([before]);
      expect(await peers()).toEqual(before);
      expect(await peers()).toContainEqual({ petname, key: requester.key });
      expect((await store.read()).control).toEqual([]);
    });
  }
});
