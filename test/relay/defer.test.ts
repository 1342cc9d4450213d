/**
 * `defer` on a real relay (docs/PROTOCOL.md "Delivery and acknowledgement"; relay/deferrals.ts):
 * a reader that cannot take some messages now takes them out of its delivery window, the
 * route's later messages are delivered meanwhile, and the deferred ones come again when
 * due, on the same connection; an acknowledgement cancels a deferral, and a connection
 * that closes leaves its deferred messages to the next reader. Runs on the journal and on
 * PostgreSQL (RELAY_SUITE).
 */
import { describe, expect, it } from 'vitest';
import type { RelayServer } from '../../src/relay/server.js';
import { closedAfterEach } from '../helpers/relay-harness.js';
import { startTestRelay } from '../helpers/relay-store.js';
import { newReader, TestClient, type Deliver, type Reader } from '../helpers/relay-test-client.js';

const WINDOW = 4;
const { relays, clients } = closedAfterEach();

async function setUp(count: number): Promise<{ relay: RelayServer; reader: Reader; conn: TestClient }> {
  const relay = await startTestRelay({ deliveryWindow: WINDOW });
  relays.push(relay);
  const reader = newReader();
  const sender = await TestClient.connect(relay.url);
  clients.push(sender);
  for (let n = 0; n < count; n++) expect(await sender.send(reader.route, { n })).toMatchObject({ type: 'accepted' });
  const conn = await TestClient.connect(relay.url);
  clients.push(conn);
  await conn.auth(reader);
  return { relay, reader, conn };
}

const delivered = (conn: TestClient): Deliver[] => conn.frames.filter((f): f is Deliver => f.type === 'deliver');
const numbers = (conn: TestClient): unknown[] => delivered(conn).map((d) => d.payload.n);

async function deliveries(conn: TestClient, count: number, what: string): Promise<void> {
  await conn.when(what, () => (delivered(conn).length >= count ? true : undefined), 15_000);
}

describe('a reader defers what it cannot take now', () => {
  it('frees the window for the messages behind, and gets the deferred ones again when due, in id order', async () => {
    const { reader, conn } = await setUp(WINDOW + 3);
    await deliveries(conn, WINDOW, 'a full window');
    expect(numbers(conn)).toEqual([0, 1, 2, 3]);
    const first = delivered(conn);
    // 1 and 2 cannot be taken now; 0 and 3 are acknowledged.
    conn.frame({ type: 'defer', route: reader.route, ids: [first[1]!.id, first[2]!.id], ms: 1_000 });
    conn.ack(reader.route, [first[0]!.id, first[3]!.id]);
    await deliveries(conn, WINDOW + 3, 'the messages behind them');
    expect(numbers(conn)).toEqual([0, 1, 2, 3, 4, 5, 6]);
    // The window holds 4: with 4, 5 and 6 in flight, one deferred message comes back, the next once they are acknowledged.
    conn.ack(reader.route, delivered(conn).slice(4).map((d) => d.id));
    await deliveries(conn, WINDOW + 5, 'the deferred ones again');
    expect(numbers(conn)).toEqual([0, 1, 2, 3, 4, 5, 6, 1, 2]);
    expect(delivered(conn).slice(-2).map((d) => d.id)).toEqual([first[1]!.id, first[2]!.id]);
    expect(conn.frames.filter((f) => f.type === 'refused')).toEqual([]);
  });

  it('moves a deferral when asked again, and an acknowledgement cancels it', async () => {
    const { reader, conn } = await setUp(2);
    await deliveries(conn, 2, 'both');
    const [a, b] = delivered(conn);
    conn.frame({ type: 'defer', route: reader.route, ids: [a!.id, b!.id], ms: 300_000 });
    conn.ack(reader.route, [b!.id]);
    // Asked for sooner: a comes back in a second, b (acknowledged) never.
    conn.frame({ type: 'defer', route: reader.route, ids: [a!.id, b!.id], ms: 1_000 });
    await deliveries(conn, 3, 'a again');
    expect(delivered(conn).map((d) => d.id)).toEqual([a!.id, b!.id, a!.id]);
    conn.ack(reader.route, [a!.id]);
  });

  it('leaves deferred messages to the next connection of the route when this one closes', async () => {
    const { relay, reader, conn } = await setUp(2);
    await deliveries(conn, 2, 'both');
    conn.frame({ type: 'defer', route: reader.route, ids: delivered(conn).map((d) => d.id), ms: 300_000 });
    await conn.terminate();
    const next = await TestClient.connect(relay.url);
    clients.push(next);
    await next.auth(reader);
    await deliveries(next, 2, 'both, on the next connection');
    expect(numbers(next)).toEqual([0, 1]);
  });

  it('is refused to a connection that did not authenticate the route, and out of bounds', async () => {
    const { relay, reader, conn } = await setUp(1);
    await deliveries(conn, 1, 'one');
    const stranger = await TestClient.connect(relay.url);
    clients.push(stranger);
    stranger.frame({ type: 'defer', route: reader.route, ids: [delivered(conn)[0]!.id], ms: 1_000 });
    expect(await stranger.waitFor('refusal', (f) => f.type === 'refused')).toMatchObject({ code: 'not_authenticated' });
    conn.frame({ type: 'defer', route: reader.route, ids: [delivered(conn)[0]!.id], ms: 999 });
    expect(await conn.waitFor('refusal', (f) => f.type === 'refused')).toMatchObject({ code: 'bad_frame', message: expect.stringMatching(/ms/) });
  });
});
