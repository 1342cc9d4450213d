/**
 * The relay's durable queues read and written in bounded memory (DESIGN.md "Bounded by
 * construction", "The durable store"): the snapshot one message per line, still the JSON
 * a whole reader parses, every payload byte back; a snapshot written whole by an earlier
 * version still read; damage in the line layout named, never loaded; and a journal bigger
 * than one read replayed across reads, its torn tail and its damage found where they are.
 */
import { appendFile, readFile, writeFile } from 'node:fs/promises';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateSigningKey } from '../../src/identity/ed25519.js';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { queueDataSchema, RelayQueueState, relayQueueFormat, type QueueOp } from '../../src/relay/queues.js';
import { loadJournaled } from '../../src/store/journal.js';
import { headerLine, journalLine } from '../../src/store/journal-lines.js';
import { linesOf, readLineRuns, RUN_BYTES } from '../../src/store/line-runs.js';
import { readSnapshot, writeSnapshot } from '../../src/store/snapshot.js';
import { tempDir } from '../helpers/fixtures.js';

const ROUTES = Array.from({ length: 3 }, (_, i) => `${encodeBase64url(generateSigningKey().publicKey)}#s${i}`);
const ROOMY = { routeMessages: 100_000, messages: 100_000, bytes: 1 << 30 };

/** Payload texts as frames carry them: whitespace and newlines kept, escapes, and characters beyond Latin-1. */
const PAYLOADS = ['{}', '{"a":\n 1,\t"t":"x\\"y\\\\z"}', '{"text":"café — 😀"}', '{ "n" : [1, 2, {"deep": true}] }\n'.trim(), `{"sealed":"${'A'.repeat(70_000)}"}`];

function filledState(): RelayQueueState {
  const state = new RelayQueueState(ROOMY);
  let id = 10;
  for (let round = 0; round < 4; round++) {
    for (const [i, payload] of PAYLOADS.entries()) {
      const op: QueueOp = { op: 'enq', at: 1_000 + id, route: ROUTES[(round + i) % ROUTES.length]!, id: id++, payload, ...(i % 2 === 0 && { src: `src-${i}` }) };
      expect(state.apply(op).outcome).toBe('enqueued');
    }
  }
  // A gap in ids within a route, as acknowledgements leave.
  state.apply({ op: 'ack', at: 2_000, route: ROUTES[0]!, ids: [10, 13] });
  return state;
}

function expectSameMessages(read: RelayQueueState, state: RelayQueueState): void {
  expect(read.toData()).toEqual(state.toData());
  expect(read.stats).toEqual(state.stats);
  expect(read.nextId).toBe(state.nextId);
  for (const route of ROUTES) {
    for (const [i, m] of read.messages(route).entries()) expect(m.utf8?.equals(Buffer.from(state.messages(route)[i]!.payload, 'utf8'))).toBe(true);
  }
}

describe('the relay snapshot', () => {
  let dir: { path: string; remove: () => Promise<void> };
  beforeAll(async () => (dir = await tempDir('interlink-queue-snapshot-')));
  afterAll(() => dir.remove());

  it('is one message per line, the same JSON a reader of the whole file parses, and every payload byte comes back', async () => {
    const path = join(dir.path, 'lines.json');
    const state = filledState();
    const bytes = await writeSnapshot(path, relayQueueFormat(ROOMY), state, 7);
    const text = await readFile(path, 'utf8');
    expect(Buffer.byteLength(text)).toBe(bytes);
    const lines = text.split('\n');
    expect(lines[0]).toBe('{"format":"interlink-relay-queues","version":1,"generation":7,"data":');
    expect(lines.length).toBe(3 + state.stats.messages + 2 * state.stats.routes + 2);
    const whole = JSON.parse(text) as { generation: number; data: unknown };
    expect(whole.generation).toBe(7);
    expect(queueDataSchema.parse(whole.data)).toEqual(state.toData());
    const read = await readSnapshot(path, relayQueueFormat(ROOMY));
    expect(read.damage).toBeUndefined();
    expect(read.snapshot?.generation).toBe(7);
    expectSameMessages(read.snapshot!.state, state);
  });

  it('reads an empty state, and a snapshot written whole by an earlier version', async () => {
    const empty = join(dir.path, 'empty.json');
    await writeSnapshot(empty, relayQueueFormat(ROOMY), new RelayQueueState(ROOMY), 1);
    expect((await readSnapshot(empty, relayQueueFormat(ROOMY))).snapshot?.state.stats).toEqual({ routes: 0, messages: 0, bytes: 0 });
    const path = join(dir.path, 'whole.json');
    const state = filledState();
    await writeFile(path, JSON.stringify({ format: 'interlink-relay-queues', version: 1, generation: 3, data: state.toData() }));
    const read = await readSnapshot(path, relayQueueFormat(ROOMY));
    expect(read.snapshot?.generation).toBe(3);
    expectSameMessages(read.snapshot!.state, state);
  });

  it('names damage in the line layout and loads nothing from it', async () => {
    const path = join(dir.path, 'good.json');
    await writeSnapshot(path, relayQueueFormat(ROOMY), filledState(), 2);
    const good = (await readFile(path, 'utf8')).split('\n');
    // good: [head, data start, route head, message, ,message, ..., ]}, ,route head, ..., ]}, '}', '']
    const firstRoute = good.findIndex((l) => l.startsWith('{"route":'));
    const swap = (lines: string[], i: number, j: number) => lines.map((l, k) => (k === i ? lines[j]! : k === j ? lines[i]! : l));
    const routeEnd = good.indexOf(']}', firstRoute);
    const routeBlock = good.slice(firstRoute, routeEnd + 1);
    const cases: [string, string[]][] = [
      ['cut before its end', good.slice(0, -2).concat([''])],
      ['without its last newline', good.slice(0, -1)],
      ['ids that decrease', swap(good, firstRoute + 1, firstRoute + 2).map((l, k) => (k === firstRoute + 1 ? l.slice(1) : k === firstRoute + 2 ? `,${l}` : l))],
      ['a route twice', [...good.slice(0, routeEnd + 1), `,${routeBlock[0]}`, ...routeBlock.slice(1), ...good.slice(routeEnd + 1)]],
      ['a comma missing', good.map((l, k) => (k === firstRoute + 2 ? l.slice(1) : l))],
      ['a line after its end', [...good.slice(0, -1), '{}', '']],
      ['ids at next_id', good.map((l, k) => (k === 1 ? '{"next_id":11,"routes":[' : l))],
      ['a route with no message', [...good.slice(0, firstRoute), good[firstRoute]!, ']}', ',' + good[firstRoute]!.slice(0), ...good.slice(firstRoute + 1)]],
      ['a payload that is not an object', good.map((l, k) => (k === firstRoute + 1 ? l.replace('"payload":"{', '"payload":"[') : l))],
      ['another format', good.map((l, k) => (k === 0 ? l.replace('interlink-relay-queues', 'interlink-mailbox') : l))],
    ];
    for (const [what, lines] of cases) {
      const damaged = join(dir.path, 'damaged.json');
      await writeFile(damaged, lines.join('\n'));
      const read = await readSnapshot(damaged, relayQueueFormat(ROOMY));
      expect(read.snapshot, what).toBeUndefined();
      expect(read.damage, what).toMatch(/^snapshot/);
    }
  });
});

