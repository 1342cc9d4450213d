/**
 * The sidecar lock with real files and real processes: a dead holder's lock is broken at
 * once, a live one is waited on, a lock is only ever removed by its owner or as a dead
 * holder's, and what the OS cannot tell (no /proc: macOS, or `npm run test:noproc`) is
 * never taken as death. This file runs in both the normal and the no-/proc run.
 */
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, open, readFile, readdir, rm, stat, unlink, utimes, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { holderIsDead, processIsRunning, SELF, type ProcessMark, type ProcessProbe } from '../../src/store/liveness.js';
import { holdFileLock, letGoOfKept, withFileLock } from '../../src/store/lock.js';
import { captureStderr, rejectsWith } from '../helpers/assert.js';
import { raceChildren, reapChildren, startChild, startLine, writeScript } from '../helpers/children.js';
import { eventually } from '../helpers/mcp.js';
import { expectProcAsTheRunSays, procShown } from '../helpers/noproc.js';

const DIST = fileURLToPath(new URL('../../dist/src/', import.meta.url));

let dir: string;
let target: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'interlink-lock-'));
  target = join(dir, 'state.json');
});

afterEach(async () => {
  vi.restoreAllMocks();
  await reapChildren();
  await rm(dir, { recursive: true, force: true });
});

/** A lock record as another process would write it; by default a live pid on this host. */
const holderRecord = (fields: Partial<ProcessMark & { token: string }> = {}): string =>
  JSON.stringify({ host: hostname(), boot: SELF.boot, pid: process.pid, start: '', token: 'feedfacefeedface', ...fields });

describe('the run', () => {
  it('has /proc hidden exactly when it is the no-/proc run, and then knows neither boot id nor start times', () => {
    expectProcAsTheRunSays();
    if (!procShown) expect({ boot: SELF.boot, start: SELF.start }).toEqual({ boot: '', start: '' });
    else expect(SELF.start).not.toBe('');
  });
});

describe('holderIsDead', () => {
  const here: ProcessMark = { host: 'h', boot: 'boot-1', pid: 10, start: '100' };
  const probe = (running: boolean, start: string): ProcessProbe => ({ isRunning: () => running, startTime: () => start });
  const cases: Array<[string, Partial<ProcessMark>, Partial<ProcessMark>, ProcessProbe, boolean]> = [
    ['on another host, even with its pid gone', { host: 'other' }, {}, probe(false, ''), false],
    ['from before a reboot', { boot: 'boot-0' }, {}, probe(true, '5'), true],
    ['whose pid is gone', {}, {}, probe(false, ''), true],
    ['whose pid now belongs to a process started later', { start: '5' }, {}, probe(true, '7'), true],
    ['whose pid still runs with the same start time', { start: '5' }, {}, probe(true, '5'), false],
    ['live, when its start time was not recorded (it had no /proc)', { start: '' }, {}, probe(true, '7'), false],
    ['live, when its start time cannot be read now (no /proc here)', { start: '5' }, {}, probe(true, ''), false],
    ['live, when this host has no boot id', { boot: 'boot-0' }, { boot: '' }, probe(true, ''), false],
    ['live, when it recorded no boot id', { boot: '' }, {}, probe(true, ''), false],
    ['dead without /proc anywhere once its pid is gone', { boot: '', start: '' }, { boot: '', start: '' }, probe(false, ''), true],
  ];
  it.each(cases)('judges a holder %s', (_what, holder, self, osProbe, dead) => {
    expect(holderIsDead({ ...here, pid: 20, start: '', ...holder }, { ...here, ...self }, osProbe)).toBe(dead);
  });

  it('asks the OS with a signal-0 probe, which needs no /proc', async () => {
    expect(processIsRunning(process.pid)).toBe(true);
    const child = startChild(await writeScript(dir, 'exit.mjs', [`process.stdout.write('bye\\n');`]), []);
    await child.done;
    expect(processIsRunning(child.child.pid!)).toBe(false);
  });
});

