/**
 * Seeded fuzzing of the relay's frame handling through its public surface: a relay
 * process takes one generated hostile frame per case — mutated client frames, random
 * JSON and text, invalid UTF-8, binary frames, huge numbers, nesting from 1 to 1,000,000
 * deep, frames past the size limit — and after every case an honest client on another
 * connection still gets `accepted` and its delivery, byte for byte.
 *
 * `npm test` runs FUZZ_RUNS (default 3,000) cases in memory and a sixth of them with
 * `--db`; `npm run fuzz` runs 100,000 and 10,000. A failure names the seed and the case
 * to run again: FUZZ_SEED=<seed> FUZZ_RUNS=<n> npx vitest run test/relay/frame-fuzz.test.ts
 */
import fc from 'fast-check';
import { join } from 'node:path';
import WebSocket from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_FRAME_BYTES } from '../../src/wire/frames.js';
import { tempDir } from '../helpers/fixtures.js';
import { reapAll } from '../helpers/process.js';
import { newReader, TestClient, type Reader } from '../helpers/relay-test-client.js';
import { startRelay, type RelayProcess } from '../helpers/spawn-relay.js';
import { sharedStore } from '../helpers/relay-store.js';

const RUNS = Number(process.env.FUZZ_RUNS ?? 3_000);
const SEED = Number(process.env.FUZZ_SEED ?? 20261201);
/** Generous: a case takes about a millisecond in memory and a few with --db. */
const CASE_BUDGET_MS = 50;

interface Hostile {
  data: string | Buffer;
  binary: boolean;
}

const text = (data: string): Hostile => ({ data, binary: false });

/** Values of every JSON type and some that are not JSON at all, for any field of a frame. */
const fieldText = fc.oneof(
  fc.json({ maxDepth: 3 }),
  fc.constantFrom('1e400', '-1e400', '123456789012345678901234567890', '-0', '0.5', '1', 'null', 'true', '""', '"x#y"', '[]', '{}'),
  fc.string({ maxLength: 40 }).map((s) => JSON.stringify(s)),
  fc.constantFrom('undefined', 'NaN', 'Infinity', "'x'", '{', ']', ''),
);
const frameType = fc.constantFrom('auth', 'send', 'ack', 'announce', 'goodbye', 'roster', 'challenge', 'deliver', '', 'SEND');
const fieldName = fc.constantFrom('v', 'type', 'ref', 'to', 'route', 'sig', 'ids', 'payload', 'announcement', 'goodbye', '__proto__', 'constructor');

/** A client frame with some fields right, some wrong, some repeated, some missing. */
const mutatedFrame = fc
  .tuple(frameType, fc.array(fc.tuple(fieldName, fieldText), { maxLength: 6 }), fc.boolean())
  .map(([type, fields, versioned]) => {
    const members = [...(versioned ? ['"v":1'] : []), `"type":${JSON.stringify(type)}`, ...fields.map(([k, v]) => `${JSON.stringify(k)}:${v}`)];
    return text(`{${members.join(',')}}`);
  });

/** Mostly shallow, sometimes past the bound, rarely a million deep (2 MB, under the frame limit). */
const depth = fc.oneof(
  { weight: 40, arbitrary: fc.integer({ min: 1, max: 64 }) },
  { weight: 8, arbitrary: fc.integer({ min: 65, max: 50_000 }) },
  { weight: 1, arbitrary: fc.constant(1_000_000) },
);
const nested = fc.tuple(depth, fc.constantFrom('[]', '{}', 'mixed'), fc.constantFrom('payload', 'top', 'announcement', 'unclosed')).map(([d, kind, where]) => {
  const open = kind === '[]' ? '['.repeat(d) : kind === '{}' ? '{"a":'.repeat(d) : '[{"a":'.repeat(Math.ceil(d / 2));
  const close = kind === '[]' ? ']'.repeat(d) : kind === '{}' ? '}'.repeat(d) : '}]'.repeat(Math.ceil(d / 2));
  const inner = kind === '{}' ? `${open}1${close}` : `${open}${close}`;
  switch (where) {
    case 'payload':
      return text(`{"v":1,"type":"send","ref":"r","to":"x#y","payload":{"x":${inner}}}`);
    case 'announcement':
      return text(`{"v":1,"type":"announce","announcement":${inner}}`);
    case 'top':
      return text(inner);
    case 'unclosed':
      return text(`{"v":1,"type":"send","ref":"r","to":"x#y","payload":${open}`);
  }
});

const hostileFrame: fc.Arbitrary<Hostile> = fc.oneof(
  { weight: 30, arbitrary: mutatedFrame },
  { weight: 10, arbitrary: nested },
  { weight: 10, arbitrary: fc.json({ maxDepth: 8 }).map(text) },
  { weight: 10, arbitrary: fc.string({ unit: 'binary', maxLength: 300 }).map(text) },
  // Raw bytes in a text frame: mostly invalid UTF-8, which ws answers by closing (1007).
  { weight: 5, arbitrary: fc.uint8Array({ maxLength: 200 }).map((bytes) => ({ data: Buffer.from(bytes), binary: false })) },
  { weight: 5, arbitrary: fc.uint8Array({ maxLength: 200 }).map((bytes) => ({ data: Buffer.from(bytes), binary: true })) },
  // Past the frame limit: the relay closes the connection (1009) without reading it whole.
  { weight: 1, arbitrary: fc.constant(text(`{"v":1,"type":"roster","ref":"${'r'.repeat(MAX_FRAME_BYTES)}"}`)) },
);