describe('the relay journal, replayed in runs', () => {
  let dir: { path: string; remove: () => Promise<void> };
  beforeAll(async () => (dir = await tempDir('interlink-queue-journal-')));
  afterAll(() => dir.remove());

  /** A journal of `count` enqueues of about 100 KiB each: past two runs at 100. */
  async function writeJournal(path: string, count: number): Promise<{ ops: QueueOp[]; ends: number[] }> {
    const ops: QueueOp[] = Array.from({ length: count }, (_, i) => ({ op: 'enq', at: i, route: ROUTES[i % ROUTES.length]!, id: i, payload: `{"n":${i},"text":"${'é'.repeat(50_000)}"}` }));
    const text = [headerLine(relayQueueFormat(), 0), ...ops.map(journalLine)];
    await writeFile(path.replace(/\.json$/, '.journal'), text.join(''));
    const ends: number[] = [];
    let end = 0;
    for (const line of text) ends.push((end += Buffer.byteLength(line)));
    return { ops, ends };
  }

  it('applies every op of a journal bigger than a run, and stops at a torn tail', async () => {
    const path = join(dir.path, 'big.json');
    const { ops, ends } = await writeJournal(path, 100);
    expect(ends.at(-1)!).toBeGreaterThan(2 * RUN_BYTES);
    await appendFile(path.replace(/\.json$/, '.journal'), '0123456789abcdef {"op":"en');
    const loaded = await loadJournaled(path, relayQueueFormat(ROOMY), false);
    const expected = new RelayQueueState(ROOMY);
    for (const op of ops) expected.apply(op);
    expectSameMessages(loaded.state, expected);
    expect(loaded.cursor.offset).toBe(ends.at(-1));
  });

  it('keeps the ops before damage past the first run, and sets the journal aside', async () => {
    const path = join(dir.path, 'damaged.json');
    const journal = path.replace(/\.json$/, '.journal');
    const { ops, ends } = await writeJournal(path, 100);
    // Line 61 (ends[60] is where it starts) is past the first run: a flipped byte in its JSON.
    const at = ends[60]! + 40;
    expect(at).toBeGreaterThan(RUN_BYTES);
    const handle = await open(journal, 'r+');
    await handle.write(Buffer.from('X'), 0, 1, at);
    await handle.close();
    const loaded = await loadJournaled(path, relayQueueFormat(ROOMY), true);
    const expected = new RelayQueueState(ROOMY);
    for (const op of ops.slice(0, 60)) expected.apply(op);
    expectSameMessages(loaded.state, expected);
    expect(loaded.recoveries.map((r) => r.reason)).toEqual([expect.stringContaining(`journal line at byte ${ends[60]! - ends[0]!}`)]);
  });
});

describe('runs of lines', () => {
  it('reads a line longer than a run whole, and says what follows the last newline', async () => {
    const dir = await tempDir('interlink-line-runs-');
    try {
      const path = join(dir.path, 'lines');
      const long = 'x'.repeat(2 * RUN_BYTES + 12_345);
      await writeFile(path, `first\n${long}\nlast\ntail`);
      const handle = await open(path, 'r');
      const lines: string[] = [];
      const read = await readLineRuns(handle, 0, (run) => (lines.push(...linesOf(run)), true));
      await handle.close();
      expect(lines).toEqual(['first', long, 'last']);
      expect(read).toEqual({ partial: 4 });
    } finally {
      await dir.remove();
    }
  });
});
