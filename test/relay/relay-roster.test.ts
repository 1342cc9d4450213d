/** The relay's presence roster with an injected clock: verification, newest wins, goodbyes, expiry, eviction, and queries by key, fingerprint and name against a model. */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { generateSigningKey, type SigningKey } from '../../src/identity/ed25519.js';
import { fingerprintOf } from '../../src/identity/identity.js';
import { signAnnouncement, signAnnouncementV2, signAnnouncementV3, signGoodbye } from '../../src/presence/announcement.js';
import { nameBucket, sealDetails } from '../../src/presence/private.js';
import { MAX_SESSIONS_PER_KEY, namesAnything } from '../../src/relay/roster-index.js';
import { Roster, ROSTER_RETAIN_MS, rosterLimits } from '../../src/relay/roster.js';

function announce(key: SigningKey, session: string, ts: number, summary = 'working') {
  return signAnnouncement(key, { name: 'agent', session, cwd: '/repo', git_root: '/repo', summary, ts });
}

function clocked(start = 10_000): { roster: Roster; advance: (ms: number) => void } {
  let now = start;
  return { roster: new Roster(() => now), advance: (ms) => (now += ms) };
}

describe('roster', () => {
  const key = generateSigningKey();

  it('keeps a verified announcement with its age, and refuses a forged or malformed one', () => {
    const { roster, advance } = clocked();
    const a = announce(key, 's', 1);
    expect(roster.announce(a)).toBe('stored');
    advance(1234);
    expect(roster.list()).toEqual([{ announcement: a, age_ms: 1234 }]);
    expect(roster.announce({ ...a, summary: 'changed' })).toBe('invalid');
    expect(roster.announce({ ...a, key: encodeOther() })).toBe('invalid');
    expect(roster.announce('not an announcement')).toBe('invalid');
    expect(roster.list()).toHaveLength(1);
  });

  it('keeps the newest announcement per key and session', () => {
    const { roster } = clocked();
    const older = announce(key, 's', 1, 'older');
    const newer = announce(key, 's', 2, 'newer');
    const otherSession = announce(key, 't', 1);
    expect(roster.announce(newer)).toBe('stored');
    expect(roster.announce(older)).toBe('older');
    expect(roster.announce(otherSession)).toBe('stored');
    expect(roster.list().map((e) => e.announcement)).toEqual([otherSession, newer]);
  });

  it('removes an entry on a goodbye at least as new, and a replayed announcement cannot return it', () => {
    const { roster } = clocked();
    const a = announce(key, 's', 10);
    roster.announce(a);
    expect(roster.goodbye(signGoodbye(key, 's', 9))).toBe('noted');
    expect(roster.list()).toHaveLength(1);
    expect(roster.goodbye({ ...signGoodbye(key, 's', 10), ts: 11 })).toBe('invalid');
    expect(roster.goodbye(signGoodbye(key, 's', 10))).toBe('removed');
    expect(roster.list()).toEqual([]);
    expect(roster.announce(a)).toBe('older');
    expect(roster.announce(announce(key, 's', 11))).toBe('stored');
    expect(roster.list()).toHaveLength(1);
  });

  it('expires entries silent for three days', () => {
    const { roster, advance } = clocked();
    roster.announce(announce(key, 's', 1));
    advance(ROSTER_RETAIN_MS - 1);
    expect(roster.list()).toHaveLength(1);
    roster.announce(announce(key, 't', 1));
    advance(1);
    expect(roster.list().map((e) => e.announcement.session)).toEqual(['t']);
    advance(ROSTER_RETAIN_MS);
    expect(roster.list()).toEqual([]);
  });

  it('evicts the stalest entry beyond its bound', () => {
    let now = 0;
    const roster = new Roster(() => now, { maxEntries: 3, retainMs: ROSTER_RETAIN_MS, maxBytes: 1 << 20 });
    for (const session of ['a', 'b', 'c']) {
      now++;
      roster.announce(announce(key, session, 1));
    }
    now++;
    roster.announce(announce(key, 'a', 2)); // heard again: now the freshest
    now++;
    roster.announce(announce(key, 'd', 1));
    expect(roster.list().map((e) => e.announcement.session)).toEqual(['d', 'a', 'c']);
    // The evicted session is found by no query either.
    expect(roster.query({ keys: [key.publicKey.toString('base64url')] }).map((e) => e.announcement.session)).toEqual(['d', 'a', 'c']);
  });

  it('grows its bound with the connections the relay may hold: no ceiling below them', () => {
    expect(rosterLimits(1024).maxEntries).toBe(4096);
    expect(rosterLimits(20_000)).toMatchObject({ maxEntries: 80_000, maxBytes: 80_000 * 2048 });
    expect(rosterLimits(20_000, 500).maxEntries).toBe(500);
  });
});

