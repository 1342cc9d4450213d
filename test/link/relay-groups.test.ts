/** One relay at several addresses (src/link/relay-groups.ts): the pure choices, exhaustively over small groups, and the elections of a session's start. */
import { EventEmitter } from 'node:events';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { canonicalAddress, electReader, groupByRelay, preference, preferredOrder, RelayGroups, relayOf, sendingMember, soleAddresses } from '../../src/link/relay-groups.js';
import { until } from '../helpers/relay-test-client.js';

const K = 'nwfr9cKLa7DKMshEju5PcIOTiAN7yw46kwH-pnmbeAo';
const L = 'oUhl-zo_NXN0v-59F3ciSIxApCYGT0Ch2psC3RjvuGk';

const urls = (n: number) => Array.from({ length: n }, (_, i) => ({ url: `ws://10.0.0.${i}:9440` }));
/** The items sorted by `keys` (distinct, at least one per item): any permutation, as fast-check picks the keys. */
const shuffled = <T>(items: readonly T[], keys: readonly number[]): T[] =>
  items.map((item, i) => ({ item, k: keys[i]! })).sort((a, b) => a.k - b.k).map((x) => x.item);
/** Sort keys for `shuffled`. */
const permutation = fc.uniqueArray(fc.nat(), { minLength: 6, maxLength: 6 });

describe('grouping', () => {
  it('makes URLs that pin one key one relay, and every other URL a relay of its own', () => {
    expect(relayOf({ url: 'ws://a', pin: K })).toBe(K);
    expect(relayOf({ url: 'ws://a', pin: undefined })).toBe('ws://a');
    expect(soleAddresses([`ws://a#key=${K}`, 'ws://b', `ws://c#key=${K}`, `ws://d#key=${L}`, 'ws://e'])).toEqual([false, true, false, true, true]);
    const members = [
      { relay: K, url: 'ws://a' },
      { relay: 'ws://b', url: 'ws://b' },
      { relay: K, url: 'ws://c' },
    ];
    expect(groupByRelay(members).map((g) => g.map((m) => m.url))).toEqual([['ws://a', 'ws://c'], ['ws://b']]);
  });

  it('orders a group by the session and the addresses alone: a permutation of the group, the same however the URLs are listed', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 6 }), permutation, fc.string(), (n, perm, seed) => {
        const members = urls(n);
        const ordered = preferredOrder(members, seed);
        expect([...ordered].sort((a, b) => a.url.localeCompare(b.url))).toEqual(members);
        expect(preferredOrder(shuffled(members, perm), seed).map((m) => m.url)).toEqual(ordered.map((m) => m.url));
        // Highest score first.
        const scores = ordered.map((m) => preference(seed, m.url));
        expect(scores).toEqual([...scores].sort((a, b) => b - a));
      }),
    );
  });

  it('moves only the sessions that come to prefer an added address, and only those that preferred a removed one', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 5 }), fc.string(), (n, seed) => {
        const members = urls(n + 1);
        const before = preferredOrder(members.slice(0, n), seed);
        const after = preferredOrder(members, seed);
        // The others keep their order among themselves: a session that does not now prefer the new address keeps its first choice.
        expect(after.filter((m) => m !== members[n])).toEqual(before);
        if (after[0] !== members[n]) expect(after[0]).toBe(before[0]);
      }),
    );
  });

  it('scores spellings of one address alike: scheme and host case, a default port, a lone slash', () => {
    expect(canonicalAddress('WS://Relay.Example:80/')).toBe('ws://relay.example');
    expect(canonicalAddress('wss://relay.example:443')).toBe('wss://relay.example');
    expect(canonicalAddress('ws://127.0.0.1:7777/')).toBe('ws://127.0.0.1:7777');
    expect(canonicalAddress('ws://[::1]:7777')).toBe('ws://[::1]:7777');
    // What tells addresses apart stays: another port, a path, a query.
    expect(canonicalAddress('wss://relay.example:8443/a?b=1')).toBe('wss://relay.example:8443/a?b=1');
    expect(canonicalAddress('not a url')).toBe('not a url');
    fc.assert(
      fc.property(fc.string(), (seed) => {
        expect(preference(seed, 'WS://R1.Example:80/')).toBe(preference(seed, 'ws://r1.example'));
        expect(preference(seed, 'ws://10.0.0.1:9440/')).toBe(preference(seed, 'ws://10.0.0.1:9440'));
      }),
    );
    // A recipient that writes its addresses another way elects the address the sender sends to.
    const to = 'route-of-the-recipient';
    for (const n of [2, 3, 4, 5]) {
      const written = urls(n).map((m) => ({ ...m, connected: true }));
      const spelled = written.map((m) => ({ ...m, url: `${m.url.toUpperCase()}/`, relay: 'K', reads: false, read: () => undefined, on: () => undefined }));
      const sender = written.indexOf(sendingMember(written, to)!);
      const recipient = new RelayGroups(spelled, to);
      expect(spelled.indexOf(electReader(recipient.groups[0]!)!)).toBe(sender);
    }
  });

  it('spreads sessions over the addresses', () => {
    const firsts = new Map<string, number>();
    for (let i = 0; i < 400; i++) {
      const first = preferredOrder(urls(2), `${K}#s${i}`)[0]!.url;
      firsts.set(first, (firsts.get(first) ?? 0) + 1);
    }
    // Not a timing bound: 400 sessions, each address first for at least a quarter of them.
    expect(Math.min(...urls(2).map((m) => firsts.get(m.url) ?? 0))).toBeGreaterThan(100);
  });
});

