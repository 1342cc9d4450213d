/** The succession rules, over generated registries and mailbox folders, against their statement in words. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  endedAt,
  heirOf,
  INHERIT_MS,
  inheritance,
  MAX_INHERITED,
  processLive,
  STALE_MS,
  viewSessions,
  type MailboxFile,
  type ProcessEntry,
  type SessionEntry,
} from '../../src/succession/rules.js';

const NOW = 1_800_000_000_000;
const names = ['s1', 's2', 's3', 's4', 'cli', 'thread-a'];

const processArb: fc.Arbitrary<ProcessEntry> = fc.record({
  host: fc.constant('h'),
  boot: fc.constant('b'),
  pid: fc.integer({ min: 1, max: 6 }),
  start: fc.constant(''),
  seen_at: fc.integer({ min: NOW - 3 * STALE_MS, max: NOW }),
});
const entryArb: fc.Arbitrary<SessionEntry> = fc.record(
  {
    host: fc.constantFrom('claude' as const, 'codex' as const, 'other' as const),
    started_at: fc.integer({ min: NOW - 20 * 24 * 3_600_000, max: NOW }),
    ended_at: fc.integer({ min: NOW - 20 * 24 * 3_600_000, max: NOW }),
    processes: fc.array(processArb, { maxLength: 3 }),
  },
  { requiredKeys: ['host', 'started_at', 'processes'] },
);
const entriesArb = fc.dictionary(fc.constantFrom(...names), entryArb, { maxKeys: 6 });
const mailboxesArb: fc.Arbitrary<MailboxFile[]> = fc.uniqueArray(
  fc.record({
    session: fc.constantFrom(...names, 'old-1', 'old-2'),
    unread: fc.integer({ min: 0, max: 3 }),
    changed_at: fc.oneof(fc.integer({ min: NOW - 20 * 24 * 3_600_000, max: NOW }), fc.integer({ min: NOW - 2 * STALE_MS, max: NOW })),
  }),
  { selector: (m) => m.session, maxLength: 8 },
);
/** Odd pids are gone, as the OS would say. */
const deadPids = (p: ProcessEntry) => p.pid % 2 === 1;

describe('which sessions are live', () => {
  it('a process is live only while its pid runs and it beat within STALE_MS', () => {
    expect(processLive({ host: 'h', boot: 'b', pid: 2, start: '', seen_at: NOW - STALE_MS + 1 }, false, NOW)).toBe(true);
    expect(processLive({ host: 'h', boot: 'b', pid: 2, start: '', seen_at: NOW - STALE_MS }, false, NOW)).toBe(false);
    expect(processLive({ host: 'h', boot: 'b', pid: 2, start: '', seen_at: NOW }, true, NOW)).toBe(false);
  });

  it('every known session but cli is either live or ended, once; a mailbox without an entry ended when its file changed, once quiet for STALE_MS', () => {
    fc.assert(
      fc.property(entriesArb, mailboxesArb, (entries, mailboxes) => {
        const view = viewSessions({ entries, mailboxes, isDead: deadPids, now: NOW });
        const seen = [...view.live.map((s) => s.session), ...view.ended.map((s) => s.session)];
        const quietUnknown = mailboxes.filter((m) => !(m.session in entries) && NOW - m.changed_at >= STALE_MS).map((m) => m.session);
        const known = new Set([...Object.keys(entries), ...quietUnknown].filter((s) => s !== 'cli'));
        expect(seen.sort()).toEqual([...known].sort());
        for (const s of view.live) {
          expect(entries[s.session]!.processes.some((p) => !deadPids(p) && NOW - p.seen_at < STALE_MS)).toBe(true);
        }
        for (const s of view.ended) {
          const entry = entries[s.session];
          if (entry === undefined) expect(s.ended_at).toBe(mailboxes.find((m) => m.session === s.session)!.changed_at);
          else expect(s.ended_at).toBe(endedAt(entry));
          expect(s.unread).toBe(mailboxes.find((m) => m.session === s.session)?.unread ?? 0);
        }
      }),
    );
  });

  it('an ended session ended at its recorded exit, else its last heartbeat, else its start', () => {
    expect(endedAt({ host: 'claude', started_at: 1, ended_at: 9, processes: [{ host: 'h', boot: 'b', pid: 1, start: '', seen_at: 20 }] })).toBe(9);
    expect(endedAt({ host: 'claude', started_at: 1, processes: [{ host: 'h', boot: 'b', pid: 1, start: '', seen_at: 20 }, { host: 'h', boot: 'b', pid: 3, start: '', seen_at: 30 }] })).toBe(30);
    expect(endedAt({ host: 'claude', started_at: 1, processes: [] })).toBe(1);
  });
});

