/**
 * resolveTarget (src/pairing/target.ts) in small exhaustive tables: which identity a
 * target names (full key, fingerprint in any spelling, or an unambiguous roster name),
 * and which of its sessions gets the request (live before away, freshest first).
 */
import { describe, expect, it } from 'vitest';
import { throwsWith } from '../helpers/assert.js';
import { resolveTarget, type RosterView } from '../../src/pairing/target.js';
import { newIdentity } from '../helpers/fixtures.js';

const me = newIdentity(10);
const bob = newIdentity(11);
const carol = newIdentity(12);
const dave = newIdentity(13); // never on the roster

function entry(who: { key: string }, session: string, name: string, state: 'live' | 'away', age_ms: number): RosterView {
  return { key: who.key, session, name, state, age_ms, named: (asked) => asked === name };
}

/** A stranger's session as sealed presence shows it: no name to read, only one to test (presence/private.ts). */
function sealedEntry(who: { key: string }, session: string, name: string, state: 'live' | 'away', age_ms: number): RosterView {
  return { key: who.key, session, state, age_ms, named: (asked) => asked === name };
}

/** Every way a person may type a fingerprint. */
function spellings(fingerprint: string): string[] {
  const bare = fingerprint.replaceAll('-', '');
  return [fingerprint, fingerprint.toUpperCase(), bare, bare.toUpperCase(), ` ${fingerprint} `, `${bare.slice(0, 8)}-${bare.slice(8)}`];
}

describe('resolveTarget: which identity', () => {
  const roster: RosterView[] = [
    entry(me, 'm1', 'me', 'live', 1),
    entry(bob, 'b-away', 'bob', 'away', 5),
    entry(bob, 'b-live-old', 'bob', 'live', 900),
    entry(bob, 'b-live-new', 'bob-laptop', 'live', 30),
    entry(carol, 'c1', 'carol', 'away', 40),
  ];

  it('resolves a full key, a fingerprint in any spelling, and a unique name to the same identity', () => {
    // `by` says how the person named it: only a roster name needs a confirm later.
    const by = (target: string, key: string) => (target === key ? 'key' : ['bob', 'bob-laptop', 'carol'].includes(target) ? 'name' : 'fingerprint');
    const targets = [bob.key, ...spellings(bob.fingerprint), 'bob', 'bob-laptop'];
    for (const target of targets) {
      expect(resolveTarget(target, roster, me.key), target).toEqual({ key: bob.key, session: 'b-live-new', name: 'bob-laptop', by: by(target, bob.key) });
    }
    for (const target of [carol.key, ...spellings(carol.fingerprint), 'carol']) {
      expect(resolveTarget(target, roster, me.key), target).toEqual({ key: carol.key, session: 'c1', name: 'carol', by: by(target, carol.key) });
    }
  });

  it('finds a stranger by the name it announces without reading it, and returns no name it could not read', () => {
    const sealed = [sealedEntry(bob, 'b1', 'bob', 'live', 10), sealedEntry(carol, 'c1', 'carol', 'live', 20)];
    expect(resolveTarget('bob', sealed, me.key)).toEqual({ key: bob.key, session: 'b1', by: 'name' });
    expect(resolveTarget(carol.key, sealed, me.key)).toEqual({ key: carol.key, session: 'c1', by: 'key' });
    throwsWith(() => resolveTarget('dave', sealed, me.key), 'unknown_target');
  });

  it('refuses a full key that is not on any roster with no_route', () => {
    const err = throwsWith(() => resolveTarget(dave.key, roster, me.key), 'no_route');
    expect(err.message).toContain('no session');
  });

  it('refuses an unknown fingerprint or name with unknown_target', () => {
    for (const target of [...spellings(dave.fingerprint), 'dave', 'Bob', 'bob ', '', `${bob.fingerprint}0`, bob.key.slice(0, 40)]) {
      throwsWith(() => resolveTarget(target, roster, me.key), 'unknown_target');
    }
  });

  it('refuses this identity itself by key, fingerprint or name', () => {
    for (const target of [me.key, ...spellings(me.fingerprint), 'me']) {
      const err = throwsWith(() => resolveTarget(target, roster, me.key), 'unknown_target');
      expect(err.message).toContain('this identity');
    }
  });

  it('says, when nobody matches, that a restarted relay may have forgotten them and what their person runs', () => {
    const none = throwsWith(() => resolveTarget('dave', [], me.key), 'unknown_target');
    expect(none.message).toContain('no identity on the relay rosters matches "dave" now');
    expect(none.message).toContain('`interlink-mcp pair list` on their machine');
    expect(throwsWith(() => resolveTarget(dave.key, [], me.key), 'no_route').message).toContain('a relay that restarted');
  });

  it('refuses this identity by key even when it is on no roster', () => {
    throwsWith(() => resolveTarget(me.key, [], me.key), 'unknown_target');
  });

  it('refuses a name two identities announce, listing both fingerprints, and accepts their keys', () => {
    const shared = [entry(bob, 'b1', 'sam', 'live', 10), entry(carol, 'c1', 'sam', 'live', 20), entry(carol, 'c2', 'sam', 'away', 1)];
    const err = throwsWith(() => resolveTarget('sam', shared, me.key), 'ambiguous_target');
    expect(err.message).toContain(bob.fingerprint);
    expect(err.message).toContain(carol.fingerprint);
    expect(err.message).toContain('full public key');
    expect(resolveTarget(bob.key, shared, me.key)).toEqual({ key: bob.key, session: 'b1', name: 'sam', by: 'key' });
    expect(resolveTarget(carol.fingerprint, shared, me.key)).toEqual({ key: carol.key, session: 'c1', name: 'sam', by: 'fingerprint' });
  });

  it('accepts a name that several sessions of one identity announce', () => {
    const one = [entry(bob, 'b1', 'sam', 'away', 1), entry(bob, 'b2', 'sam', 'live', 50), entry(bob, 'b3', 'sam', 'live', 20)];
    expect(resolveTarget('sam', one, me.key)).toEqual({ key: bob.key, session: 'b3', name: 'sam', by: 'name' });
  });

  it('treats a name as exact text', () => {
    const named = [entry(bob, 'b1', 'Sam', 'live', 1)];
    expect(resolveTarget('Sam', named, me.key).key).toBe(bob.key);
    for (const target of ['sam', 'SAM', ' Sam', 'Sa']) throwsWith(() => resolveTarget(target, named, me.key), 'unknown_target');
  });
});