describe('electing the address that reads and the one that sends', () => {
  const states = fc.array(fc.record({ connected: fc.boolean(), reads: fc.boolean() }), { maxLength: 6 });

  it('keeps a connected reader, else starts the first connected address, else none', () => {
    fc.assert(
      fc.property(states, (group) => {
        const reader = group.find((m) => m.connected && m.reads);
        const elected = electReader(group);
        if (reader !== undefined) expect(elected).toBeUndefined();
        else expect(elected).toBe(group.find((m) => m.connected));
        // While the session waits for its preferred address, only that one may start.
        const waiting = electReader(group, true);
        if (reader !== undefined || group[0]?.connected !== true) expect(waiting).toBeUndefined();
        else expect(waiting).toBe(group[0]);
      }),
    );
  });

  it("sends through the first connected address in the recipient's order: the one the recipient reads through when it sees the same addresses up, listed in any order", () => {
    fc.assert(
      fc.property(states, fc.string(), permutation, (group, to, perm) => {
        const listed = group.map((m, i) => ({ ...m, url: `ws://r${i}:9440` }));
        const sender = sendingMember(listed, to);
        expect(sender).toBe(preferredOrder(listed, to).find((m) => m.connected));
        if (listed.every((m) => !m.connected)) expect(sender).toBeUndefined();
        // The recipient's session (seeded by its route, reading nowhere yet, its URLs in another order) elects that same address, once its start's wait is over.
        const recipient = new RelayGroups(
          shuffled(listed, perm).map((m) => ({ ...m, relay: 'K', reads: false, read: () => undefined, on: () => undefined })),
          to,
        );
        expect(electReader(recipient.groups[0] ?? [])?.url).toBe(sender?.url);
      }),
    );
  });

  it('after an election exactly one connected address reads, when any is connected', () => {
    fc.assert(
      fc.property(states, (group) => {
        // Only one address ever reads in a session: start from at most one reader.
        const start = group.map((m, i) => ({ ...m, reads: m.reads && i === group.findIndex((x) => x.reads) }));
        const elected = electReader(start);
        if (elected !== undefined) elected.reads = true;
        const readers = start.filter((m) => m.connected && m.reads).length;
        expect(readers).toBe(start.some((m) => m.connected) ? 1 : 0);
      }),
    );
  });

  describe('a session starting', () => {
    class Member extends EventEmitter {
      connected = false;
      reads = false;
      constructor(
        readonly relay: string,
        readonly url: string,
      ) {
        super();
      }
      read(): void {
        this.reads = true;
      }
      connect(): void {
        this.connected = true;
        this.emit('connected');
      }
      drop(): void {
        this.connected = false;
        this.reads = false;
        this.emit('disconnected');
      }
    }
    /** A group of two whose preferred address (for this seed) is `first`. */
    const started = (graceMs: number) => {
      const members = [new Member('K', 'ws://a'), new Member('K', 'ws://b')];
      const groups = new RelayGroups(members, 'route-seed');
      groups.start(graceMs);
      const [first, second] = groups.groups[0]!;
      return { first: first!, second: second! };
    };

    it('reads through its preferred address even when another answered first', () => {
      const { first, second } = started(60_000);
      second.connect();
      expect(second.reads).toBe(false);
      first.connect();
      expect([first.reads, second.reads]).toEqual([true, false]);
      // The preferred one drops: the other takes over at once, and keeps reading when it is back.
      first.drop();
      expect(second.reads).toBe(true);
      first.connect();
      expect([first.reads, second.reads]).toEqual([false, true]);
    });

    it('reads through another address once the preferred one fails', () => {
      const { first, second } = started(60_000);
      second.connect();
      first.drop();
      expect([first.reads, second.reads]).toEqual([false, true]);
    });

    it('reads through another address once the preferred one had its grace', async () => {
      const { first, second } = started(50);
      second.connect();
      expect(second.reads).toBe(false);
      await until('the grace to end', () => (second.reads ? true : undefined), 5_000);
      expect(first.reads).toBe(false);
    });
  });
});