describe('withFileLock across processes', () => {
  /** Holds the lock until a line arrives on stdin, then writes `<marker>` and releases. */
  const holderScript = (): Promise<string> =>
    writeScript(dir, 'hold.mjs', [
      `import { writeFileSync } from 'node:fs';`,
      `import { withFileLock } from ${JSON.stringify(join(DIST, 'store/lock.js'))};`,
      `const [file, marker] = process.argv.slice(2);`,
      `await withFileLock(file, async () => {`,
      `  process.stdout.write('held\\n');`,
      `  await new Promise((resolve) => process.stdin.once('data', resolve));`,
      `  writeFileSync(marker, 'released');`,
      `});`,
    ]);

  it('breaks at once, on the first look, a lock whose holder was killed with SIGKILL', async () => {
    expectProcAsTheRunSays();
    const holder = startChild(await holderScript(), [target, join(dir, 'marker')]);
    await holder.waitFor('held\n');
    const lock = JSON.parse(await readFile(`${target}.lock`, 'utf8')) as { pid: number };
    expect(lock.pid).toBe(holder.child.pid);

    holder.child.kill('SIGKILL');
    expect((await holder.done).signal).toBe('SIGKILL');
    await readFile(`${target}.lock`); // the dead holder's lock is still there

    // A timeout of 0 gives up at the first live holder it finds: this one was broken.
    expect(await withFileLock(target, async () => 'ran', { timeoutMs: 0 })).toBe('ran');
    expect((await readdir(dir)).sort()).toEqual(['hold.mjs']);
  });

  it('waits on a live holder, gives up with busy naming the lock, and takes it once released', async () => {
    expectProcAsTheRunSays();
    const marker = join(dir, 'marker');
    const holder = startChild(await holderScript(), [target, marker]);
    await holder.waitFor('held\n');
    const lockBefore = await readFile(`${target}.lock`, 'utf8');

    // A waiter in another process that keeps trying while the one below gives up: it
    // must not break the lock, and runs only after the holder has finished.
    const patient = startChild(
      await writeScript(dir, 'patient.mjs', [
        `import { existsSync } from 'node:fs';`,
        `import { withFileLock } from ${JSON.stringify(join(DIST, 'store/lock.js'))};`,
        `const [file, marker] = process.argv.slice(2);`,
        `process.stdout.write('trying\\n');`,
        `await withFileLock(file, async () => process.stdout.write(existsSync(marker) ? 'after the holder\\n' : 'before the holder\\n'), { timeoutMs: 30_000 });`,
      ]),
      [target, marker],
    );
    await patient.waitFor('trying\n');
    let ran = false;
    const err = await rejectsWith(
      withFileLock(target, async () => (ran = true), { timeoutMs: 300 }),
      'busy',
    );
    expect(ran).toBe(false);
    expect(err.message).toContain(`${target}.lock`);
    expect(err.message).toContain(String(holder.child.pid));
    expect(err.details).toEqual({ lock: `${target}.lock` });
    expect(await readFile(`${target}.lock`, 'utf8')).toBe(lockBefore);

    holder.child.stdin?.end('go\n');
    expect(await holder.done).toMatchObject({ code: 0 });
    expect(await patient.done).toMatchObject({ code: 0, stdout: 'trying\nafter the holder\n' });
  });

  it('keeps 4 processes incrementing one counter 50 times each from losing an update', async () => {
    const counter = join(dir, 'counter');
    await writeFile(counter, '0');
    const script = await writeScript(dir, 'count.mjs', [
      `import { readFile, writeFile } from 'node:fs/promises';`,
      `import { withFileLock } from ${JSON.stringify(join(DIST, 'store/lock.js'))};`,
      ...startLine,
      `const file = process.argv[2];`,
      `const written = [];`,
      `for (let i = 0; i < 50; i++) {`,
      `  await withFileLock(file, async () => {`,
      `    const next = Number(await readFile(file, 'utf8')) + 1;`,
      `    await writeFile(file, String(next));`,
      `    written.push(next);`,
      `  });`,
      `}`,
      `process.stdout.write(JSON.stringify(written) + '\\n');`,
    ]);
    const outputs = await raceChildren(script, () => [counter], 4);
    expect(await readFile(counter, 'utf8')).toBe('200');
    const written = outputs.flatMap((o) => JSON.parse(o) as number[]).sort((a, b) => a - b);
    expect(written).toEqual(Array.from({ length: 200 }, (_, i) => i + 1));
  });
});