describe('the heir and what it takes', () => {
  it('the heir is the live session started last, ties by the greater id', () => {
    expect(heirOf([])).toBeUndefined();
    expect(heirOf([{ session: 'a', host: 'claude', started_at: 5 }, { session: 'b', host: 'codex', started_at: 9 }, { session: 'c', host: 'claude', started_at: 7 }])).toBe('b');
    expect(heirOf([{ session: 'a', host: 'claude', started_at: 5 }, { session: 'b', host: 'claude', started_at: 5 }])).toBe('b');
  });

  it('exactly one live session takes anything, and it takes each ended session with mail still to take, most recently ended first, at most MAX_INHERITED', () => {
    fc.assert(
      fc.property(entriesArb, mailboxesArb, (entries, mailboxes) => {
        const view = viewSessions({ entries, mailboxes, isDead: deadPids, now: NOW });
        const takers = view.live.filter((s) => inheritance(view, s.session, NOW).length > 0).map((s) => s.session);
        expect(takers.length).toBeLessThanOrEqual(1);
        const heir = heirOf(view.live);
        // Whoever is not live takes nothing.
        for (const s of view.ended) expect(inheritance(view, s.session, NOW)).toEqual([]);
        if (heir === undefined) return;
        const expected = view.ended
          .filter((s) => s.unread > 0 || NOW - s.ended_at < INHERIT_MS)
          .sort((a, b) => b.ended_at - a.ended_at || (a.session < b.session ? -1 : a.session > b.session ? 1 : 0))
          .map((s) => s.session)
          .slice(0, MAX_INHERITED);
        expect(inheritance(view, heir, NOW)).toEqual(expected);
      }),
    );
  });

  it('a session ended past the window is taken only while its mailbox holds unread mail', () => {
    const live = { host: 'claude' as const, started_at: NOW - 1_000, processes: [{ host: 'h', boot: 'b', pid: 2, start: '', seen_at: NOW }] };
    const old = { host: 'claude' as const, started_at: 0, ended_at: NOW - INHERIT_MS - 1, processes: [] };
    const view = (unread: number) => viewSessions({ entries: { me: live, gone: old }, mailboxes: [{ session: 'gone', unread, changed_at: 0 }], isDead: deadPids, now: NOW });
    expect(inheritance(view(0), 'me', NOW)).toEqual([]);
    expect(inheritance(view(1), 'me', NOW)).toEqual(['gone']);
  });

  it('never takes more than MAX_INHERITED', () => {
    const entries: Record<string, SessionEntry> = { me: { host: 'claude', started_at: NOW, processes: [{ host: 'h', boot: 'b', pid: 2, start: '', seen_at: NOW }] } };
    for (let i = 0; i < MAX_INHERITED + 10; i++) entries[`e${i}`] = { host: 'claude', started_at: 0, ended_at: NOW - i, processes: [] };
    const taken = inheritance(viewSessions({ entries, mailboxes: [], isDead: deadPids, now: NOW }), 'me', NOW);
    expect(taken).toHaveLength(MAX_INHERITED);
    expect(taken[0]).toBe('e0');
  });
});
