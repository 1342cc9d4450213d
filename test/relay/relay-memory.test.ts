/**
 * Relay memory in proportion to the work (issue 38, point 4; DESIGN.md "Bounded by
 * construction": "What the 512 MiB payload cap means in memory"): a relay process with
 * `--db` is filled with 64 MiB of payload — half in 4 KiB payloads, half in 256 to 512 KiB
 * ones, a quarter of them with characters beyond Latin-1 — for readers that are away. Its
 * peak resident set (VmHWM from /proc/<pid>/status) stays under 1.5 times the payload
 * plus 128 MiB, and so does that of the relay restarted on the store, whose readers then
 * get every payload back byte for byte. Before, the same fill peaked at about 425 MiB and
 * the restart at about 290. Skipped where there is no /proc.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PROTOCOL_VERSION } from '../../src/wire/frames.js';
import { tempDir } from '../helpers/fixtures.js';
import { reapAll } from '../helpers/process.js';
import { newReader, TestClient, type Reader } from '../helpers/relay-test-client.js';
import { startRelay, type RelayProcess } from '../helpers/spawn-relay.js';

const MiB = 1024 * 1024;
const PAYLOAD_BYTES = 64 * MiB;
/** What the relay may hold beyond 1.5 times its payload: the idle process (about 70 MiB), V8's young generation and the per-message bookkeeping. */
const BASE_BYTES = 128 * MiB;
const READERS = 8;
const IN_FLIGHT = 16;

/** VmHWM (peak resident set) of a process, in bytes. */
function peakRss(pid: number): number {
  const match = /^VmHWM:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (match === null) throw new Error(`no VmHWM in /proc/${pid}/status`);
  return Number(match[1]) * 1024;
}

/** The payloads' JSON text as sent, in order: 4 KiB ones and 256–512 KiB ones, half the bytes each. */
function payloadTexts(total: number): string[] {
  const texts: string[] = [];
  let small = 0;
  let large = 0;
  while (small + large < total) {
    const bytes = large <= small ? 256 * 1024 + Math.floor(Math.random() * 255 * 1024) : 4096;
    const body = randomBytes(bytes).toString('base64url').slice(0, bytes - 100);
    const note = texts.length % 4 === 0 ? 'notes — brouillon' : 'notes';
    // Spaces and a newline between members: the payload is kept as the text that arrived.
    const text = `{"v": 4, "n": ${texts.length},\n "note": "${note}", "sealed": "${body}"}`;
    texts.push(text);
    if (bytes === 4096) small += Buffer.byteLength(text);
    else large += Buffer.byteLength(text);
  }
  return texts;
}

/** Sends every payload as its raw text, `IN_FLIGHT` at a time, again while refused `rate_limited`. */
async function fill(client: TestClient, readers: readonly Reader[], texts: readonly string[]): Promise<void> {
  let next = 0;
  let refs = 0;
  const lane = async () => {
    while (next < texts.length) {
      const i = next++;
      for (;;) {
        const ref = `f${refs++}`;
        client.raw(`{"v":${PROTOCOL_VERSION},"type":"send","ref":"${ref}","to":"${readers[i % readers.length]!.route}","payload":${texts[i]!}}`);
        const reply = await client.reply(ref, 30_000);
        if (reply.type === 'accepted') break;
        if (reply.code !== 'rate_limited') throw new Error(`refused: ${reply.code} ${reply.message}`);
      }
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, lane));
}

/** The payload texts delivered to `reader`'s route, cut from the raw deliver frames, each acknowledged. */
async function readAll(url: string, reader: Reader, count: number): Promise<string[]> {
  const client = await TestClient.connect(url, { autoAck: true });
  const texts: string[] = [];
  const prefix = `{"v":${PROTOCOL_VERSION},"type":"deliver","route":"${reader.route}","id":`;
  const all = new Promise<void>((resolve) => {
    client.ws.on('message', (data: Buffer) => {
      const text = data.toString('utf8');
      if (!text.startsWith(prefix)) return;
      const start = text.indexOf(',"payload":') + ',"payload":'.length;
      texts.push(text.slice(start, -1));
      if (texts.length === count) resolve();
    });
  });
  await client.auth(reader);
  await all;
  await client.close();
  return texts;
}

describe.skipIf(!existsSync('/proc/self/status'))('a relay process holding 64 MiB of payload', () => {
  let db: { path: string; remove: () => Promise<void> };
  let relay: RelayProcess;
  beforeAll(async () => {
    db = await tempDir('interlink-relay-memory-');
  });
  afterAll(async () => {
    await reapAll();
    await db.remove();
  });

  it('peaks under 1.5 times its payload plus 128 MiB, filled and restarted on its store, and gives every byte back', async () => {
    const flags = ['--max-per-connection', '100000'];
    relay = await startRelay({ db: db.path, flags });
    const readers = Array.from({ length: READERS }, (_, i) => newReader(`away${i}`));
    const texts = payloadTexts(PAYLOAD_BYTES);
    const payload = texts.reduce((sum, t) => sum + Buffer.byteLength(t), 0);
    const bound = 1.5 * payload + BASE_BYTES;
    const sender = await TestClient.connect(relay.url);
    await sender.prove();
    await fill(sender, readers, texts);
    await sender.close();
    const filled = peakRss(relay.child.process.pid!);
    expect(filled, `peak ${(filled / MiB).toFixed(0)} MiB filled with ${(payload / MiB).toFixed(0)} MiB`).toBeLessThan(bound);

    await relay.child.kill('SIGTERM');
    relay = await startRelay({ db: db.path, flags });
    const restarted = peakRss(relay.child.process.pid!);
    expect(restarted, `peak ${(restarted / MiB).toFixed(0)} MiB restarted on ${(payload / MiB).toFixed(0)} MiB`).toBeLessThan(bound);
    for (const [r, reader] of readers.entries()) {
      const sent = texts.filter((_, i) => i % READERS === r);
      const delivered = await readAll(relay.url, reader, sent.length);
      expect([...delivered].sort()).toEqual([...sent].sort());
    }
    const delivering = peakRss(relay.child.process.pid!);
    expect(delivering, `peak ${(delivering / MiB).toFixed(0)} MiB delivering ${(payload / MiB).toFixed(0)} MiB`).toBeLessThan(bound);
  });
});