describe('withFileLock keeping the lock between uses', () => {
  const lockFile = () => `${target}.lock`;
  const inode = async () => (await stat(lockFile())).ino;

  it('takes the lock once for a burst of uses and lets go after keepMs without one', async () => {
    await withFileLock(target, async () => undefined, { keepMs: 200 });
    const first = await inode();
    for (let i = 0; i < 20; i++) {
      await withFileLock(target, async () => undefined, { keepMs: 200 });
      expect(existsSync(lockFile())).toBe(true);
    }
    expect(await inode()).toBe(first);
    await eventually(async () => (existsSync(lockFile()) ? undefined : true), 5_000, 'the kept lock to be let go');
    expect(await readdir(dir)).toEqual([]);
  });

  it('lets go at once for a use that keeps nothing', async () => {
    await withFileLock(target, async () => undefined, { keepMs: 60_000 });
    expect(existsSync(lockFile())).toBe(true);
    await withFileLock(target, async () => undefined);
    expect(existsSync(lockFile())).toBe(false);
  });

  it('lets go when it finds the lock removed by hand, logs it, and takes it afresh', async () => {
    const logged = captureStderr();
    await withFileLock(target, async () => undefined, { keepMs: 60_000 });
    await unlink(lockFile());
    const theirs = holderRecord({ token: 'theirs', pid: 1, host: 'another-host' });
    await writeFile(lockFile(), theirs);
    await rejectsWith(withFileLock(target, async () => undefined, { keepMs: 60_000, timeoutMs: 0 }), 'busy');
    expect(logged.join('')).toContain('lock_lost');
    expect(await readFile(lockFile(), 'utf8')).toBe(theirs);
  });

  it('lets go quietly of a kept lock whose directory was removed meanwhile', async () => {
    const logged = captureStderr();
    const nested = join(dir, 'nested', 'state.json');
    await withFileLock(nested, async () => undefined, { keepMs: 60_000 });
    await rm(join(dir, 'nested'), { recursive: true });
    await letGoOfKept(nested);
    expect(logged.join('')).not.toContain('lock_release_failed');
  });

  /**
   * Uses the lock with a minute's keep, `gapMs` apart, until `stop` exists or after
   * `uses` uses (0: back to back), then exits cleanly saying which ended it.
   */
  const keeperScript = (): Promise<string> =>
    writeScript(dir, 'keep.mjs', [
      `import { existsSync } from 'node:fs';`,
      `import { withFileLock } from ${JSON.stringify(join(DIST, 'store/lock.js'))};`,
      `const [file, uses, gapMs, stop] = process.argv.slice(2);`,
      `for (let i = 0; i < Number(uses); i++) {`,
      `  if (existsSync(stop)) { process.stdout.write('stopped\\n'); process.exit(0); }`,
      `  await withFileLock(file, async () => { if (i === 0) process.stdout.write('kept\\n'); }, { keepMs: 60_000 });`,
      `  await new Promise((resolve) => setTimeout(resolve, Number(gapMs)));`,
      `}`,
      `process.stdout.write('done\\n');`,
    ]);

  it('is marked by a process that waits for it, and its holder lets go at the next use', async () => {
    await withFileLock(target, async () => undefined, { keepMs: 60_000 });
    // Held open here too, so the kept lock's inode cannot be reused by the lock that follows it.
    const kept = await open(lockFile(), 'r');
    const keptIno = (await kept.stat()).ino;
    const waiter = startChild(
      await writeScript(dir, 'wait.mjs', [
        `import { withFileLock } from ${JSON.stringify(join(DIST, 'store/lock.js'))};`,
        `await withFileLock(process.argv[2], async () => process.stdout.write('got it\\n'), { timeoutMs: 30_000 });`,
      ]),
      [target],
    );
    // The waiter's mark: the lock's mtime set to the epoch's first second.
    await eventually(async () => ((await stat(lockFile())).mtimeMs <= 1_000 ? true : undefined), 10_000, 'the waiter to mark the lock');
    // This use sees the mark: it lets go and runs under a lock taken afresh, and keeps nothing after it.
    const ranUnder = await withFileLock(target, async () => (await stat(lockFile())).ino, { keepMs: 60_000 });
    await kept.close();
    expect(ranUnder).not.toBe(keptIno);
    expect(await waiter.done).toMatchObject({ code: 0, stdout: 'got it\n' });
  });

  it('hands the lock to another process that waits, while the holder keeps using it', async () => {
    // The holder would keep the lock for a minute; the waiter marks it and gets it at the
    // holder's next use, and leaves the stop file that ends the holder's loop.
    const stop = join(dir, 'stop');
    const holder = startChild(await keeperScript(), [target, '20000', '5', stop]);
    await holder.waitFor('kept\n');
    expect(await withFileLock(target, async () => writeFile(stop, '').then(() => 'mine'), { timeoutMs: 5_000 })).toBe('mine');
    expect(await holder.done).toMatchObject({ code: 0, stdout: 'kept\nstopped\n' });
    expect(existsSync(lockFile())).toBe(false);
  });

  it('lets go at a clean exit, and a kept lock whose holder was killed is broken at once', async () => {
    const clean = startChild(await keeperScript(), [target, '1', '0', join(dir, 'never')]);
    expect(await clean.done).toMatchObject({ code: 0, stdout: 'kept\ndone\n' });
    expect(existsSync(lockFile())).toBe(false);

    expectProcAsTheRunSays();
    const killed = startChild(await keeperScript(), [target, '1', '600000', join(dir, 'never')]);
    await killed.waitFor('kept\n');
    killed.child.kill('SIGKILL');
    await killed.done;
    expect(existsSync(lockFile())).toBe(true);
    expect(await withFileLock(target, async () => 'ran', { timeoutMs: 0 })).toBe('ran');
  });

  it('keeps 4 processes that keep the lock from losing an update', async () => {
    const counter = join(dir, 'counter');
    await writeFile(counter, '0');
    const script = await writeScript(dir, 'count-keep.mjs', [
      `import { readFileSync, writeFileSync } from 'node:fs';`,
      `import { withFileLock } from ${JSON.stringify(join(DIST, 'store/lock.js'))};`,
      ...startLine,
      `const file = process.argv[2];`,
      `for (let i = 0; i < 50; i++) {`,
      `  await withFileLock(file, async () => writeFileSync(file, String(Number(readFileSync(file, 'utf8')) + 1)), { keepMs: 100 });`,
      `}`,
      `process.stdout.write('ok\\n');`,
    ]);
    await raceChildren(script, () => [counter], 4);
    expect(await readFile(counter, 'utf8')).toBe('200');
  });
});

