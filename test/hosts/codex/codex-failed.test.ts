/**
 * Saved Codex notice failures (src/hosts/codex/failed.ts) with real files: the one notice slot,
 * the 64 bound, expiry on an injected clock, damaged files moved aside, concurrent
 * writers in one process and in several, and random operation sequences against a
 * small model.
 */
import { existsSync } from 'node:fs';
import { readdir, readFile, stat, writeFile, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { captureStderr } from '../../helpers/assert.js';
import { z } from 'zod';
import {
  FAILURE_TTL_MS,
  FailedDeliveries,
  failedSessions,
  live,
  MAX_FAILURES,
  withFailure,
  type Failure,
  type NewFailure,
} from '../../../src/hosts/codex/failed.js';
import { failedPath } from '../../../src/config/layout.js';
import { isInterlinkError } from '../../../src/errors.js';
import { raceChildren, reapChildren, startLine, writeScript } from '../../helpers/children.js';
import { tempDir } from '../../helpers/fixtures.js';

const DIST = fileURLToPath(new URL('../../../dist/src/', import.meta.url));
const THREAD = '01a227a4-1fcd-7663-ade6-117faef1cb4e';
const IDENTITY = 'aWRlbnRpdHkta2V5LWZvci10ZXN0cw';
const T0 = 1_700_000_000_000;

/** The file format as the spec describes it, checked independently of the store. */
const onDisk = z.strictObject({
  v: z.literal(1),
  failures: z.array(
    z.strictObject({
      id: z.string().regex(/^f-[0-9a-f]{16}$/),
      kind: z.literal('notice'),
      notification_id: z.string(),
      thread: z.string(),
      message: z.string(),
      outcome: z.enum(['delivery_failed', 'delivery_unknown']),
      reason: z.string(),
      attempts: z.number().int().min(0),
      at: z.number().int(),
      expires_at: z.number().int(),
      retries: z.number().int().min(0),
    }),
  ),
});

let root: { path: string; remove: () => Promise<void> };
let now: number;
let file: string;

beforeEach(async () => {
  root = await tempDir('interlink-failed-');
  now = T0;
  file = failedPath(root.path, IDENTITY, THREAD);
});

afterEach(async () => {
  vi.restoreAllMocks();
  await reapChildren();
  await root.remove();
});

/** A store on the test's clock. */
const store = (path = file): FailedDeliveries => new FailedDeliveries(path, () => now);

function notice(n: number | string, overrides: Partial<NewFailure> = {}): NewFailure {
  return {
    kind: 'notice',
    notification_id: `n-${n}`,
    thread: THREAD,
    message: `1 unread Interlink message (notification_id n-${n}).`,
    outcome: 'delivery_failed',
    reason: 'codex queue failed (exit 1), after 3 attempts',
    attempts: 3,
    ...overrides,
  };
}

/** A complete saved failure, for writing files and for the pure functions. */
function stored(n: number, at: number, overrides: Partial<Failure> = {}): Failure {
  return { ...notice(n), id: `f-${n.toString(16).padStart(16, '0')}`, at, expires_at: at + FAILURE_TTL_MS, retries: 0, ...overrides };
}

async function writeFailures(path: string, failures: Failure[]): Promise<void> {
  await mkdir(join(path, '..'), { recursive: true });
  await writeFile(path, JSON.stringify({ v: 1, failures }, null, 2) + '\n');
}

async function readDisk(path = file): Promise<z.infer<typeof onDisk>> {
  return onDisk.parse(JSON.parse(await readFile(path, 'utf8')));
}

async function asides(dir = join(file, '..')): Promise<string[]> {
  return (await readdir(dir)).filter((name) => name.includes('.corrupt-'));
}

describe('failed deliveries: saving and reading', () => {
  it('reads an absent file as no failures and does not create it', async () => {
    const s = store();
    expect(await s.list()).toEqual([]);
    expect(await s.get('f-0000000000000000')).toBeUndefined();
    expect(await s.discard('f-0000000000000000')).toBe(false);
    await s.clearNotice();
    expect(existsSync(file)).toBe(false);
  });

  it('saves a failure with an id, its time and its expiry, durably and in the documented format', async () => {
    const saved = await store().save(notice(1));
    expect(saved).toEqual({ ...notice(1), id: expect.stringMatching(/^f-[0-9a-f]{16}$/), at: T0, expires_at: T0 + FAILURE_TTL_MS, retries: 0 });
    expect(await readDisk()).toEqual({ v: 1, failures: [saved] });
    // Another store on the same file (another process, later) sees it.
    expect(await store().list()).toEqual([saved]);
    expect(await store().get(saved.id)).toEqual(saved);
    expect(await store().get('f-ffffffffffffffff')).toBeUndefined();
  });

  it('gives every saved failure a fresh id', async () => {
    const ids = new Set<string>();
    for (let i = 0; i < 20; i++) ids.add((await store().save(notice(i))).id);
    expect(ids.size).toBe(20);
  });

  it('keeps one slot for the ordinary notice: a new notice failure replaces the old one', async () => {
    const s = store();
    const first = await s.save(notice(1));
    now += 1_000;
    const second = await s.save(notice(2, { outcome: 'delivery_unknown', reason: 'timed out' }));
    expect(await s.list()).toEqual([second]);
    expect(await s.get(first.id)).toBeUndefined();
    expect(await s.discard(first.id)).toBe(false);
    expect((await readDisk()).failures).toEqual([second]);
  });

  it('keeps each session in its own file', async () => {
    const other = store(failedPath(root.path, IDENTITY, 'c3d4e5f6-0000-4000-8000-000000000003'));
    const mine = await store().save(notice(1));
    const theirs = await other.save(notice(2));
    expect(await store().list()).toEqual([mine]);
    expect(await other.list()).toEqual([theirs]);
  });

  it('places the file under failed/<identity>/<session>.json and refuses unsafe session names', () => {
    expect(failedPath('/state', 'id', 'sess')).toBe('/state/failed/id/sess.json');
    expect(FailedDeliveries.forSession('/state', 'id', 'sess').path).toBe('/state/failed/id/sess.json');
    for (const bad of ['../escape', 'a/b', '', ' lead', 'nul\u0000']) {
      let thrown: unknown;
      try {
        failedPath('/state', 'id', bad);
      } catch (err) {
        thrown = err;
      }
      expect(isInterlinkError(thrown, 'bad_name'), JSON.stringify(bad)).toBe(true);
    }
  });
});

describe('failed deliveries: clearing, discarding and retrying', () => {
  it('clearNotice removes the notice failure after a successful handoff, and writes nothing when there is none', async () => {
    const s = store();
    await s.save(notice(1));
    await s.clearNotice();
    expect(await s.list()).toEqual([]);
    expect(await readDisk()).toEqual({ v: 1, failures: [] });
    const before = await stat(file);
    await s.clearNotice();
    const after = await stat(file);
    // An atomic replace would have given the file a new inode.
    expect(after.ino).toBe(before.ino);
    expect(after.mtimeMs).toBe(before.mtimeMs);
  });

  it('discard removes only the named failure and nothing else in the directory', async () => {
    // Files the store itself never writes with two entries are still valid ones to read.
    const a = stored(1, T0);
    const b = stored(2, T0 + 1);
    await writeFailures(file, [a, b]);
    const neighbour = join(root.path, 'failed', IDENTITY, 'other-session.json');
    await writeFailures(neighbour, [stored(3, T0)]);
    const mailbox = join(root.path, 'mailbox', IDENTITY, `${THREAD}.json`);
    await mkdir(join(mailbox, '..'), { recursive: true });
    await writeFile(mailbox, '{"mail":"stays"}');

    expect(await store().discard(a.id)).toBe(true);
    expect(await store().list()).toEqual([b]);
    expect(await store().discard(a.id)).toBe(false);
    expect((await readDisk(neighbour)).failures).toEqual([stored(3, T0)]);
    expect(await readFile(mailbox, 'utf8')).toBe('{"mail":"stays"}');
  });

  it('discard of an unknown id changes nothing on disk', async () => {
    await store().save(notice(1));
    const before = await stat(file);
    expect(await store().discard('f-0123456789abcdef')).toBe(false);
    expect((await stat(file)).ino).toBe(before.ino);
  });

  it('retried records the new outcome, reason and attempts, and keeps the id and the expiry', async () => {
    const s = store();
    const saved = await s.save(notice(1));
    now += 60_000;
    await s.retried(saved.id, 'delivery_unknown', 'codex queue did not finish', 1);
    expect(await s.get(saved.id)).toEqual({ ...saved, outcome: 'delivery_unknown', reason: 'codex queue did not finish', attempts: 4, retries: 1 });
    await s.retried(saved.id, 'delivery_failed', 'exit 1 again', 3);
    expect(await s.get(saved.id)).toEqual({ ...saved, outcome: 'delivery_failed', reason: 'exit 1 again', attempts: 7, retries: 2 });
  });

  it('retried of an unknown id leaves the saved failures as they were', async () => {
    const saved = await store().save(notice(1));
    await store().retried('f-0123456789abcdef', 'delivery_failed', 'x', 3);
    expect(await store().list()).toEqual([saved]);
  });

  it('reads a file written before retries were counted as zero retries', async () => {
    const { retries: _unused, ...old } = stored(1, T0);
    await mkdir(join(file, '..'), { recursive: true });
    await writeFile(file, JSON.stringify({ v: 1, failures: [old] }));
    expect(await store().list()).toEqual([stored(1, T0)]);
  });
});

describe('failed deliveries: expiry', () => {
  it('keeps a failure for 24 h after saving and not a millisecond more', async () => {
    const s = store();
    const saved = await s.save(notice(1));
    now = T0 + FAILURE_TTL_MS - 1;
    expect(await s.list()).toEqual([saved]);
    expect(await s.get(saved.id)).toEqual(saved);
    now = T0 + FAILURE_TTL_MS;
    expect(await s.list()).toEqual([]);
    expect(await s.get(saved.id)).toBeUndefined();
  });

  it('treats an expired failure as gone for discard too', async () => {
    const s = store();
    const saved = await s.save(notice(1));
    now = T0 + FAILURE_TTL_MS;
    expect(await s.discard(saved.id)).toBe(false);
  });

  it('does not extend the expiry when a failure is retried', async () => {
    const s = store();
    const saved = await s.save(notice(1));
    now = T0 + FAILURE_TTL_MS / 2;
    await s.retried(saved.id, 'delivery_failed', 'again', 3);
    now = T0 + FAILURE_TTL_MS;
    expect(await s.list()).toEqual([]);
  });

  it('drops expired failures from the file at the next save', async () => {
    await writeFailures(file, [stored(1, T0 - FAILURE_TTL_MS), stored(2, T0 - FAILURE_TTL_MS + 5)]);
    now = T0 + 10;
    const fresh = await store().save(notice(3));
    expect((await readDisk()).failures).toEqual([fresh]);
  });

  it('live keeps exactly the failures whose expiry is still ahead', () => {
    const failures = [stored(1, 0), stored(2, 10), stored(3, 20)];
    expect(live(failures, FAILURE_TTL_MS + 9).map((f) => f.notification_id)).toEqual(['n-2', 'n-3']);
    expect(live(failures, FAILURE_TTL_MS + 10).map((f) => f.notification_id)).toEqual(['n-3']);
    expect(live(failures, 0)).toEqual(failures);
  });
});

describe('withFailure (the pure rule behind save)', () => {
  /** A failure of a kind other than the notice slot, as later kinds will be. */
  const other = (n: number, at: number): Failure => ({ ...stored(n, at), kind: 'later' } as unknown as Failure);

  it('keeps at most 64 failures, dropping the oldest first', () => {
    let failures: Failure[] = [];
    for (let i = 0; i < 70; i++) failures = withFailure(failures, other(i, T0 + i), T0 + i);
    expect(MAX_FAILURES).toBe(64);
    expect(failures).toHaveLength(64);
    expect(failures.map((f) => f.notification_id)).toEqual(Array.from({ length: 64 }, (_, i) => `n-${i + 6}`));
  });

  it('replaces only the notice slot and leaves other kinds alone', () => {
    const others = [other(1, T0), other(2, T0)];
    const first = withFailure(others, stored(3, T0), T0);
    expect(first).toEqual([...others, stored(3, T0)]);
    const second = withFailure(first, stored(4, T0 + 1), T0 + 1);
    expect(second).toEqual([...others, stored(4, T0 + 1)]);
    // A later kind never displaces the notice.
    const third = withFailure(second, other(5, T0 + 2), T0 + 2);
    expect(third).toEqual([...others, stored(4, T0 + 1), other(5, T0 + 2)]);
  });

  it('drops expired failures before counting to 64', () => {
    const expired = Array.from({ length: 64 }, (_, i) => other(i, T0 - FAILURE_TTL_MS));
    const result = withFailure(expired, stored(100, T0), T0);
    expect(result).toEqual([stored(100, T0)]);
  });

  it('always ends with the new failure and never holds more than 64 or two notices', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.boolean(), fc.integer({ min: 0, max: 2 * FAILURE_TTL_MS })), { maxLength: 150 }), (steps) => {
        let failures: Failure[] = [];
        let clock = T0;
        steps.forEach(([isNotice, advance], i) => {
          clock += advance % 3 === 0 ? advance : advance % 1_000;
          const next = isNotice ? stored(i, clock) : other(i, clock);
          failures = withFailure(failures, next, clock);
          expect(failures.at(-1)).toBe(next);
          expect(failures.length).toBeLessThanOrEqual(MAX_FAILURES);
          expect(failures.filter((f) => f.kind === 'notice').length).toBeLessThanOrEqual(1);
          expect(live(failures, clock)).toEqual(failures);
        });
      }),
    );
  });
});

