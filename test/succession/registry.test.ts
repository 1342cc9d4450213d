/** The session registry on disk: real files, several processes' marks, a damaged file. */
import { mkdtemp, readdir, readFile, rm, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { pruned, SessionRegistry } from '../../src/succession/registry.js';
import { INHERIT_MS, STALE_MS, type ProcessEntry } from '../../src/succession/rules.js';
import type { ProcessMark } from '../../src/store/liveness.js';

let dir: string;
let now: number;
const dead = new Set<number>();
const mark = (pid: number): ProcessMark => ({ host: 'h', boot: 'b', pid, start: '' });
const registry = (pid: number) => new SessionRegistry(dir, 'KEY', () => now, (p: ProcessEntry) => dead.has(p.pid), mark(pid));

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'interlink-registry-'));
  now = 1_800_000_000_000;
  dead.clear();
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('session registry', () => {
  it('records a start, heartbeats and a clean exit; the last process out records the end', async () => {
    const one = registry(10);
    const two = registry(11);
    await one.register('s1', 'claude');
    await two.register('s1', 'claude');
    expect((await one.read()).s1!.processes.map((p) => p.pid)).toEqual([10, 11]);
    now += 1_000;
    await one.beat('s1', 'claude');
    expect((await one.read()).s1!.processes.find((p) => p.pid === 10)!.seen_at).toBe(now);
    await one.leave('s1');
    expect((await one.read()).s1).toMatchObject({ processes: [{ pid: 11 }] });
    expect((await one.read()).s1!.ended_at).toBeUndefined();
    now += 1_000;
    await two.leave('s1');
    expect((await one.read()).s1).toMatchObject({ ended_at: now, processes: [] });
    // Starting again makes it live again.
    await one.register('s1', 'claude');
    expect((await one.read()).s1!.ended_at).toBeUndefined();
  });

  it('a beat puts back an entry the file lost (a damaged registry moved aside)', async () => {
    const one = registry(10);
    await one.register('s1', 'codex');
    await writeFile(one.path, '{ not json');
    await one.beat('s1', 'codex');
    expect((await one.read()).s1).toMatchObject({ host: 'codex', processes: [{ pid: 10, seen_at: now }] });
    expect((await readdir(dirname(one.path))).some((name) => name.includes('.corrupt-'))).toBe(true);
  });

  it('a register drops dead processes and sessions ended past the inheritance window', async () => {
    await registry(12).register('old', 'claude');
    await registry(12).leave('old');
    now += INHERIT_MS;
    await registry(10).register('crashed', 'claude');
    const crashedAt = now;
    dead.add(10);
    now += 1_000;
    await registry(14).register('new', 'claude');
    const sessions = await registry(14).read();
    expect(Object.keys(sessions).sort()).toEqual(['crashed', 'new']);
    // A crash records no exit: the session ended at its last heartbeat.
    expect(sessions.crashed).toMatchObject({ processes: [], ended_at: crashedAt });
  });

  it('prunes a silent process as dead', () => {
    const entry = { host: 'claude' as const, started_at: 0, processes: [{ ...mark(2), seen_at: 100 }] };
    expect(pruned({ s: entry }, () => false, 100 + STALE_MS).s).toMatchObject({ processes: [], ended_at: 100 });
    expect(pruned({ s: entry }, () => false, 100 + STALE_MS - 1).s!.processes).toHaveLength(1);
  });

  it('keeps a file that a person can read', async () => {
    await mkdir(join(dir, 'sessions'), { recursive: true });
    await registry(10).register('s1', 'claude');
    const text = await readFile(join(dir, 'sessions', 'KEY.json'), 'utf8');
    expect(JSON.parse(text)).toMatchObject({ v: 1, sessions: { s1: { host: 'claude', started_at: now } } });
  });
});
