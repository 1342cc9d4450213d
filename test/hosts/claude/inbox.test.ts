/**
 * The inbox files on their own: paths, the writer's validation and tail repair, the
 * reader's bounds, cursor recovery, and (fast-check) that batches read across random
 * complete, partial and invalid appends return every record exactly once, in order.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { appendFile, mkdir, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { InterlinkError } from '../../../src/errors.js';
import {
  appendInboxRecord,
  commitCursor,
  inboxRecordSchema,
  INBOX_BATCH_MAX_BYTES,
  readInboxBatch,
  type InboxRecord,
} from '../../../src/hosts/claude/inbox.js';
import { withListenerLock } from '../../../src/hosts/claude/listener.js';
import { inboxPaths } from '../../../src/config/layout.js';
import { MAX_NOTICE_BYTES } from '../../../src/notices/notice.js';
import { rejectsWith } from '../../helpers/assert.js';
import { tempDir } from '../../helpers/fixtures.js';

let dir: { path: string; remove: () => Promise<void> };
let state: string;
beforeEach(async () => {
  dir = await tempDir('interlink-inbox-');
  state = join(dir.path, 'state');
});
afterEach(async () => {
  await dir.remove();
});

function notice(text: string, session = 's1'): InboxRecord {
  return { v: 1, kind: 'notice', notification_id: `n-${text.slice(0, 20)}`, session, count: 2, at: 1_700_000_000_000, text };
}

async function rawAppend(session: string, text: string): Promise<void> {
  await mkdir(inboxPaths(state, session).dir, { recursive: true });
  await appendFile(inboxPaths(state, session).file, text);
}

async function fileSize(session = 's1'): Promise<number> {
  return (await stat(inboxPaths(state, session).file)).size;
}

describe('inbox paths and records', () => {
  it('lays out inbox/<session>.{jsonl,cursor,lock,io-lock} under the state root', () => {
    expect(inboxPaths('/st', 'abc')).toEqual({
      dir: '/st/inbox',
      file: '/st/inbox/abc.jsonl',
      cursor: '/st/inbox/abc.cursor',
      lock: '/st/inbox/abc.lock',
      ioLock: '/st/inbox/abc.io-lock',
    });
  });

  it('refuses session ids that could leave the inbox directory', () => {
    for (const bad of ['../x', 'a/b', '', 'a\u0000b']) expect(() => inboxPaths('/st', bad)).toThrow(/session id/);
  });

  it('accepts notices up to 12 KiB of text and refuses larger ones with too_large', async () => {
    expect(inboxRecordSchema.safeParse(notice('é'.repeat(MAX_NOTICE_BYTES / 2))).success).toBe(true);
    await rejectsWith(appendInboxRecord(state, 's1', notice('x'.repeat(MAX_NOTICE_BYTES + 1))), 'too_large');
  });

  it('refuses a record for another session, and malformed records', async () => {
    await rejectsWith(appendInboxRecord(state, 's1', notice('hello', 's2')), 'usage');
    await rejectsWith(appendInboxRecord(state, 's1', { ...notice('hello'), count: -1 }), 'usage');
  });

  it('writes one JSON line per record, creating the directory, and leaves no lock behind', async () => {
    await appendInboxRecord(state, 's1', notice('a'));
    await appendInboxRecord(state, 's1', notice('b\nc'));
    const lines = (await readFile(inboxPaths(state, 's1').file, 'utf8')).split('\n');
    expect(lines).toHaveLength(3);
    expect(lines.slice(0, 2).map((l) => inboxRecordSchema.parse(JSON.parse(l)).text)).toEqual(['a', 'b\nc']);
    expect((await readdir(inboxPaths(state, 's1').dir)).sort()).toEqual(['s1.jsonl']);
  });
});

describe('readInboxBatch', () => {
  it('reads nothing from a missing inbox', async () => {
    expect(await readInboxBatch(state, 's1')).toEqual({ records: [], text: '', startOffset: 0, endOffset: 0, skipped: 0 });
  });

  it('returns records from the cursor, their texts as paragraphs, and ends after the last line', async () => {
    await appendInboxRecord(state, 's1', notice('a'));
    const afterA = await fileSize();
    await appendInboxRecord(state, 's1', notice('b'));
    await appendInboxRecord(state, 's1', notice('c'));
    await commitCursor(state, 's1', afterA);
    const batch = await readInboxBatch(state, 's1');
    expect(batch.records.map((r) => r.text)).toEqual(['b', 'c']);
    expect(batch.text).toBe('b\n\nc');
    expect(batch).toMatchObject({ startOffset: afterA, endOffset: await fileSize(), skipped: 0 });
    expect(JSON.parse(await readFile(inboxPaths(state, 's1').cursor, 'utf8'))).toEqual({ offset: afterA });
  });

  it('skips but consumes complete lines that are not valid records', async () => {
    await rawAppend('s1', 'not json\n{"v":2,"kind":"notice"}\n\n');
    await appendInboxRecord(state, 's1', notice('good'));
    const batch = await readInboxBatch(state, 's1');
    expect(batch.records.map((r) => r.text)).toEqual(['good']);
    expect(batch.skipped).toBe(3);
    expect(batch.endOffset).toBe(await fileSize());
  });

  it('stops once the lines read reach 256 KiB', async () => {
    const text = 'x'.repeat(MAX_NOTICE_BYTES);
    for (let i = 0; i < 30; i++) await appendInboxRecord(state, 's1', notice(text));
    const lineBytes = (await fileSize()) / 30;
    const expected = Math.ceil(INBOX_BATCH_MAX_BYTES / lineBytes);
    const first = await readInboxBatch(state, 's1');
    expect(first.records).toHaveLength(expected);
    expect(first.endOffset).toBe(expected * lineBytes);
    await commitCursor(state, 's1', first.endOffset);
    expect((await readInboxBatch(state, 's1')).records).toHaveLength(30 - expected);
  });

  it('returns a record larger than the byte bound alone', async () => {
    for (const t of ['one', 'two']) await appendInboxRecord(state, 's1', notice(t.repeat(500)));
    const batch = await readInboxBatch(state, 's1', { maxBytes: 100 });
    expect(batch.records.map((r) => r.text.slice(0, 3))).toEqual(['one']);
  });

  it('skips a line longer than 1 MiB without holding it whole', async () => {
    await rawAppend('s1', 'y'.repeat(1024 * 1024 + 10) + '\n');
    await appendInboxRecord(state, 's1', notice('after'));
    // The skipped line alone passes the byte bound, so it is a batch of its own.
    const skipped = await readInboxBatch(state, 's1');
    expect(skipped).toMatchObject({ records: [], skipped: 1, endOffset: 1024 * 1024 + 11 });
    await commitCursor(state, 's1', skipped.endOffset);
    expect((await readInboxBatch(state, 's1')).records.map((r) => r.text)).toEqual(['after']);
  });

  it('moves a damaged cursor aside and reads from the start', async () => {
    await appendInboxRecord(state, 's1', notice('a'));
    await writeFile(inboxPaths(state, 's1').cursor, '{"offset": "twelve"');
    const batch = await readInboxBatch(state, 's1');
    expect(batch.records.map((r) => r.text)).toEqual(['a']);
    const names = await readdir(inboxPaths(state, 's1').dir);
    expect(names.some((n) => n.startsWith('s1.cursor.corrupt-'))).toBe(true);
    expect(names).not.toContain('s1.cursor');
  });

  it('reads from the start when the cursor is past the end or inside a line', async () => {
    await appendInboxRecord(state, 's1', notice('a'));
    for (const offset of [(await fileSize()) + 10, 5]) {
      await commitCursor(state, 's1', offset);
      const batch = await readInboxBatch(state, 's1');
      expect(batch).toMatchObject({ startOffset: 0, endOffset: await fileSize() });
      expect(batch.records.map((r) => r.text)).toEqual(['a']);
    }
  });

  it('repairs a partial tail on the next append, so no record is glued to it', async () => {
    await appendInboxRecord(state, 's1', notice('a'));
    await rawAppend('s1', '{"v":1,"kind":"notice","notification_id":"torn"');
    const partial = await readInboxBatch(state, 's1');
    expect(partial.records.map((r) => r.text)).toEqual(['a']);
    await commitCursor(state, 's1', partial.endOffset);
    await appendInboxRecord(state, 's1', notice('b'));
    const batch = await readInboxBatch(state, 's1');
    expect(batch.records.map((r) => r.text)).toEqual(['b']);
    expect(batch.skipped).toBe(0);
    expect(batch.endOffset).toBe(await fileSize());
  });
});

describe('withListenerLock', () => {
  const holder = (pid: number) => JSON.stringify({ host: hostname(), boot: '', pid, start: '', token: `t${pid}` });

  it('tells a caller at once when a live process holds the session', async () => {
    await mkdir(inboxPaths(state, 's1').dir, { recursive: true });
    await writeFile(inboxPaths(state, 's1').lock, holder(process.pid));
    expect(await withListenerLock(state, 's1', async () => 'ran')).toEqual({ held: false });
  });

  it("breaks a dead holder's lock, and passes on errors of its own body", async () => {
    const child = spawn(process.execPath, ['-e', '']);
    await once(child, 'exit');
    await mkdir(inboxPaths(state, 's1').dir, { recursive: true });
    await writeFile(inboxPaths(state, 's1').lock, holder(child.pid!));
    expect(await withListenerLock(state, 's1', async () => 'ran')).toEqual({ held: true, value: 'ran' });
    await rejectsWith(
      withListenerLock(state, 's1', () => Promise.reject(new InterlinkError('busy', 'inner'))),
      'busy',
    );
    await expect(stat(inboxPaths(state, 's1').lock)).rejects.toThrow(/ENOENT/);
  });
});

type Step =
  | { kind: 'append'; text: string }
  | { kind: 'partial'; cut: number }
  | { kind: 'invalid' }
  | { kind: 'read'; maxRecords: number; maxBytes: number };

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('append' as const), text: fc.string({ unit: 'binary', maxLength: 60 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('partial' as const), cut: fc.integer({ min: 1, max: 80 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('invalid' as const) }) },
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constant('read' as const), maxRecords: fc.integer({ min: 1, max: 8 }), maxBytes: fc.integer({ min: 1, max: 600 }) }),
  },
);

describe('readInboxBatch over random appends (property)', () => {
  it('returns every complete record exactly once, in order, and never a partial line', async () => {
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(stepArb, { maxLength: 40 }), async (steps) => {
        const session = `p${run++}`;
        const appended: string[] = [];
        const shown: string[] = [];
        const take = async (limits: { maxRecords?: number; maxBytes?: number }): Promise<number> => {
          const batch = await readInboxBatch(state, session, limits);
          expect(batch.records.length).toBeLessThanOrEqual(limits.maxRecords ?? 64);
          const text = await readFile(inboxPaths(state, session).file).catch(() => Buffer.alloc(0));
          if (batch.endOffset > 0) expect(text[batch.endOffset - 1]).toBe(0x0a);
          const consumed = batch.endOffset - batch.startOffset;
          if (consumed > 0) {
            // The bytes bound stops a batch only after the line that reached it.
            const lastLineStart = text.lastIndexOf(0x0a, batch.endOffset - 2) + 1;
            expect(Math.max(lastLineStart, batch.startOffset) - batch.startOffset).toBeLessThan(limits.maxBytes ?? INBOX_BATCH_MAX_BYTES);
          }
          const full = batch.records.length >= (limits.maxRecords ?? 64) || consumed >= (limits.maxBytes ?? INBOX_BATCH_MAX_BYTES);
          if (!full) expect(text.indexOf(0x0a, batch.endOffset), 'a batch that is not full reads every complete line').toBe(-1);
          shown.push(...batch.records.map((r) => r.text));
          await commitCursor(state, session, batch.endOffset);
          return batch.endOffset - batch.startOffset;
        };
        for (const step of steps) {
          if (step.kind === 'append') {
            await appendInboxRecord(state, session, notice(step.text, session));
            appended.push(step.text);
          } else if (step.kind === 'partial') {
            await rawAppend(session, JSON.stringify(notice('torn', session)).slice(0, step.cut));
          } else if (step.kind === 'invalid') {
            await rawAppend(session, '{"v":1,"kind":"other"}\n');
          } else {
            await take(step);
          }
        }
        while ((await take({})) > 0);
        expect(shown).toEqual(appended);
      }),
      { numRuns: 100 },
    );
  });
});