function describeCase(frame: Hostile): string {
  const shown = typeof frame.data === 'string' ? frame.data : frame.data.toString('hex');
  return `${frame.binary ? 'binary' : 'text'} frame of ${frame.data.length} (${shown.slice(0, 160)}${shown.length > 160 ? '…' : ''})`;
}

/** One hostile connection, replaced whenever the relay closes it. */
class HostileConnection {
  private ws: WebSocket | undefined;
  private readonly waiters = new Set<() => void>();
  private seen = '';
  private closed = false;

  constructor(private readonly url: string) {}

  /**
   * Sends `frame`, then a roster request marked `ref`; resolves when an answer carrying the
   * mark arrives (frames are handled in order) or the relay closes the connection.
   */
  async attack(frame: Hostile, ref: string, deadlineMs: number): Promise<'answered' | 'closed'> {
    const ws = await this.open();
    this.seen = '';
    const outcome = new Promise<'answered' | 'closed'>((resolve, reject) => {
      const timer = setTimeout(() => finish(() => reject(new Error(`no answer and no close within ${deadlineMs} ms`))), deadlineMs);
      const check = () => {
        if (this.seen.includes(`"ref":"${ref}"`)) finish(() => resolve('answered'));
        else if (this.closed) finish(() => resolve('closed'));
      };
      const finish = (settle: () => void) => {
        clearTimeout(timer);
        this.waiters.delete(check);
        settle();
      };
      this.waiters.add(check);
    });
    ws.send(frame.data, { binary: frame.binary });
    if (ws.readyState === WebSocket.OPEN) ws.send(`{"v":1,"type":"roster","ref":"${ref}"}`);
    this.notify();
    const result = await outcome;
    if (result === 'closed') this.ws = undefined;
    return result;
  }

  close(): void {
    this.ws?.terminate();
  }

  private notify(): void {
    for (const waiter of [...this.waiters]) waiter();
  }

  private async open(): Promise<WebSocket> {
    if (this.ws !== undefined && this.ws.readyState === WebSocket.OPEN) return this.ws;
    const ws = new WebSocket(this.url, { maxPayload: MAX_FRAME_BYTES, perMessageDeflate: false });
    this.closed = false;
    ws.on('error', () => undefined);
    ws.on('close', () => {
      if (this.ws === ws) this.closed = true;
      this.notify();
    });
    await new Promise<void>((resolve, reject) => {
      ws.once('message', () => resolve());
      ws.once('close', () => reject(new Error('the relay closed a new connection before its challenge')));
    });
    ws.on('message', (data) => {
      // Only the tail matters: the marked answer is the last frame of a case.
      this.seen = (this.seen + data.toString()).slice(-4096);
      this.notify();
    });
    this.ws = ws;
    return ws;
  }
}

const durableRuns = Math.max(1, Math.floor(RUNS / (process.env.FUZZ_RUNS === undefined ? 6 : 10)));
/** In the relay-postgres project one relay on PostgreSQL (a `db` names its schema). */
const modes = sharedStore
  ? ([{ store: '--store postgres', runs: durableRuns }] as const)
  : ([
      { store: 'in memory', runs: RUNS },
      { store: '--db', runs: durableRuns },
    ] as const);

for (const { store, runs } of modes) {
  describe(`fuzzing a relay process (${store})`, () => {
    let relay: RelayProcess;
    let db: { path: string; remove: () => Promise<void> } | undefined;
    let honest: TestClient;
    let reader: Reader;

    beforeAll(async () => {
      db = store !== 'in memory' ? await tempDir() : undefined;
      relay = await startRelay(db !== undefined ? { db: join(db.path, 'relay') } : {});
      reader = newReader();
      honest = await TestClient.connect(relay.url, { autoAck: true });
      await honest.auth(reader);
    });
    afterAll(async () => {
      await honest?.close();
      await reapAll();
      await db?.remove();
    });

    it(
      `serves an honest client after every one of ${runs} seeded hostile frames (seed ${SEED})`,
      async () => {
        const cases = fc.sample(hostileFrame, { numRuns: runs, seed: SEED });
        const hostile = new HostileConnection(relay.url);
        const outcomes = { answered: 0, closed: 0 };
        try {
          for (const [i, frame] of cases.entries()) {
            const where = `case ${i} of seed ${SEED}: ${describeCase(frame)}`;
            try {
              outcomes[await hostile.attack(frame, `z${i}`, 10_000)]++;
              const payload = { n: i, text: 'still here', nested: [1, { deep: [true, null] }] };
              const reply = await honest.send(reader.route, payload, `h${i}`);
              expect(reply.type, where).toBe('accepted');
              const delivered = await honest.waitForDeliveries(i + 1, reader.route);
              expect(delivered.at(-1)!.payload, where).toEqual(payload);
            } catch (err) {
              throw new Error(`${where}: ${(err as Error).message}; relay exit ${relay.child.process.exitCode}, stderr: ${relay.child.stderr().slice(-2000)}`);
            }
          }
        } finally {
          hostile.close();
        }
        // Both kinds of ending were exercised: refusals on a live connection and closes.
        expect(outcomes.answered).toBeGreaterThan(0);
        if (runs >= 1_000) expect(outcomes.closed).toBeGreaterThan(0);
        expect(honest.invalid).toEqual([]);
        expect(relay.child.process.exitCode).toBeNull();
      },
      60_000 + runs * CASE_BUDGET_MS,
    );
  });
}