describe('roster queries', () => {
  const keys = [generateSigningKey(), generateSigningKey(), generateSigningKey()];
  const text = (k: SigningKey) => k.publicKey.toString('base64url');

  it('answer the sessions of the keys, fingerprints and name bucket asked for, freshest first, and nothing else', () => {
    const { roster, advance } = clocked();
    for (const session of ['a', 'b']) {
      advance(10);
      roster.announce(announce(keys[0]!, session, 1));
    }
    roster.announce(announce(keys[1]!, 'x', 1));
    // Version 3: the name is sealed, and its bucket announced; version 2 has no bucket.
    const ts = 5;
    const sealed = (session: string) => sealDetails(keys[2]!, session, ts, { name: 'carol', cwd: '/c', git_root: '', summary: '' }, []);
    roster.announce(signAnnouncementV3(keys[2]!, { session: 'v3', ts, ...sealed('v3'), name_bucket: nameBucket('carol') }));
    roster.announce(signAnnouncementV2(keys[2]!, { session: 'v2', ts, ...sealed('v2') }));
    const sessions = (q: Parameters<Roster['query']>[0]) => roster.query(q).map((e) => `${e.announcement.key.slice(0, 4)}#${e.announcement.session}`);
    const short = (k: SigningKey, s: string) => `${text(k).slice(0, 4)}#${s}`;
    expect(sessions({ keys: [text(keys[0]!)] })).toEqual([short(keys[0]!, 'b'), short(keys[0]!, 'a')]);
    expect(sessions({ fingerprints: [fingerprintOf(keys[1]!.publicKey)] })).toEqual([short(keys[1]!, 'x')]);
    expect(sessions({ name_bucket: nameBucket('carol') })).toEqual([short(keys[2]!, 'v3')]);
    expect(sessions({ name_bucket: (nameBucket('carol') + 1) % 4096 })).toEqual([]);
    expect(sessions({ keys: [text(keys[2]!)] }).sort()).toEqual([short(keys[2]!, 'v2'), short(keys[2]!, 'v3')].sort());
    expect(sessions({ keys: [text(generateSigningKey())] })).toEqual([]);
    roster.goodbye(signGoodbye(keys[1]!, 'x', 2));
    expect(sessions({ keys: [text(keys[1]!)] })).toEqual([]);
    expect([namesAnything({}), namesAnything({ name_bucket: 0 })]).toEqual([false, true]);
  });

  it(`answer at most ${MAX_SESSIONS_PER_KEY} sessions of one key, its freshest`, () => {
    const { roster, advance } = clocked();
    for (let i = 0; i < MAX_SESSIONS_PER_KEY + 5; i++) {
      advance(1);
      roster.announce(announce(keys[0]!, `s${i}`, 1));
    }
    const answer = roster.query({ keys: [text(keys[0]!)] });
    expect(answer).toHaveLength(MAX_SESSIONS_PER_KEY);
    expect(answer[0]!.announcement.session).toBe(`s${MAX_SESSIONS_PER_KEY + 4}`);
  });

  it('find what a filter over every entry finds, through announcements, goodbyes, expiry and eviction', () => {
    const step = fc.oneof(
      fc.record({ kind: fc.constant('announce' as const), k: fc.nat(2), s: fc.nat(2), ts: fc.nat(3) }),
      fc.record({ kind: fc.constant('goodbye' as const), k: fc.nat(2), s: fc.nat(2), ts: fc.nat(3) }),
      fc.record({ kind: fc.constant('advance' as const), ms: fc.constantFrom(1, ROSTER_RETAIN_MS / 2) }),
    );
    fc.assert(
      fc.property(fc.array(step, { maxLength: 30 }), fc.integer({ min: 1, max: 9 }), (steps, maxEntries) => {
        let now = 1;
        const roster = new Roster(() => now, { maxEntries, retainMs: ROSTER_RETAIN_MS, maxBytes: 1 << 20 });
        for (const st of steps) {
          if (st.kind === 'advance') now += st.ms;
          else if (st.kind === 'announce') roster.announce(announce(keys[st.k]!, ['a', 'b', 'c'][st.s]!, st.ts));
          else roster.goodbye(signGoodbye(keys[st.k]!, ['a', 'b', 'c'][st.s]!, st.ts));
          const all = roster.list();
          for (const k of keys) {
            // The same sessions (in any order among those heard at the same time).
            const expected = all.filter((e) => e.announcement.key === text(k)).map((e) => e.announcement.session).sort();
            expect(roster.query({ keys: [text(k)] }).map((e) => e.announcement.session).sort()).toEqual(expected);
            expect(roster.query({ fingerprints: [fingerprintOf(k.publicKey)] }).map((e) => e.announcement.session).sort()).toEqual(expected);
          }
        }
      }),
      { numRuns: 200, seed: 383 },
    );
  });
});

function encodeOther(): string {
  return signAnnouncement(generateSigningKey(), { name: 'x', session: 's', cwd: '', git_root: '', summary: '', ts: 1 }).key;
}
