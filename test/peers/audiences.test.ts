/**
 * audiences.json with real files: audiences hold only peers, their names never collide
 * with petnames (either way round) or look like another audience's, the bounds hold,
 * removing a peer takes it out of every audience, a damaged file is described by views
 * and moved aside by writers, and a random run of edits agrees with a plain model.
 */
import fc from 'fast-check';
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { fileState } from '../helpers/fixtures.js';
import { isInterlinkError, type ErrorCode } from '../../src/errors.js';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { generateSigningKey } from '../../src/identity/ed25519.js';
import {
  MAX_AUDIENCES,
  MAX_RECIPIENTS,
  addToAudience,
  audiencesPathOf,
  dropMember,
  effectiveMembers,
  readAudiences,
  removeFromAudience,
} from '../../src/peers/audiences.js';
import { addPeer, checkNotAudience, readPeers, removePeer } from '../../src/peers/peers.js';
import { captureStderr, rejectsWith } from '../helpers/assert.js';

let dir: string;
let peersFile: string;
let audiencesFile: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'interlink-audiences-'));
  peersFile = join(dir, 'peers.json');
  audiencesFile = audiencesPathOf(peersFile);
});

afterEach(async () => {
  vi.restoreAllMocks();
  await rm(dir, { recursive: true, force: true });
});

const newKey = (): string => encodeBase64url(generateSigningKey().publicKey);

async function peers(...petnames: string[]): Promise<void> {
  for (const petname of petnames) await addPeer(peersFile, petname, newKey());
}

async function onDisk(): Promise<unknown> {
  return JSON.parse(await readFile(audiencesFile, 'utf8'));
}

