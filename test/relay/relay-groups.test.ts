/** One relay at several addresses (src/relay/relay-groups.ts): the pure choices, exhaustively over small groups, and the elections of a session's start. */
import { EventEmitter } from 'node:events';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { electReader, groupByRelay, preferredOrder, RelayGroups, relayOf, sendingMember, soleAddresses } from '../../src/relay/relay-groups.js';
import { until } from '../helpers/relay-test-client.js';

const K = 'nwfr9cKLa7DKMshEju5PcIOTiAN7yw46kwH-pnmbeAo';
const L = 'oUhl-zo_NXN0v-59F3ciSIxApCYGT0Ch2psC3RjvuGk';

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

  it('orders a group by rotation only, the same for the same session, and spreads sessions over the addresses', () => {
    fc.assert(
      // Distinct members, so where the rotation starts is known from its first member.
      fc.property(fc.uniqueArray(fc.integer(), { minLength: 1, maxLength: 6 }), fc.string(), (members, seed) => {
        const ordered = preferredOrder(members, seed);
        expect(preferredOrder(members, seed)).toEqual(ordered);
        const start = members.indexOf(ordered[0]!);
        expect(ordered).toEqual([...members.slice(start), ...members.slice(0, start)]);
      }),
    );
    const firsts = new Map<string, number>();
    for (let i = 0; i < 400; i++) {
      const first = preferredOrder(['ws://a', 'ws://b'], `${K}#s${i}`)[0]!;
      firsts.set(first, (firsts.get(first) ?? 0) + 1);
    }
    // Not a timing bound: 400 sessions, each address first for at least a quarter of them.
    expect(Math.min(firsts.get('ws://a') ?? 0, firsts.get('ws://b') ?? 0)).toBeGreaterThan(100);
  });
});

describe('electing the address that reads and the one that sends', () => {
  const states = fc.array(fc.record({ connected: fc.boolean(), reads: fc.boolean() }), { maxLength: 5 });

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

  it("sends through the first connected address in the recipient's order: the one the recipient reads through when it sees the same addresses up", () => {
    fc.assert(
      fc.property(states, fc.string(), (listed, to) => {
        const sender = sendingMember(listed, to);
        expect(sender).toBe(preferredOrder(listed, to).find((m) => m.connected));
        if (listed.every((m) => !m.connected)) expect(sender).toBeUndefined();
        // The recipient's session (seeded by its route, reading nowhere yet) elects that same address, once its start's wait is over.
        const recipient = new RelayGroups(
          listed.map((m) => ({ ...m, relay: 'K', reads: false, read: () => undefined, on: () => undefined })),
          to,
        );
        const elected = electReader(recipient.groups[0] ?? []);
        expect(elected === undefined ? undefined : listed[recipient.listed[0]!.indexOf(elected)]).toBe(sender);
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
      constructor(readonly relay: string) {
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
      const members = [new Member('K'), new Member('K')];
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