describe('failed deliveries: damaged files', () => {
  it.each([
    ['garbage', '{not json at all'],
    ['an empty file', ''],
    ['a JSON array', '[]'],
    ['another version', JSON.stringify({ v: 2, failures: [] })],
    ['a failure missing fields', JSON.stringify({ v: 1, failures: [{ id: 'f-0000000000000001' }] })],
    ['a malformed id', JSON.stringify({ v: 1, failures: [{ ...stored(1, T0), id: 'f-xyz' }] })],
    ['an unknown kind', JSON.stringify({ v: 1, failures: [{ ...stored(1, T0), kind: 'bogus' }] })],
  ])('moves %s aside, reports it, and keeps working', async (_what, content) => {
    const lines = captureStderr();
    await mkdir(join(file, '..'), { recursive: true });
    await writeFile(file, content);

    expect(await store().list()).toEqual([]);
    expect(existsSync(file)).toBe(false);
    const moved = await asides();
    expect(moved).toHaveLength(1);
    expect(moved[0]).toMatch(new RegExp(`^${THREAD}\\.json\\.corrupt-`));
    expect(await readFile(join(file, '..', moved[0]!), 'utf8')).toBe(content);
    expect(lines.join('')).toContain('store_corrupt');

    const saved = await store().save(notice(1));
    expect(await store().list()).toEqual([saved]);
    expect((await readDisk()).failures).toEqual([saved]);
    expect(await asides()).toEqual(moved);
  });

  it('moves a damaged file aside on a write too, and writes a fresh one', async () => {
    captureStderr();
    await mkdir(join(file, '..'), { recursive: true });
    await writeFile(file, '\u0000\u0001 binary junk');
    const saved = await store().save(notice(1));
    expect(await readDisk()).toEqual({ v: 1, failures: [saved] });
    expect(await asides()).toHaveLength(1);
  });
});

