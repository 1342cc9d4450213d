/**
 * The acknowledgements a relay on PostgreSQL keeps until they are on the standby
 * (src/relay/postgres/acks.ts), against a stand-in for the database's commit.
 */
import { describe, expect, it } from 'vitest';
import { AckBatches, MAX_KEPT_IDS, type Acknowledgement } from '../../src/relay/postgres/acks.js';

/** A database stand-in: records each batch committed, fails while `down`. */
function database(): { committed: Acknowledgement[][]; down: boolean; commit: (acks: readonly Acknowledgement[]) => Promise<number[]> } {
  const db = {
    committed: [] as Acknowledgement[][],
    down: false,
    commit: async (acks: readonly Acknowledgement[]) => {
      if (db.down) throw Object.assign(new Error('down'), { code: 'ECONNREFUSED' });
      db.committed.push(acks.map((a) => ({ route: a.route, ids: [...a.ids] })));
      return acks.map((a) => a.ids.length);
    },
  };
  return db;
}

describe('acknowledgements kept for a redo', () => {
  it('keeps a batch until a synchronous commit that started after it returned, and makes every batch kept again once the database is back', async () => {
    const db = database();
    const acks = new AckBatches(db.commit, 0);
    expect(await acks.acknowledge('r#a', [1, 2])).toBe(2);
    expect(acks.keptIds).toBe(2);
    // A synchronous commit that started before the batch committed confirms nothing.
    const early = { seq: 0, outages: 0 };
    acks.confirm(early);
    expect(acks.keptIds).toBe(2);
    const mark = acks.mark();
    await acks.acknowledge('r#b', [3]);
    acks.confirm(mark);
    expect(acks.keptIds).toBe(1);

    // Lost with the primary: the outage voids the confirmation of a commit under way, and the redo commits the batch again.
    const during = acks.mark();
    acks.outage();
    acks.confirm(during);
    expect(acks.keptIds).toBe(1);
    db.committed.length = 0;
    acks.redo();
    await until(() => db.committed.length === 1);
    expect(db.committed).toEqual([[{ route: 'r#b', ids: [3] }]]);
  });

  it('keeps an acknowledgement whose commit failed, rejects it to its caller, and commits it once the database is back', async () => {
    const db = database();
    const acks = new AckBatches(db.commit, 0);
    db.down = true;
    await expect(acks.acknowledge('r#a', [7])).rejects.toThrow('down');
    expect(acks.keptIds).toBe(1);
    db.down = false;
    acks.redo();
    await until(() => db.committed.length === 1);
    expect(db.committed).toEqual([[{ route: 'r#a', ids: [7] }]]);
  });

  it(`forgets the oldest past ${MAX_KEPT_IDS} ids kept`, async () => {
    const db = database();
    db.down = true;
    const acks = new AckBatches(db.commit, 0);
    const big = Array.from({ length: MAX_KEPT_IDS / 2 }, (_, i) => i);
    for (let i = 0; i < 3; i++) await acks.acknowledge(`r#${i}`, big).catch(() => undefined);
    expect(acks.keptIds).toBe(MAX_KEPT_IDS);
    db.down = false;
    acks.redo();
    await until(() => db.committed.flat().length === 2);
    expect(db.committed.flat().map((a) => a.route)).toEqual(['r#1', 'r#2']);
  });
});

async function until(check: () => boolean): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('the condition did not hold within 5 s');
    await new Promise((r) => setTimeout(r, 5));
  }
}
