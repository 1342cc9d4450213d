/** The relay's presence roster with an injected clock: verification, newest wins, goodbyes, expiry, eviction. */
import { describe, expect, it } from 'vitest';
import { generateSigningKey, type SigningKey } from '../../src/identity/ed25519.js';
import { signAnnouncement, signGoodbye } from '../../src/presence/announcement.js';
import { Roster, ROSTER_MAX_BYTES, ROSTER_MAX_ENTRIES, ROSTER_RETAIN_MS } from '../../src/relay/roster.js';

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
    const roster = new Roster(() => now, { maxEntries: 3, retainMs: ROSTER_RETAIN_MS, maxBytes: ROSTER_MAX_BYTES });
    for (const session of ['a', 'b', 'c']) {
      now++;
      roster.announce(announce(key, session, 1));
    }
    now++;
    roster.announce(announce(key, 'a', 2)); // heard again: now the freshest
    now++;
    roster.announce(announce(key, 'd', 1));
    expect(roster.list().map((e) => e.announcement.session)).toEqual(['d', 'a', 'c']);
    expect(ROSTER_MAX_ENTRIES).toBe(4096);
  });
});

function encodeOther(): string {
  return signAnnouncement(generateSigningKey(), { name: 'x', session: 's', cwd: '', git_root: '', summary: '', ts: 1 }).key;
}