describe('failedSessions', () => {
  it('is empty when nothing was ever saved', async () => {
    expect(await failedSessions(root.path, IDENTITY)).toEqual([]);
  });

  it('lists the sessions with a file and ignores files moved aside, temp files and locks', async () => {
    const sessions = ['c3d4e5f6-0000-4000-8000-000000000003', THREAD];
    for (const session of sessions) await store(failedPath(root.path, IDENTITY, session)).save(notice(session));
    const dir = join(root.path, 'failed', IDENTITY);
    await writeFile(join(dir, `gone.json.corrupt-2024-01-01T00-00-00-000Z-abcdef`), 'x');
    await writeFile(join(dir, `.${THREAD}.json.123.abcdef.tmp`), 'x');
    await writeFile(join(dir, `${THREAD}.json.lock`), 'x');
    expect((await failedSessions(root.path, IDENTITY)).sort()).toEqual([...sessions].sort());
    expect(await failedSessions(root.path, 'someone-else')).toEqual([]);
  });
});

describe('failed deliveries: concurrent writers', () => {
  it('20 concurrent saves from two stores leave one valid file holding the last notice', async () => {
    const stores = [store(), store()];
    const saves = Array.from({ length: 20 }, (_, i) => stores[i % 2]!.save(notice(i)));
    const saved = await Promise.all(saves);
    const disk = await readDisk();
    expect(disk.failures).toEqual([saved[19]]);
    expect(await asides()).toEqual([]);
  });

  it('concurrent discards, retries and saves lose nothing beyond the rules', async () => {
    const initial = Array.from({ length: 30 }, (_, i) => stored(i, T0 + i));
    await writeFailures(file, initial);
    const s = store();
    const discards = initial.slice(0, 20).map((f) => s.discard(f.id));
    const unknown = Array.from({ length: 5 }, (_, i) => s.discard(`f-ffffffffffff000${i}`));
    const retries = initial.slice(20, 25).map((f) => store().retried(f.id, 'delivery_unknown', 'retried', 1));
    const [found, missing] = await Promise.all([Promise.all(discards), Promise.all(unknown), Promise.all(retries)]);
    expect(found).toEqual(Array(20).fill(true));
    expect(missing).toEqual(Array(5).fill(false));
    const disk = await readDisk();
    expect(disk.failures.map((f) => f.id)).toEqual(initial.slice(20).map((f) => f.id));
    expect(disk.failures.slice(0, 5).every((f) => f.retries === 1 && f.attempts === 4 && f.outcome === 'delivery_unknown')).toBe(true);
    expect(disk.failures.slice(5).every((f) => f.retries === 0)).toBe(true);
  });

  it('discards from four processes at once all land', async () => {
    const initial = Array.from({ length: 40 }, (_, i) => stored(i, Date.now() + i));
    await writeFailures(file, initial);
    const script = await writeScript(root.path, 'discard.mjs', [
      `import { FailedDeliveries } from ${JSON.stringify(join(DIST, 'hosts/codex/failed.js'))};`,
      ...startLine,
      `const store = new FailedDeliveries(process.argv[2]);`,
      `const found = [];`,
      `for (const id of process.argv.slice(3)) found.push(await store.discard(id));`,
      `process.stdout.write(JSON.stringify(found));`,
    ]);
    const outputs = await raceChildren(script, (i) => [file, ...initial.slice(i * 10, i * 10 + 10).map((f) => f.id)], 4);
    for (const out of outputs) expect(JSON.parse(out)).toEqual(Array(10).fill(true));
    expect(await readDisk()).toEqual({ v: 1, failures: [] });
  });
});