describe('audiences.json edits', () => {
  it('lives beside peers.json', () => {
    expect(audiencesPathOf('/home/u/.config/interlink/peers.json')).toBe('/home/u/.config/interlink/audiences.json');
    expect(audiencesPathOf('/elsewhere/trusted.json')).toBe('/elsewhere/audiences.json');
  });

  it('adds, lists in name order with members sorted, and removes members and whole audiences', async () => {
    await peers('carol', 'alice', 'bob');
    expect(await addToAudience(audiencesFile, peersFile, 'team', ['carol', 'alice'])).toEqual({ name: 'team', added: ['alice', 'carol'], members: ['alice', 'carol'] });
    expect(await addToAudience(audiencesFile, peersFile, 'team', ['bob', 'alice'])).toEqual({ name: 'team', added: ['bob'], members: ['alice', 'bob', 'carol'] });
    expect(await addToAudience(audiencesFile, peersFile, 'ops', ['bob'])).toEqual({ name: 'ops', added: ['bob'], members: ['bob'] });
    expect(await onDisk()).toEqual({ team: ['alice', 'bob', 'carol'], ops: ['bob'] });

    const { table, damage } = await readAudiences(audiencesFile);
    expect(damage).toBeUndefined();
    expect(table.audiences).toEqual([
      { name: 'ops', members: ['bob'] },
      { name: 'team', members: ['alice', 'bob', 'carol'] },
    ]);
    expect(table.membersOf('team')).toEqual(['alice', 'bob', 'carol']);
    expect(table.membersOf('nobody')).toBeUndefined();

    expect(await removeFromAudience(audiencesFile, 'team', ['carol'])).toEqual({ name: 'team', removed: ['carol'], members: ['alice', 'bob'] });
    expect(await removeFromAudience(audiencesFile, 'ops', ['bob'])).toEqual({ name: 'ops', removed: ['bob'], members: [] });
    expect(await onDisk()).toEqual({ team: ['alice', 'bob'] });
    expect(await removeFromAudience(audiencesFile, 'team')).toEqual({ name: 'team', removed: ['alice', 'bob'], members: [] });
    expect(await onDisk()).toEqual({});
    expect((await readdir(dir)).sort()).toEqual(['audiences.json', 'peers.json']);
  });

  it('reads a missing file as no audiences and creates nothing', async () => {
    const { table, damage } = await readAudiences(audiencesFile);
    expect(table.audiences).toEqual([]);
    expect(damage).toBeUndefined();
    expect(await readdir(dir)).toEqual([]);
  });

  it('adding members already there changes nothing, not even the inode', async () => {
    await peers('alice', 'bob');
    await addToAudience(audiencesFile, peersFile, 'team', ['alice', 'bob']);
    const before = await fileState(audiencesFile);
    expect(await addToAudience(audiencesFile, peersFile, 'team', ['bob', 'bob'])).toEqual({ name: 'team', added: [], members: ['alice', 'bob'] });
    expect(await fileState(audiencesFile)).toEqual(before);
  });

  it('refuses a member that is not a peer now, or "self", and leaves the file alone', async () => {
    await peers('alice');
    await rejectsWith(addToAudience(audiencesFile, peersFile, 'team', ['alice', 'mallory']), 'unknown_peer');
    expect(await readdir(dir)).toEqual(['peers.json']);
    await addToAudience(audiencesFile, peersFile, 'team', ['alice']);
    const before = await fileState(audiencesFile);
    const err = await rejectsWith(addToAudience(audiencesFile, peersFile, 'team', ['mallory']), 'unknown_peer');
    expect(err.message).toBe('no peer is called mallory; an audience holds only peers (see `interlink-mcp peers list`)');
    expect((await rejectsWith(addToAudience(audiencesFile, peersFile, 'team', ['self']), 'bad_name')).message).toContain('"self" cannot be a member');
    await rejectsWith(addToAudience(audiencesFile, peersFile, 'team', []), 'usage');
    expect(await fileState(audiencesFile)).toEqual(before);
  });

  it('refuses an unknown audience, a member it does not hold, and an empty list to remove', async () => {
    await rejectsWith(removeFromAudience(audiencesFile, 'team'), 'unknown_audience');
    await peers('alice', 'bob');
    await addToAudience(audiencesFile, peersFile, 'team', ['alice']);
    const before = await fileState(audiencesFile);
    expect((await rejectsWith(removeFromAudience(audiencesFile, 'team', ['bob']), 'unknown_audience')).message).toBe('bob is not a member of team');
    expect((await rejectsWith(removeFromAudience(audiencesFile, 'ops'), 'unknown_audience')).message).toContain('no audience is called ops');
    await rejectsWith(removeFromAudience(audiencesFile, 'team', []), 'usage');
    expect(await fileState(audiencesFile)).toEqual(before);
  });

  const badNames: Array<[string, string]> = [
    ['a parent directory', '../x'],
    ['a slash', 'a/b'],
    ['a control character', 'a\u001bb'],
    ['a zero-width character', 'te\u200bam'],
    ['129 bytes', 'x'.repeat(129)],
    ['empty', ''],
    ['the reserved word self', 'self'],
  ];

  it.each(badNames)('refuses an audience name with %s', async (_what, name) => {
    await peers('alice');
    await rejectsWith(addToAudience(audiencesFile, peersFile, name, ['alice']), 'bad_name');
    expect(await readdir(dir)).toEqual(['peers.json']);
  });

  it('stores a name in NFC and finds it as typed either way', async () => {
    await peers('alice');
    const decomposed = 'e\u0301quipe';
    expect((await addToAudience(audiencesFile, peersFile, decomposed, ['alice'])).name).toBe('\u00e9quipe');
    expect(await onDisk()).toEqual({ '\u00e9quipe': ['alice'] });
    expect((await removeFromAudience(audiencesFile, decomposed)).name).toBe('\u00e9quipe');
  });
});

