/**
 * The acknowledgements a relay on PostgreSQL keeps until they are on the standby
 * (src/relay/postgres/acks.ts), against a stand-in for the database's commit.
 */
import { describe, expect, it } from 'vitest';
import { AckBatches, MAX_KEPT_IDS, MAX_RETRY_SKIP, type Acknowledgement } from '../../src/relay/postgres/acks.js';

interface Database {
  committed: Acknowledgement[][];
  /** Commits tried, failed ones included. */
  tried: number;
  down: boolean;
  /** While set, a commit waits for it before it answers. */
  held: Promise<void> | undefined;
  commit: (acks: readonly Acknowledgement[]) => Promise<number[]>;
}

/** A database stand-in: records each batch committed, fails while `down`. */
function database(): Database {
  const db: Database = {
    committed: [],
    tried: 0,
    down: false,
    held: undefined,
    commit: async (acks) => {
      db.tried++;
      if (db.down) throw Object.assign(new Error('down'), { code: 'ECONNREFUSED' });
      db.committed.push(acks.map((a) => ({ route: a.route, ids: [...a.ids] })));
      await db.held;
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
    const early = { seq: 0, breaks: 0 };
    acks.confirm(early);
    expect(acks.keptIds).toBe(2);
    const mark = acks.mark();
    await acks.acknowledge('r#b', [3]);
    acks.confirm(mark);
    expect(acks.keptIds).toBe(1);

    // Lost with the primary: the outage voids the confirmation of a commit under way, and the redo commits the batch again.
    const during = acks.mark();
    acks.lost();
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

  // The CI failure of postgres-outage.test.ts: the primary was killed and the standby promoted
  // between two beats, so no call failed and no outage was found; the next beat committed on
  // the promoted standby at once and confirmed the batch the old primary took along.
  it('confirms nothing committed before a connection of the pool closed: a failover between two beats, the next beat commits the batch again', async () => {
    const db = database();
    const acks = new AckBatches(db.commit, 0);
    await acks.acknowledge('r#a', [1]);
    // The old primary is killed: the pool's connections close while idle.
    acks.lost();
    // The next beat: its synchronous commit started after the batch and returned (from the promoted standby).
    const beat = acks.mark();
    acks.confirm(beat);
    expect(acks.keptIds).toBe(1);
    db.committed.length = 0;
    acks.retry();
    await until(() => db.committed.length === 1);
    expect(db.committed).toEqual([[{ route: 'r#a', ids: [1] }]]);
    // Committed again after the break, it is confirmed by the beat after; nothing is left to retry.
    acks.confirm(acks.mark());
    expect(acks.keptIds).toBe(0);
    acks.retry();
    expect(acks.keptIds).toBe(0);
  });

  it('confirms nothing of a commit under way when a break came, though it returned after', async () => {
    const db = database();
    const acks = new AckBatches(db.commit, 0);
    let release = () => {};
    db.held = new Promise((r) => (release = r));
    const acked = acks.acknowledge('r#a', [1]);
    await until(() => db.committed.length === 1);
    acks.lost();
    release();
    await acked;
    acks.confirm(acks.mark());
    expect(acks.keptIds).toBe(1);
    acks.retry();
    await until(() => db.committed.length === 2);
  });

  it('commits again, after the next beat, an acknowledgement whose commit failed while the database stayed up', async () => {
    const db = database();
    const acks = new AckBatches(db.commit, 0);
    db.down = true;
    await expect(acks.acknowledge('r#a', [7])).rejects.toThrow('down');
    db.down = false;
    // No outage was found, so no redo comes: the beat's retry commits it.
    acks.retry();
    await until(() => db.committed.length === 1);
    expect(db.committed).toEqual([[{ route: 'r#a', ids: [7] }]]);
    acks.confirm(acks.mark());
    expect(acks.keptIds).toBe(0);
  });

  it(`lets 1, 3, 7… beats pass before each retry while the commits keep failing, ${MAX_RETRY_SKIP} at most`, async () => {
    const db = database();
    const acks = new AckBatches(db.commit, 0);
    db.down = true;
    await expect(acks.acknowledge('r#a', [7])).rejects.toThrow('down');
    const skipped: number[] = [];
    for (let round = 0; round < 8; round++) {
      // A retry takes the acknowledgement out of the kept ones at once, and its failed commit keeps it again.
      let beats = 0;
      for (; acks.keptIds === 1; beats++) {
        if (beats > 2 * MAX_RETRY_SKIP) throw new Error('no retry within twice the longest wait');
        acks.retry();
      }
      skipped.push(beats - 1);
      const tried = db.tried;
      await until(() => db.tried === tried + 1 && acks.keptIds === 1);
    }
    expect(skipped).toEqual([0, 1, 3, 7, 15, 31, 63, 63]);
    // A commit that succeeds ends the wait.
    db.down = false;
    let beats = 0;
    for (; acks.keptIds === 1 && beats <= MAX_RETRY_SKIP; beats++) acks.retry();
    await until(() => db.committed.length === 1);
    db.down = true;
    acks.lost();
    acks.retry();
    await until(() => db.tried === 11 && acks.keptIds === 1);
    acks.retry();
    expect(acks.keptIds).toBe(0);
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
