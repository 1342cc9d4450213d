import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { readJsonLines, wholeLines } from './json-lines.js';
import { reapAll, spawnNode } from './process.js';

const dirs: string[] = [];
afterEach(async () => {
  await reapAll();
  await Promise.all(dirs.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
});

describe('wholeLines', () => {
  it('leaves out the text after the last newline and empty lines', () => {
    expect(wholeLines('')).toEqual([]);
    expect(wholeLines('{"a":')).toEqual([]);
    expect(wholeLines('{"a":1}\n\n{"b":')).toEqual(['{"a":1}']);
    expect(wholeLines('{"a":1}\n{"b":2}\n')).toEqual(['{"a":1}', '{"b":2}']);
  });
});

describe('readJsonLines', () => {
  it('reads a log another process appends long lines to without seeing half a line', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'interlink-json-lines-'));
    dirs.push(dir);
    const log = join(dir, 'log.jsonl');
    const lines = 200;
    // The fake model servers write their request logs this way: one appendFileSync per line.
    const writer = spawnNode('-e', [
      `const { appendFileSync } = require('node:fs');
       for (let i = 0; i < ${lines}; i++) appendFileSync(process.argv[1], JSON.stringify({ i, pad: 'x'.repeat(256 * 1024) }) + '\\n');`,
      log,
    ]);
    let seen = 0;
    let reads = 0;
    for (const deadline = Date.now() + 60_000; seen < lines && Date.now() < deadline; reads++) {
      const read = await readJsonLines(log);
      expect(read.length).toBeGreaterThanOrEqual(seen);
      read.forEach((entry, i) => expect((entry as { i: number }).i).toBe(i));
      seen = read.length;
    }
    expect(await writer.exited).toEqual({ code: 0, signal: null });
    expect((await readJsonLines(log)).length).toBe(lines);
    expect(reads).toBeGreaterThan(1);
  });

  it('is empty before the log exists', async () => {
    expect(await readJsonLines(join(tmpdir(), 'interlink-json-lines-none', 'log.jsonl'))).toEqual([]);
  });
});