describe('one namespace for petnames and audience names', () => {
  it('refuses an audience named like a peer, or looking like one, or like another audience', async () => {
    await peers('bob', 'alice');
    await addToAudience(audiencesFile, peersFile, 'team', ['alice']);
    const before = await fileState(audiencesFile);
    const cases: Array<[string, string]> = [
      ['bob', "is already your peer's petname"],
      ['Bob', 'looks the same as your peer "bob"'],
      ['b0b', 'looks the same as your peer "bob"'],
      ['Team', 'looks the same as your audience "team"'],
      ['t\u0435am', 'looks the same as your audience "team"'],
    ];
    for (const [name, words] of cases) {
      const err = await rejectsWith(addToAudience(audiencesFile, peersFile, name, ['alice']), 'audience_conflict');
      expect(err.message, name).toContain(words);
    }
    expect(await fileState(audiencesFile)).toEqual(before);
  });

  it('refuses a petname that names an audience or looks like one (peers add, pairing and add_peer alike)', async () => {
    await peers('alice');
    await addToAudience(audiencesFile, peersFile, 'team', ['alice']);
    const before = await fileState(peersFile);
    const exact = await rejectsWith(addPeer(peersFile, 'team', newKey()), 'peer_conflict');
    expect(exact.message).toBe('petname "team" names your audience "team"; choose another petname, or remove the audience first');
    const lookalike = await rejectsWith(addPeer(peersFile, 'TEAM', newKey()), 'peer_conflict');
    expect(lookalike.message).toContain('looks the same as your audience "team"');
    expect(await fileState(peersFile)).toEqual(before);
    // What pair request checks before it asks (the accept would be refused otherwise).
    await rejectsWith(checkNotAudience(peersFile, 't\u0435am'), 'peer_conflict');
    await expect(checkNotAudience(peersFile, 'carol')).resolves.toBeUndefined();
    await removeFromAudience(audiencesFile, 'team');
    expect((await addPeer(peersFile, 'team', newKey())).outcome).toBe('added');
  });

  it('adds peers as before when audiences.json is damaged (it names no audience until restored)', async () => {
    await writeFile(audiencesFile, '{ not json');
    expect((await addPeer(peersFile, 'team', newKey())).outcome).toBe('added');
    expect(await readFile(audiencesFile, 'utf8')).toBe('{ not json');
  });
});

describe('bounds', () => {
  it(`holds at most ${MAX_RECIPIENTS} members in an audience`, async () => {
    const names = Array.from({ length: MAX_RECIPIENTS + 1 }, (_, i) => `p${String(i).padStart(2, '0')}`);
    await writeFile(peersFile, JSON.stringify(Object.fromEntries(names.map((n) => [n, { key: newKey() }]))));
    const full = await addToAudience(audiencesFile, peersFile, 'all', names.slice(0, MAX_RECIPIENTS));
    expect(full.members).toHaveLength(MAX_RECIPIENTS);
    const err = await rejectsWith(addToAudience(audiencesFile, peersFile, 'all', [names[MAX_RECIPIENTS]!]), 'audience_full');
    expect(err.message).toBe(`all would hold ${MAX_RECIPIENTS + 1} members, more than the ${MAX_RECIPIENTS} one send reaches`);
    await rejectsWith(addToAudience(audiencesFile, peersFile, 'many', names), 'audience_full');
    expect(Object.keys(await onDisk() as object)).toEqual(['all']);
  });

  it(`holds at most ${MAX_AUDIENCES} audiences`, async () => {
    await peers('alice');
    // Names far apart in look, so no lookalike refusal stands in for the bound.
    const names = Array.from({ length: MAX_AUDIENCES }, (_, i) => `a${i.toString(36)}x${i}`);
    await writeFile(audiencesFile, JSON.stringify(Object.fromEntries(names.map((n) => [n, ['alice']]))));
    const err = await rejectsWith(addToAudience(audiencesFile, peersFile, 'one-more', ['alice']), 'audience_full');
    expect(err.message).toBe(`there are already ${MAX_AUDIENCES} audiences, the most allowed (${MAX_AUDIENCES}); remove one first`);
    // An existing audience still takes members.
    await peers('bob');
    expect((await addToAudience(audiencesFile, peersFile, names[0]!, ['bob'])).added).toEqual(['bob']);
  });
});

