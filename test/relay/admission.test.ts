/**
 * Connection caps as a pure decision (relay/admission.ts): per address, per network (an
 * IPv6 /64), in total, and the eviction of the heaviest network's newest connection at
 * the total cap. A model-based property test drives `ConnectionCounts` with arrivals and
 * closes from a few addresses and checks every bound after every step.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { admit, connectionCaps, ConnectionCounts, type Held } from '../../src/relay/admission.js';

const caps = { maxConnections: 4, maxConnectionsPerAddress: 2, maxConnectionsPerNetwork: 3 };

describe('admit', () => {
  it('refuses past the address cap and the network cap, on loopback too', () => {
    expect(admit({ total: 0, fromAddress: 2, fromNetwork: 2 }, '127.0.0.2', '127.0.0.2', caps)).toMatchObject({ admitted: false, cap: 'max_connections_per_address' });
    expect(admit({ total: 0, fromAddress: 2, fromNetwork: 2 }, '192.0.2.1', '192.0.2.1', caps)).toMatchObject({ admitted: false, cap: 'max_connections_per_address' });
    expect(admit({ total: 0, fromAddress: 0, fromNetwork: 3 }, '2001:db8::9', '2001:0db8:0000:0000::/64', caps)).toMatchObject({ admitted: false, cap: 'max_connections_per_network' });
    expect(admit({ total: 3, fromAddress: 1, fromNetwork: 1 }, '127.0.0.1', '127.0.0.1', caps)).toEqual({ admitted: true });
  });

  it('at the total cap evicts only from a network holding at least two more than the newcomer', () => {
    const full = (fromNetwork: number, count: number) => ({ total: 4, fromAddress: fromNetwork, fromNetwork, heaviest: { network: '127.0.0.2', count } });
    expect(admit(full(0, 2), '127.0.0.1', '127.0.0.1', caps)).toEqual({ admitted: true, evict: '127.0.0.2' });
    expect(admit(full(1, 3), '127.0.0.1', '127.0.0.1', caps)).toEqual({ admitted: true, evict: '127.0.0.2' });
    // One more than the newcomer: moving a connection would only swap who holds more.
    expect(admit(full(1, 2), '127.0.0.1', '127.0.0.1', caps)).toMatchObject({ admitted: false, cap: 'max_connections' });
    // The heaviest network is the newcomer's own.
    expect(admit({ total: 4, fromAddress: 1, fromNetwork: 1, heaviest: { network: '127.0.0.1', count: 3 } }, '127.0.0.1', '127.0.0.1', caps)).toMatchObject({ admitted: false });
  });

  it('defaults: 64 per address, 256 on a relay listening on loopback, a /64 four times the address, none above the total', () => {
    expect(connectionCaps('0.0.0.0', {})).toEqual({ maxConnections: 1024, maxConnectionsPerAddress: 64, maxConnectionsPerNetwork: 256 });
    expect(connectionCaps('127.0.0.1', {})).toEqual({ maxConnections: 1024, maxConnectionsPerAddress: 256, maxConnectionsPerNetwork: 1024 });
    expect(connectionCaps('::', { maxConnections: 10, maxConnectionsPerAddress: 50 })).toEqual({ maxConnections: 10, maxConnectionsPerAddress: 10, maxConnectionsPerNetwork: 10 });
  });
});

describe('ConnectionCounts', () => {
  it('evicts the newest connection of the heaviest network, which counts no more, and releases once', () => {
    const counts = new ConnectionCounts(caps);
    const evicted: string[] = [];
    const add = (address: string, name: string) => counts.tryAdd(address, () => evicted.push(name));
    const a1 = add('127.0.0.2', 'a1');
    add('127.0.0.2', 'a2');
    add('127.0.0.3', 'b1');
    add('127.0.0.3', 'b2');
    expect(add('127.0.0.2', 'a3')).toMatchObject({ admitted: false, refusal: { cap: 'max_connections_per_address' } });
    // Full: an address holding none takes the place of the newest of one holding two (of two such, the first met).
    const honest = add('127.0.0.1', 'h1');
    expect(honest).toMatchObject({ admitted: true, evicted: { address: '127.0.0.2' } });
    expect(evicted).toEqual(['a2']);
    expect(counts.size).toBe(4);
    // Now 127.0.0.3 holds the most, two; the honest address holds one: no eviction.
    expect(add('127.0.0.1', 'h2')).toMatchObject({ admitted: false, refusal: { cap: 'max_connections' } });
    if (!a1.admitted) throw new Error('a1 was admitted');
    counts.release(a1.held);
    counts.release(a1.held);
    expect(counts.size).toBe(3);
    expect(add('127.0.0.1', 'h2').admitted).toBe(true);
  });

  it('counts an IPv6 address by its /64 as well as by itself', () => {
    const counts = new ConnectionCounts(caps);
    expect(['2001:db8::1', '2001:db8::1', '2001:db8::2'].map((a) => counts.tryAdd(a, () => undefined).admitted)).toEqual([true, true, true]);
    expect(counts.tryAdd('2001:db8::3', () => undefined)).toMatchObject({ admitted: false, refusal: { cap: 'max_connections_per_network' } });
    expect(counts.tryAdd('2001:db8:0:1::1', () => undefined).admitted).toBe(true);
    expect(counts.fromNetwork('2001:db8::77')).toBe(3);
  });

  it('keeps every bound, and evicts only to help a lighter network, under any arrivals and closes', () => {
    const addresses = ['127.0.0.1', '127.0.0.2', '127.0.0.3', '2001:db8::1', '2001:db8::2', '2001:db8:1::1'];
    const step = fc.oneof(
      { weight: 3, arbitrary: fc.record({ kind: fc.constant('open' as const), address: fc.constantFrom(...addresses) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('close' as const), pick: fc.nat() }) },
    );
    const networkOf = (a: string) => (a.includes(':') ? a.split(':').slice(0, 3).join(':') : a);
    fc.assert(
      fc.property(fc.array(step, { maxLength: 60 }), fc.integer({ min: 1, max: 5 }), fc.integer({ min: 1, max: 3 }), (steps, total, perAddress) => {
        const limits = connectionCaps('0.0.0.0', { maxConnections: total, maxConnectionsPerAddress: perAddress });
        const counts = new ConnectionCounts(limits);
        let open: Held[] = [];
        for (const s of steps) {
          if (s.kind === 'close') {
            if (open.length === 0) continue;
            const [held] = open.splice(s.pick % open.length, 1);
            counts.release(held!);
            continue;
          }
          const before = new Map<string, number>();
          for (const h of open) before.set(networkOf(h.address), (before.get(networkOf(h.address)) ?? 0) + 1);
          const result = counts.tryAdd(s.address, () => undefined);
          if (!result.admitted) continue;
          if (result.evicted !== undefined) {
            expect(open.length).toBe(limits.maxConnections);
            const mine = before.get(networkOf(s.address)) ?? 0;
            expect(before.get(networkOf(result.evicted.address))!).toBeGreaterThanOrEqual(mine + 2);
            expect(Math.max(...before.values())).toBe(before.get(networkOf(result.evicted.address)));
            open = open.filter((h) => h !== result.evicted);
          }
          open.push(result.held);
          expect(counts.size).toBe(open.length);
          expect(open.length).toBeLessThanOrEqual(limits.maxConnections);
          expect(open.filter((h) => h.address === s.address).length).toBeLessThanOrEqual(limits.maxConnectionsPerAddress);
          expect(open.filter((h) => networkOf(h.address) === networkOf(s.address)).length).toBeLessThanOrEqual(limits.maxConnectionsPerNetwork);
        }
      }),
      { numRuns: 300, seed: 38 },
    );
  });
});
