/**
 * Several real processes on one mailbox, and real kill -9: every commit that returned is
 * there exactly once, and the mailbox always loads.
 */
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Mailbox } from '../../src/mailbox/mailbox.js';
import { newIdentity, tempDir } from '../helpers/fixtures.js';
import { reapAll, spawnNode, type Child } from '../helpers/process.js';

const WRITER = join(import.meta.dirname, '..', '..', 'dist', 'test', 'helpers', 'mailbox-writer.js');
const receiver = newIdentity(9);

let dir: { path: string; remove: () => Promise<void> };
let path: string;
beforeEach(async () => {
  dir = await tempDir();
  path = join(dir.path, 'mailbox', receiver.key, 'main.json');
});
afterEach(async () => {
  await reapAll();
  await dir.remove();
});
afterAll(reapAll);

/** msg_ids a writer reported as committed. */
function committed(child: Child): string[] {
  return child.lines.filter((l) => l !== 'done' && l.length > 0).map((l) => l.split(' ')[0]!);
}

async function expectAllStoredOnce(ids: readonly string[]): Promise<number> {
  const mailbox = await Mailbox.open(path);
  const records = await mailbox.all();
  const stored = new Map<string, number>();
  for (const r of records) stored.set(r.envelope.msg_id, (stored.get(r.envelope.msg_id) ?? 0) + 1);
  for (const id of ids) expect(stored.get(id), `committed ${id} must be stored once`).toBe(1);
  expect([...stored.values()].every((n) => n === 1)).toBe(true);
  return records.length;
}

describe('mailbox across processes', () => {
  it('keeps every commit of four concurrent writers exactly once', async () => {
    const writers = ['a', 'b', 'c', 'd'].map((label) => spawnNode(WRITER, [path, '100', label, '4']));
    const results = await Promise.all(writers.map((w) => w.exited));
    for (const [i, r] of results.entries()) expect(r, writers[i]!.stderr()).toEqual({ code: 0, signal: null });
    const ids = writers.flatMap(committed);
    expect(ids).toHaveLength(400);
    expect(await expectAllStoredOnce(ids)).toBe(400);
  });

  it('loses no returned commit when writers are killed with SIGKILL at random moments', async () => {
    const ids: string[] = [];
    for (let round = 0; round < 12; round++) {
      // 2 KiB bodies make the journal compact every few hundred commits, so kills land in compaction too.
      const writer = spawnNode(WRITER, [path, '100000', `r${round}`, '8', '2048']);
      await writer.waitForLines(1 + Math.floor(Math.random() * 150));
      await writer.kill('SIGKILL');
      ids.push(...committed(writer));
      // The next writer must also get past a lock left by the killed one.
    }
    await expectAllStoredOnce(ids);
  });

  for (const point of ['mailbox.append.before_sync', 'mailbox.append.after_sync', 'mailbox.compact.after_snapshot', 'mailbox.compact.after_journal']) {
    it(`recovers from a kill -9 at ${point}`, async () => {
      // 16 KiB bodies: compaction (past 1 MiB of journal) comes after ~64 commits.
      const writer = spawnNode(WRITER, [path, '200', 'p', '1', String(16 * 1024)], { INTERLINK_CRASH_AT: point });
      const result = await writer.exited;
      expect(result.signal).toBe('SIGKILL');
      const ids = committed(writer);
      await expectAllStoredOnce(ids);
      const after = spawnNode(WRITER, [path, '5', 'q', '1']);
      expect(await after.exited).toEqual({ code: 0, signal: null });
      await expectAllStoredOnce([...ids, ...committed(after)]);
    });
  }
});
