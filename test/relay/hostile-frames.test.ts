/**
 * No input kills or wedges the relay (issue: the relay as a public service). The scan that
 * bounds nesting and finds a payload's own text is checked against JSON.parse; then a real
 * relay process, in memory and with --db, takes frames nested 5,000 and 1,000,000 deep,
 * invalid UTF-8, wrong types, huge numbers, binary frames and random text, and after each
 * an honest client on another connection still gets `accepted` and its delivery —
 * byte for byte the payload it sent.
 */
import fc from 'fast-check';
import { join } from 'node:path';
import WebSocket from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_JSON_DEPTH, memberText, nestsDeeperThan } from '../../src/wire/json-scan.js';
import { MAX_FRAME_BYTES } from '../../src/wire/frames.js';
import { tempDir } from '../helpers/fixtures.js';
import { reapAll } from '../helpers/process.js';
import { newReader, TestClient, type Reader } from '../helpers/relay-test-client.js';
import { startRelay, type RelayProcess } from '../helpers/spawn-relay.js';
import { sharedStore } from '../helpers/relay-store.js';

const nested = (depth: number): string => '['.repeat(depth) + ']'.repeat(depth);

describe('the scan', () => {
  it('bounds nesting outside strings only, at exactly the limit', () => {
    expect(nestsDeeperThan(nested(MAX_JSON_DEPTH), MAX_JSON_DEPTH)).toBe(false);
    expect(nestsDeeperThan(nested(MAX_JSON_DEPTH + 1), MAX_JSON_DEPTH)).toBe(true);
    expect(nestsDeeperThan(JSON.stringify({ a: '[[[[{{{{\\"[[[[' }), 2)).toBe(false);
    expect(nestsDeeperThan(nested(1_000_000), MAX_JSON_DEPTH)).toBe(true);
  });

  it("finds the exact text of a top-level member's value, as JSON.parse reads it", () => {
    const member = fc.oneof(fc.constant('payload'), fc.string({ maxLength: 6 }));
    fc.assert(
      fc.property(fc.array(fc.tuple(member, fc.jsonValue({ maxDepth: 4 })), { maxLength: 6 }), fc.constantFrom('', ' ', '\n\t '), (members, pad) => {
        // Built by hand so duplicate names stay in the text, as a hostile frame may have them;
        // white space around the members and inside the values (indentation never enters a string).
        const text = `{${pad}${members.map(([k, v]) => `${JSON.stringify(k)}${pad}:${pad}${JSON.stringify(v, null, pad.length)}`).join(`${pad},${pad}`)}${pad}}`;
        const parsed = JSON.parse(text) as Record<string, unknown>;
        const found = memberText(text, 'payload');
        if (!Object.hasOwn(parsed, 'payload')) expect(found).toBeUndefined();
        else expect(JSON.parse(found!)).toEqual(parsed.payload);
      }),
      { numRuns: 2_000 },
    );
    // Escaped names are compared decoded, and the last duplicate wins.
    expect(memberText('{"pay\\u006coad": {"a":1}, "payload" : [ 2 ] }', 'payload')).toBe('[ 2 ]');
  });
});

/** In the relay-postgres project one relay on PostgreSQL (a `db` names its schema). */
for (const store of sharedStore ? (['--store postgres'] as const) : (['in memory', '--db'] as const)) {
  describe(`a relay process (${store}) under hostile frames`, () => {
    let relay: RelayProcess;
    let db: { path: string; remove: () => Promise<void> } | undefined;
    let honest: TestClient;
    let reader: Reader;
    let sent = 0;

    beforeAll(async () => {
      db = store !== 'in memory' ? await tempDir() : undefined;
      relay = await startRelay(db !== undefined ? { db: join(db.path, 'relay') } : {});
      reader = newReader();
      honest = await TestClient.connect(relay.url);
      await honest.auth(reader);
    });
    afterAll(async () => {
      await honest.close();
      await reapAll();
      await db?.remove();
    });

    /** The honest client sends one message and receives it, its bytes untouched; the relay process is alive. */
    async function stillServes(): Promise<void> {
      const payload = { n: ++sent, text: 'still here', nested: { list: [1, 2, { deep: true }] } };
      const reply = await honest.send(reader.route, payload);
      expect(reply.type).toBe('accepted');
      const deliveries = await honest.waitForDeliveries(sent, reader.route);
      expect(deliveries.at(-1)!.payload).toEqual(payload);
      expect(relay.child.process.exitCode).toBeNull();
    }

    /** One hostile connection sends `data` (as text unless `binary`); the relay refuses it or closes that connection. */
    async function attack(data: string | Buffer, binary = false): Promise<void> {
      const ws = new WebSocket(relay.url, { maxPayload: MAX_FRAME_BYTES, perMessageDeflate: false });
      ws.on('error', () => undefined);
      await new Promise<void>((resolve) => ws.once('message', () => resolve()));
      const answered = new Promise<string>((resolve) => {
        ws.once('message', (reply) => resolve(reply.toString()));
        ws.once('close', (code) => resolve(`closed ${code}`));
      });
      ws.send(data, { binary });
      const answer = await answered;
      expect(answer.includes('"type":"refused"') || answer.startsWith('closed'), answer).toBe(true);
      ws.terminate();
    }

    it('refuses a send nested 5,000 deep and one nested 1,000,000 deep, and keeps serving', async () => {
      const payload5k = `{"v":1,"type":"send","ref":"r","to":${JSON.stringify(reader.route)},"payload":{"x":${nested(5_000)}}}`;
      await attack(payload5k);
      await attack(`{"v":1,"type":"send","ref":"r","to":${JSON.stringify(reader.route)},"payload":{"x":${nested(1_000_000)}}}`);
      await stillServes();
    });

    it('refuses invalid UTF-8, wrong types, huge numbers and binary frames, and keeps serving', async () => {
      await attack(Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d]));
      await attack(JSON.stringify({ v: 1, type: 'send', ref: 7, to: ['x'], payload: 'text' }));
      await attack(`{"v":1e400,"type":"ack","route":${JSON.stringify(reader.route)},"ids":[1e400]}`);
      await attack(`{"v":1,"type":"ack","route":${JSON.stringify(reader.route)},"ids":[123456789012345678901234567890]}`);
      await attack(Buffer.from('{"v":1,"type":"roster","ref":"r"}'), true);
      await stillServes();
    });

    it('keeps serving an honest client through 60 seeded random frames (checked after every 20)', async () => {
      const hostile = fc.oneof(
        fc.string({ maxLength: 200 }),
        fc.json({ maxDepth: 6 }),
        fc.integer({ min: MAX_JSON_DEPTH + 1, max: 50_000 }).map((d) => `{"v":1,"type":"send","ref":"r","to":"x#y","payload":${'{"a":'.repeat(d)}1${'}'.repeat(d)}}`),
      );
      const cases = fc.sample(hostile, { numRuns: 60, seed: 20261201 });
      for (const [i, text] of cases.entries()) {
        // Whatever each frame gets back (a refusal, a close, or an answer if it happens to be valid), the relay must live on.
        const ws = new WebSocket(relay.url, { maxPayload: MAX_FRAME_BYTES, perMessageDeflate: false });
        ws.on('error', () => undefined);
        await new Promise<void>((resolve) => ws.once('message', () => resolve()));
        ws.send(text);
        ws.terminate();
        if (i % 20 === 19) await stillServes();
      }
      await stillServes();
    });
  });
}