describe('withFileLock in one process', () => {
  it('runs callers one at a time', async () => {
    let active = 0;
    let maxActive = 0;
    let count = 0;
    await Promise.all(
      Array.from({ length: 50 }, () =>
        withFileLock(target, async () => {
          active++;
          maxActive = Math.max(maxActive, active);
          await readdir(dir);
          count++;
          active--;
        }),
      ),
    );
    expect({ count, maxActive }).toEqual({ count: 50, maxActive: 1 });
    expect(await readdir(dir)).toEqual([]);
  });

  it('releases the lock when the critical section throws', async () => {
    await expect(
      withFileLock(target, async () => {
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    expect(await readdir(dir)).toEqual([]);
    expect(await withFileLock(target, async () => 'next', { timeoutMs: 300 })).toBe('next');
  });

  it('leaves in place, and logs, a lock that another process took while it was held', async () => {
    const logged = captureStderr();
    const theirs = holderRecord({ token: 'theirs' });
    await withFileLock(target, async () => {
      // Removed by hand, then taken by another process.
      await unlink(`${target}.lock`);
      await writeFile(`${target}.lock`, theirs);
    });
    expect(await readFile(`${target}.lock`, 'utf8')).toBe(theirs);
    expect(logged.join('')).toContain('lock_lost');
    expect((await readdir(dir)).sort()).toEqual(['state.json.lock']);
  });

  it('leaves in place a lock taken by another after its own was removed, when a held lock is released', async () => {
    captureStderr();
    const release = await holdFileLock(target, 0);
    await unlink(`${target}.lock`);
    const theirs = holderRecord({ token: 'theirs' });
    await writeFile(`${target}.lock`, theirs);
    await release();
    await release();
    expect(await readFile(`${target}.lock`, 'utf8')).toBe(theirs);
  });

  it('releases a held lock once, however often release is called', async () => {
    const release = await holdFileLock(target, 0);
    await rejectsWith(holdFileLock(target, 0), 'busy');
    await Promise.all([release(), release()]);
    const again = await holdFileLock(target, 0);
    await again();
    expect(await readdir(dir)).toEqual([]);
  });
});

describe('withFileLock judging a lock file it finds', () => {
  /** Breaks the lock where the OS can tell, waits on it (and leaves it) where it cannot. */
  async function expectBrokenOnlyIf(canTell: boolean, lock: string): Promise<void> {
    await writeFile(`${target}.lock`, lock);
    if (canTell) {
      expect(await withFileLock(target, async () => 'ran', { timeoutMs: 0 })).toBe('ran');
    } else {
      await rejectsWith(withFileLock(target, async () => 'ran', { timeoutMs: 300 }), 'busy');
      expect(await readFile(`${target}.lock`, 'utf8')).toBe(lock);
    }
  }

  it('breaks a lock whose live pid started at another time where /proc tells start times, and waits on it where not', async () => {
    expectProcAsTheRunSays();
    await expectBrokenOnlyIf(procShown, holderRecord({ start: '1' }));
  });

  it('breaks a lock taken before a reboot where /proc gives a boot id, and waits on it where not', async () => {
    expectProcAsTheRunSays();
    await expectBrokenOnlyIf(SELF.boot !== '', holderRecord({ boot: 'a-previous-boot' }));
  });

  it('never breaks a lock held from another host', async () => {
    await writeFile(`${target}.lock`, holderRecord({ host: 'some-other-host', pid: 999_999_999 }));
    const err = await rejectsWith(withFileLock(target, async () => 'ran', { timeoutMs: 300 }), 'busy');
    expect(err.message).toContain('some-other-host');
  });

  it('waits on an unreadable lock file while it is fresh, and clears it once it is old', async () => {
    const lockFile = `${target}.lock`;
    await writeFile(lockFile, '{"half-written');
    const err = await rejectsWith(withFileLock(target, async () => 'ran', { timeoutMs: 300 }), 'busy');
    expect(err.message).toContain(lockFile);
    const longAgo = new Date(Date.now() - 60_000);
    await utimes(lockFile, longAgo, longAgo);
    expect(await withFileLock(target, async () => 'ran', { timeoutMs: 2000 })).toBe('ran');
  });

  it("judges an unreadable lock that carries a waiter's mark by when it was marked, not by the mark", async () => {
    // The mark (mtime at the epoch's first second) is not an age: such a lock is fresh, then cleared as debris.
    const lockFile = `${target}.lock`;
    await writeFile(lockFile, '{"half-written');
    await utimes(lockFile, 1, 1);
    await rejectsWith(withFileLock(target, async () => 'ran', { timeoutMs: 300 }), 'busy');
    expect(await withFileLock(target, async () => 'ran', { timeoutMs: 5_000 })).toBe('ran');
  });

  it('clears an empty lock a dead creator left within seconds, not ten', async () => {
    // A lock is linked into place whole, so an empty one is debris (an older version's crash).
    await writeFile(`${target}.lock`, '');
    expect(await withFileLock(target, async () => 'ran', { timeoutMs: 5_000 })).toBe('ran');
    expect(existsSync(`${target}.lock`)).toBe(false);
  });

  it('names the path when a directory stands where the lock goes', async () => {
    await mkdir(`${target}.lock`);
    const err = await rejectsWith(withFileLock(target, async () => 'ran', { timeoutMs: 300 }), 'storage');
    expect(err.message).toContain(`${target}.lock is a directory`);
  });

  it('never shows a waiter a lock without its holder, and leaves no temp files behind', async () => {
    const seen: string[] = [];
    await Promise.all(
      Array.from({ length: 20 }, () =>
        withFileLock(target, async () => {
          seen.push(await readFile(`${target}.lock`, 'utf8'));
        }),
      ),
    );
    expect(seen.every((text) => text.includes('"token"'))).toBe(true);
    expect((await readdir(dir)).filter((name) => name.endsWith('.tmp'))).toEqual([]);
  });
});