describe('resolveTarget: which session', () => {
  type Row = { label: string; sessions: Array<[string, 'live' | 'away', number]>; session?: string; expected: string | 'no_route' };
  const table: Row[] = [
    { label: 'one live', sessions: [['s1', 'live', 10]], expected: 's1' },
    { label: 'one away', sessions: [['s1', 'away', 10]], expected: 's1' },
    { label: 'live beats a fresher away', sessions: [['away', 'away', 1], ['live', 'live', 1_000_000]], expected: 'live' },
    { label: 'live beats a fresher away, other order', sessions: [['live', 'live', 1_000_000], ['away', 'away', 1]], expected: 'live' },
    { label: 'freshest of several live', sessions: [['l1', 'live', 300], ['l2', 'live', 20], ['l3', 'live', 4000], ['a', 'away', 0]], expected: 'l2' },
    { label: 'freshest of several away', sessions: [['a1', 'away', 300], ['a2', 'away', 20], ['a3', 'away', 4000]], expected: 'a2' },
    { label: 'equal ages keep roster order', sessions: [['first', 'live', 7], ['second', 'live', 7]], expected: 'first' },
    { label: 'explicit live session', sessions: [['l1', 'live', 300], ['l2', 'live', 20]], session: 'l1', expected: 'l1' },
    { label: 'explicit away session although a live one exists', sessions: [['l1', 'live', 1], ['a1', 'away', 900]], session: 'a1', expected: 'a1' },
    { label: 'explicit session absent', sessions: [['l1', 'live', 1]], session: 'gone', expected: 'no_route' },
    { label: 'explicit session only of another identity', sessions: [['l1', 'live', 1]], session: 'c-only', expected: 'no_route' },
    { label: 'no session of the key at all', sessions: [], expected: 'no_route' },
  ];

  for (const row of table) {
    it(row.label, () => {
      const roster = [
        entry(carol, 'c-only', 'carol', 'live', 0),
        ...row.sessions.map(([session, state, age]) => entry(bob, session, `bob@${session}`, state, age)),
        entry(me, 'l1', 'me', 'live', 0),
      ];
      const run = () => resolveTarget(bob.key, roster, me.key, row.session);
      if (row.expected === 'no_route') {
        const err = throwsWith(run, 'no_route');
        if (row.session !== undefined) expect(err.message).toContain(row.session);
      } else {
        expect(run()).toEqual({ key: bob.key, session: row.expected, name: `bob@${row.expected}`, by: 'key' });
      }
    });
  }

  it('resolves the same whichever order the roster lists the sessions in', () => {
    const sessions = [entry(bob, 'a', 'bob', 'away', 1), entry(bob, 'l-old', 'bob', 'live', 99), entry(bob, 'l-new', 'bob', 'live', 3), entry(carol, 'c', 'bob2', 'live', 0)];
    const permutations = (items: RosterView[]): RosterView[][] =>
      items.length <= 1 ? [items] : items.flatMap((item, i) => permutations([...items.slice(0, i), ...items.slice(i + 1)]).map((rest) => [item, ...rest]));
    for (const roster of permutations(sessions)) {
      for (const target of [bob.key, bob.fingerprint, 'bob']) expect(resolveTarget(target, roster, me.key).session).toBe('l-new');
    }
  });

  it('does not reorder the roster it was given', () => {
    const roster = Object.freeze([entry(bob, 'x', 'bob', 'live', 9), entry(bob, 'y', 'bob', 'live', 1)]);
    expect(resolveTarget('bob', roster, me.key).session).toBe('y');
    expect(roster.map((r) => r.session)).toEqual(['x', 'y']);
  });
});