type Op =
  | { op: 'save'; n: number; unknown: boolean }
  | { op: 'clear' }
  | { op: 'discard'; pick: number }
  | { op: 'retried'; pick: number; attempts: number }
  | { op: 'advance'; ms: number };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ op: fc.constant('save' as const), n: fc.nat({ max: 1_000 }), unknown: fc.boolean() }),
  fc.constant({ op: 'clear' as const }),
  fc.record({ op: fc.constant('discard' as const), pick: fc.nat() }),
  fc.record({ op: fc.constant('retried' as const), pick: fc.nat(), attempts: fc.integer({ min: 1, max: 3 }) }),
  fc.record({
    op: fc.constant('advance' as const),
    ms: fc.oneof(fc.constantFrom(1, FAILURE_TTL_MS - 1, FAILURE_TTL_MS, FAILURE_TTL_MS + 1), fc.integer({ min: 0, max: 2 * FAILURE_TTL_MS })),
  }),
);

describe('failed deliveries against a model', () => {
  it('behaves like a list with one notice slot, a 24 h expiry and id-based discard', async () => {
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { maxLength: 25 }), async (ops) => {
        const path = failedPath(root.path, IDENTITY, `model-${run++}`);
        let clock = T0;
        const s = new FailedDeliveries(path, () => clock);
        // The model: saved failures in order, each with its expiry.
        let model: Failure[] = [];
        const seen: string[] = ['f-0000000000000000'];
        const modelLive = () => model.filter((f) => clock < f.at + FAILURE_TTL_MS);
        for (const op of ops) {
          switch (op.op) {
            case 'save': {
              const saved = await s.save(notice(op.n, { outcome: op.unknown ? 'delivery_unknown' : 'delivery_failed' }));
              expect(saved.at).toBe(clock);
              model = [...modelLive().filter((f) => f.kind !== 'notice'), saved];
              seen.push(saved.id);
              break;
            }
            case 'clear':
              await s.clearNotice();
              model = modelLive().filter((f) => f.kind !== 'notice');
              break;
            case 'discard': {
              const id = seen[op.pick % seen.length]!;
              const expected = modelLive().some((f) => f.id === id);
              expect(await s.discard(id)).toBe(expected);
              model = model.filter((f) => f.id !== id);
              break;
            }
            case 'retried': {
              const id = seen[op.pick % seen.length]!;
              await s.retried(id, 'delivery_failed', `retry ${op.attempts}`, op.attempts);
              model = model.map((f) => (f.id === id ? { ...f, outcome: 'delivery_failed', reason: `retry ${op.attempts}`, attempts: f.attempts + op.attempts, retries: f.retries + 1 } : f));
              break;
            }
            case 'advance':
              clock += op.ms;
              break;
          }
          expect(await s.list()).toEqual(modelLive());
          for (const id of seen) expect(await s.get(id)).toEqual(modelLive().find((f) => f.id === id));
        }
        if (existsSync(path)) onDisk.parse(JSON.parse(await readFile(path, 'utf8')));
      }),
      { numRuns: 40 },
    );
    expect(await asides()).toEqual([]);
  });
});