describe('removing a peer', () => {
  it('takes it out of every audience, and an audience left empty goes', async () => {
    await peers('alice', 'bob');
    await addToAudience(audiencesFile, peersFile, 'team', ['alice', 'bob']);
    await addToAudience(audiencesFile, peersFile, 'solo', ['bob']);
    await addToAudience(audiencesFile, peersFile, 'other', ['alice']);
    const removed = await removePeer(peersFile, 'bob');
    expect(removed).toEqual({ key: expect.any(String), audiences: ['solo', 'team'] });
    expect(await onDisk()).toEqual({ team: ['alice'], other: ['alice'] });
    expect(await dropMember(audiencesFile, 'bob')).toEqual({ audiences: [] });
  });

  it('touches nothing beside peers.json when the peer is in no audience, or there are none', async () => {
    await peers('alice', 'bob');
    expect(await removePeer(peersFile, 'alice')).toEqual({ key: expect.any(String) });
    expect(await readdir(dir)).toEqual(['peers.json']);
    await addToAudience(audiencesFile, peersFile, 'team', ['bob']);
    await peers('carol');
    const before = await fileState(audiencesFile);
    await removePeer(peersFile, 'carol');
    expect(await fileState(audiencesFile)).toEqual(before);
  });

  it('cut short after peers.json: the member is absent to readers, and a new peer of that petname does not inherit it', async () => {
    await peers('alice', 'bob');
    await addToAudience(audiencesFile, peersFile, 'team', ['alice', 'bob']);
    // What a process that died between the two writes of removePeer leaves.
    const stale = { ...(JSON.parse(await readFile(peersFile, 'utf8')) as Record<string, unknown>) };
    delete stale.bob;
    await writeFile(peersFile, JSON.stringify(stale));
    const [{ table }, { table: peerTable }] = await Promise.all([readAudiences(audiencesFile), readPeers(peersFile)]);
    expect(table.membersOf('team')).toEqual(['alice', 'bob']);
    expect(effectiveMembers(table, peerTable).membersOf('team')).toEqual(['alice']);
    await addPeer(peersFile, 'bob', newKey());
    expect(await onDisk()).toEqual({ team: ['alice'] });
  });
});

describe('a damaged audiences.json', () => {
  const damaged: Array<[string, string, string]> = [
    ['not JSON', '{"team" ["bob"]}', 'line 1: not valid JSON'],
    ['a petname where a list belongs', '{"team": "bob"}', 'expected a list of petnames for "team", found a string; write it as {"team": ["<petname>", …]}'],
    ['a number among the members', '{"team": ["bob", 7]}', '"team" lists a number where a petname belongs'],
    ['a member twice', '{"team": ["bob", "bob"]}', '"team" lists "bob" twice'],
    ['"self" as a member', '{"team": ["self"]}', '"team" lists the petname "self": "self" is reserved for your own sessions'],
    ['an unsafe name', '{"../team": ["bob"]}', 'audience "../team": it contains ".."'],
    ['too many members', JSON.stringify({ team: Array.from({ length: MAX_RECIPIENTS + 1 }, (_, i) => `p${i}`) }), `"team" has ${MAX_RECIPIENTS + 1} members, more than the ${MAX_RECIPIENTS} one send reaches`],
    ['an array', '[]', 'expected an object'],
  ];

  it.each(damaged)('with %s is described by readers and left in place', async (_what, text, problem) => {
    await writeFile(audiencesFile, text);
    const { table, damage } = await readAudiences(audiencesFile);
    expect(table.audiences).toEqual([]);
    expect(damage?.problem).toContain(problem);
    expect(damage?.message).toContain(`${audiencesFile} is damaged`);
    expect(damage?.message).toContain('left as it is');
    expect(await readFile(audiencesFile, 'utf8')).toBe(text);
  });

  it('is moved aside by a writer, reported, and a fresh file started', async () => {
    await peers('alice');
    await writeFile(audiencesFile, '{"team": "alice"}');
    const logged = captureStderr();
    const result = await addToAudience(audiencesFile, peersFile, 'team', ['alice']);
    expect(result.recovered?.movedTo).toMatch(/audiences\.json\.corrupt-/);
    expect(await readFile(result.recovered!.movedTo, 'utf8')).toBe('{"team": "alice"}');
    expect(await onDisk()).toEqual({ team: ['alice'] });
    expect(logged.join('')).toContain('store_corrupt');
  });

  it('refuses an add while peers.json is damaged (no member can be checked)', async () => {
    await writeFile(peersFile, '{ not json');
    await rejectsWith(addToAudience(audiencesFile, peersFile, 'team', ['alice']), 'corrupt');
    expect(await readdir(dir)).toEqual(['peers.json']);
  });
});

/** Edits as a person makes them, and what a plain model of the two files says must follow. */
type Op =
  | { kind: 'addPeer'; petname: string }
  | { kind: 'removePeer'; petname: string }
  | { kind: 'add'; audience: string; petnames: string[] }
  | { kind: 'remove'; audience: string; petnames?: string[] };

