/**
 * The embedded relay's roster kept under --db (relay/roster-file.ts), with real files and
 * an injected clock: what was announced is there after a restart with its age, goodbyes
 * remove it from the file too, every entry is verified again when read (an edited one is
 * dropped), entries past the retention are not brought back, and a damaged file is an
 * empty roster.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { generateSigningKey, type SigningKey } from '../../src/identity/ed25519.js';
import { signAnnouncement, signGoodbye } from '../../src/presence/announcement.js';
import { Roster, ROSTER_RETAIN_MS } from '../../src/relay/roster.js';
import { RosterFile } from '../../src/relay/roster-file.js';
import { tempDir } from '../helpers/fixtures.js';

function announce(key: SigningKey, session: string, ts: number, summary = 'working') {
  return signAnnouncement(key, { name: 'agent', session, cwd: '/repo', git_root: '/repo', summary, ts });
}

let dir: { path: string; remove: () => Promise<void> };
let file: string;
let now: number;
beforeEach(async () => {
  dir = await tempDir('interlink-roster-file-');
  file = join(dir.path, 'roster.json');
  now = 10_000;
});
afterEach(() => dir.remove());

const open = () => RosterFile.open(new Roster(() => now), file);
const key = generateSigningKey();
const other = generateSigningKey();

describe('the roster under --db', () => {
  it('has after a restart what was announced, in order and with its age', async () => {
    const first = await open();
    const a = announce(key, 's', 1);
    const b = announce(other, 't', 1);
    expect(first.announce(a)).toBe('stored');
    now += 500;
    expect(first.announce(b)).toBe('stored');
    await first.flush();
    now += 1_000;
    const second = await open();
    expect(second.list()).toEqual([
      { announcement: b, age_ms: 1_000 },
      { announcement: a, age_ms: 1_500 },
    ]);
    // A newer announcement from a session after the restart still wins.
    const newer = announce(key, 's', 2, 'later');
    expect(second.announce(newer)).toBe('stored');
    expect(second.announce(a)).toBe('older');
  });

  it('forgets on disk what a goodbye removed', async () => {
    const first = await open();
    first.announce(announce(key, 's', 1));
    first.announce(announce(other, 't', 1));
    expect(first.goodbye(signGoodbye(key, 's', 2))).toBe('removed');
    await first.flush();
    expect((await open()).list().map((e) => e.announcement.session)).toEqual(['t']);
  });

  it('verifies every entry again: an edited one is dropped, the rest kept', async () => {
    const first = await open();
    first.announce(announce(key, 's', 1));
    first.announce(announce(other, 't', 1));
    await first.flush();
    const stored = JSON.parse(await readFile(file, 'utf8')) as { v: 1; entries: { announcement: { summary: string }; received_at: number }[] };
    stored.entries[0]!.announcement.summary = 'forged';
    await writeFile(file, JSON.stringify(stored));
    expect((await open()).list().map((e) => e.announcement.session)).toEqual(['t']);
  });

  it('does not bring back an entry past the retention, and reads a damaged file as an empty roster', async () => {
    const first = await open();
    first.announce(announce(key, 's', 1));
    await first.flush();
    now += ROSTER_RETAIN_MS;
    expect((await open()).list()).toEqual([]);
    await writeFile(file, '{"v": 1, "entries": [');
    const damaged = await open();
    expect(damaged.list()).toEqual([]);
    // And writes a good file again at the next change.
    damaged.announce(announce(other, 't', 5));
    await damaged.flush();
    expect((await open()).list().map((e) => e.announcement.session)).toEqual(['t']);
  });
});
