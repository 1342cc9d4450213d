/**
 * Order through refusals on a real relay (docs/PROTOCOL.md "Sending": "Order through
 * refusals"; src/relay/send-chain.ts): a send that names the send it follows (`after`) is
 * decided after it and refused `out_of_order` unless that one was accepted. Without it, a
 * share freed between two pipelined sends lets the later one in after the earlier one was
 * refused, and the reader gets them out of order. Runs on the journal and on PostgreSQL
 * (RELAY_SUITE).
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import type { RelayServer } from '../../src/relay/server.js';
import { closedAfterEach } from '../helpers/relay-harness.js';
import { startTestRelay } from '../helpers/relay-store.js';
import { newReader, TestClient, until, type Accepted, type Deliver, type Refused } from '../helpers/relay-test-client.js';

const { relays, clients } = closedAfterEach();

async function startRelay(maxPerConnection: number): Promise<RelayServer> {
  const relay = await startTestRelay({ maxPerConnection });
  relays.push(relay);
  return relay;
}

async function connect(relay: RelayServer, options: { autoAck?: boolean } = {}): Promise<TestClient> {
  const client = await TestClient.connect(relay.url, options);
  clients.push(client);
  return client;
}

/** Sends with `after` (when given) and resolves with its reply. */
function sendAfter(client: TestClient, ref: string, to: string, payload: Record<string, unknown>, after?: string): Promise<Accepted | Refused> {
  client.frame({ type: 'send', ref, to, payload, ...(after !== undefined && { after }) });
  return client.reply(ref);
}

describe('a send that names the send it follows', () => {
  it('is refused out_of_order after a refused one, though the share has room again; a send without after is taken', async () => {
    const relay = await startRelay(2);
    const reader = newReader();
    const sender = await connect(relay);
    const readerConn = await connect(relay);
    await readerConn.auth(reader);
    expect(await sendAfter(sender, 's0', reader.route, { n: 0 })).toMatchObject({ type: 'accepted' });
    expect(await sendAfter(sender, 's1', reader.route, { n: 1 }, 's0')).toMatchObject({ type: 'accepted' });
    expect(await sendAfter(sender, 's2', reader.route, { n: 2 }, 's1')).toMatchObject({ type: 'refused', code: 'queue_full' });
    // The reader frees the share: s3 alone would now be taken, and would overtake s2.
    const first = (await readerConn.waitFor('s0 delivered', (f) => f.type === 'deliver')) as Deliver;
    readerConn.ack(reader.route, [first.id]);
    await until('the share freed', () => (relay.stats().messages === 1 ? true : undefined));
    const refused = await sendAfter(sender, 's3', reader.route, { n: 3 }, 's2');
    expect(refused).toMatchObject({ type: 'refused', code: 'out_of_order', message: expect.stringMatching(/\(ref s2\) was refused: offer that one again first/) });
    // Offered again in order, s2 then s3 are taken.
    expect(await sendAfter(sender, 's2b', reader.route, { n: 2 })).toMatchObject({ type: 'accepted' });
    readerConn.ack(reader.route, (readerConn.frames.filter((f) => f.type === 'deliver') as Deliver[]).map((d) => d.id));
    await until('the share freed again', () => (relay.stats().messages <= 1 ? true : undefined));
    expect(await sendAfter(sender, 's3b', reader.route, { n: 3 }, 's2b')).toMatchObject({ type: 'accepted' });
    await readerConn.when('four delivered', () => (readerConn.frames.filter((f) => f.type === 'deliver').length === 4 ? true : undefined));
    const order = (readerConn.frames.filter((f) => f.type === 'deliver') as Deliver[]).map((d) => d.payload.n);
    expect(order).toEqual([0, 1, 2, 3]);
  });

  it('is refused out_of_order after a ref this connection never sent, and taken after an accepted one', async () => {
    const relay = await startRelay(100);
    const reader = newReader();
    const sender = await connect(relay);
    const other = await connect(relay);
    expect(await sendAfter(other, 'x', reader.route, { n: 0 })).toMatchObject({ type: 'accepted' });
    // Refs are per connection: another connection's accepted `x` is unknown here.
    expect(await sendAfter(sender, 'y', reader.route, { n: 1 }, 'x')).toMatchObject({ type: 'refused', code: 'out_of_order', message: expect.stringMatching(/not known on this connection/) });
    expect(await sendAfter(sender, 'x2', reader.route, { n: 1 })).toMatchObject({ type: 'accepted' });
    expect(await sendAfter(sender, 'y2', reader.route, { n: 2 }, 'x2')).toMatchObject({ type: 'accepted' });
  });

  it('a pipelined run against a share that a reader keeps freeing: what is accepted is a prefix, and is delivered in order', async () => {
    const relay = await startRelay(4);
    const reader = newReader();
    const readerConn = await connect(relay, { autoAck: true });
    await readerConn.auth(reader);
    const sender = await connect(relay);
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 2, max: 24 }), async (count) => {
        const base = readerConn.frames.filter((f) => f.type === 'deliver').length;
        const tag = Math.random().toString(36).slice(2);
        const replies = await Promise.all(
          Array.from({ length: count }, (_, i) => sendAfter(sender, `${tag}${i}`, reader.route, { tag, n: i }, i === 0 ? undefined : `${tag}${i - 1}`)),
        );
        const taken = replies.map((r) => r.type === 'accepted');
        const firstRefused = taken.indexOf(false);
        // Nothing after the first refusal got in.
        if (firstRefused >= 0) expect(taken.slice(firstRefused).every((t) => !t)).toBe(true);
        for (const reply of replies.slice(firstRefused + 1)) if (firstRefused >= 0) expect(reply).toMatchObject({ code: 'out_of_order' });
        const accepted = firstRefused < 0 ? count : firstRefused;
        await readerConn.when(`${accepted} delivered`, () => (readerConn.frames.filter((f) => f.type === 'deliver').length === base + accepted ? true : undefined));
        const delivered = (readerConn.frames.filter((f) => f.type === 'deliver') as Deliver[]).slice(base).map((d) => d.payload.n);
        expect(delivered).toEqual(Array.from({ length: accepted }, (_, i) => i));
      }),
      { numRuns: 25, seed: 35 },
    );
  });
});