const PETNAMES = ['ann', 'ben', 'cat', 'dan'];
/** `ann` also names a peer: the conflict both ways is part of the run. */
const AUDIENCE_NAMES = ['team', 'ops', 'ann'];

const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant('addPeer' as const), petname: fc.constantFrom(...PETNAMES) }),
  fc.record({ kind: fc.constant('removePeer' as const), petname: fc.constantFrom(...PETNAMES) }),
  fc.record({ kind: fc.constant('add' as const), audience: fc.constantFrom(...AUDIENCE_NAMES), petnames: fc.uniqueArray(fc.constantFrom(...PETNAMES), { minLength: 1, maxLength: 3 }) }),
  fc.record({ kind: fc.constant('remove' as const), audience: fc.constantFrom(...AUDIENCE_NAMES), petnames: fc.option(fc.uniqueArray(fc.constantFrom(...PETNAMES), { minLength: 1, maxLength: 2 }), { nil: undefined }) }),
);

interface Model {
  peers: Set<string>;
  audiences: Map<string, Set<string>>;
}

/** The code the model expects, after applying the op when it succeeds. */
function applyToModel(model: Model, op: Op): ErrorCode | undefined {
  switch (op.kind) {
    case 'addPeer':
      if (model.audiences.has(op.petname)) return 'peer_conflict';
      model.peers.add(op.petname);
      return undefined;
    case 'removePeer':
      if (!model.peers.delete(op.petname)) return 'unknown_peer';
      for (const [name, members] of model.audiences) {
        members.delete(op.petname);
        if (members.size === 0) model.audiences.delete(name);
      }
      return undefined;
    case 'add': {
      if (op.petnames.some((p) => !model.peers.has(p))) return 'unknown_peer';
      if (!model.audiences.has(op.audience) && model.peers.has(op.audience)) return 'audience_conflict';
      const members = model.audiences.get(op.audience) ?? new Set<string>();
      for (const p of op.petnames) members.add(p);
      model.audiences.set(op.audience, members);
      return undefined;
    }
    case 'remove': {
      const members = model.audiences.get(op.audience);
      if (members === undefined) return 'unknown_audience';
      if (op.petnames?.some((p) => !members.has(p))) return 'unknown_audience';
      for (const p of op.petnames ?? [...members]) members.delete(p);
      if (members.size === 0) model.audiences.delete(op.audience);
      return undefined;
    }
  }
}

function run(op: Op, files: { peers: string; audiences: string }, keys: ReadonlyMap<string, string>): Promise<unknown> {
  switch (op.kind) {
    case 'addPeer':
      return addPeer(files.peers, op.petname, keys.get(op.petname)!);
    case 'removePeer':
      return removePeer(files.peers, op.petname);
    case 'add':
      return addToAudience(files.audiences, files.peers, op.audience, op.petnames);
    case 'remove':
      return removeFromAudience(files.audiences, op.audience, op.petnames);
  }
}

describe('a run of edits', () => {
  it('agrees with a model of peers and audiences after every step', async () => {
    const keys = new Map(PETNAMES.map((p) => [p, newKey()]));
    let round = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { minLength: 1, maxLength: 24 }), async (ops) => {
        const files = { peers: join(dir, `r${round}`, 'peers.json'), audiences: join(dir, `r${round}`, 'audiences.json') };
        round++;
        await mkdir(join(dir, `r${round - 1}`));
        const model: Model = { peers: new Set(), audiences: new Map() };
        for (const op of ops) {
          const expected = applyToModel(model, op);
          const outcome = await run(op, files, keys).then(
            () => undefined,
            (err: unknown) => (isInterlinkError(err) ? err.code : err),
          );
          expect(outcome, JSON.stringify(op)).toBe(expected);
          const [{ table, damage }, { table: peerTable }] = await Promise.all([readAudiences(files.audiences), readPeers(files.peers)]);
          expect(damage).toBeUndefined();
          expect(peerTable.peers.map((p) => p.petname).sort()).toEqual([...model.peers].sort());
          const want = [...model.audiences].map(([name, members]) => ({ name, members: [...members].sort() })).sort((a, b) => a.name.localeCompare(b.name));
          expect(table.audiences).toEqual(want);
          expect(effectiveMembers(table, peerTable).audiences).toEqual(want);
        }
      }),
      { numRuns: 40 },
    );
  }, 120_000);
});
