/**
 * The syncs DESIGN.md promises, watched as they happen ("Durable files", "The mailbox on
 * disk"): a commit is answered only after the journal holding its line was fdatasynced,
 * and a failed one reported only after the journal, cut back, was fdatasynced without it;
 * an atomic write only after its temp file, whole and not yet in place, was fsynced, and
 * after the directory was fsynced with the file in place. No crash a test can cause
 * loses a write that was never synced (SIGKILL keeps the page cache), so these are the
 * tests that notice a lost sync: removing any one of them fails a test here.
 *
 * The syncs are watched through `syncs` (src/store/sync.ts): each call is described from
 * the files as they are at that moment, then the real sync runs, and its return is noted.
 */
import { fstatSync, readFileSync, statSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Envelope } from '../../src/envelope/envelope.js';
import { Mailbox } from '../../src/mailbox/mailbox.js';
import { writeFileAtomic, writeFileExclusive } from '../../src/store/atomic.js';
import { journalPathOf } from '../../src/store/journal.js';
import { syncs } from '../../src/store/sync.js';
import { message, newIdentity, tempDir } from '../helpers/fixtures.js';

let dir: { path: string; remove: () => Promise<void> };

beforeEach(async () => {
  dir = await tempDir();
});
afterEach(async () => {
  vi.restoreAllMocks();
  vi.unstubAllEnvs();
  // Modules loaded with a fault are dropped, for the next file of this worker (fault-point.test.ts says why).
  vi.resetModules();
  await dir.remove();
});

function inode(path: string): number | undefined {
  try {
    return statSync(path).ino;
  } catch {
    return undefined;
  }
}

/**
 * Records, in order, every sync and what it covered, as `events`; the test adds its own
 * events (`answered`) to the same list, so the list is the order things happened in.
 * `describe` says what a sync of the file or directory with stat `info` covers, now.
 * `watched` is the `syncs` the code under test calls (another instance after resetModules).
 */
function watchSyncs(describe: (info: { ino: number; size: number; directory: boolean }) => string, watched: typeof syncs = syncs): string[] {
  const events: string[] = [];
  const { data, dataNow, handle } = watched;
  const seen = (fd: number): void => {
    const info = fstatSync(fd);
    events.push(describe({ ino: info.ino, size: info.size, directory: info.isDirectory() }));
  };
  vi.spyOn(watched, 'data').mockImplementation(async (fd) => {
    seen(fd);
    await data(fd);
    events.push('returned');
  });
  vi.spyOn(watched, 'dataNow').mockImplementation((fd) => {
    seen(fd);
    dataNow(fd);
    events.push('returned');
  });
  vi.spyOn(watched, 'handle').mockImplementation(async (h) => {
    seen(h.fd);
    await handle(h);
    events.push('returned');
  });
  return events;
}

describe('an atomic write', () => {
  /**
   * Watches the syncs of writes to `path`: the temp file's (its size, and whether it is
   * at `path` yet) and the directory's (whether the file last synced is at `path` by then).
   */
  function watchWrite(path: string): { events: string[]; synced: () => number | undefined } {
    let synced: number | undefined;
    const events = watchSyncs(({ ino, size, directory }) => {
      if (directory) {
        const what = ino === inode(dirname(path)) ? 'its directory' : 'another directory';
        return `fsync ${what}, ${synced !== undefined && inode(path) === synced ? 'with the synced file in place' : 'without the synced file in place'}`;
      }
      synced = ino;
      return `fsync a file of ${size} bytes, ${inode(path) === ino ? 'already in place' : 'not yet in place'}`;
    });
    return { events, synced: () => synced };
  }

  const content = 'the new content, whole';
  const whole = `fsync a file of ${Buffer.byteLength(content)} bytes, not yet in place`;
  const after = ['returned', 'fsync its directory, with the synced file in place', 'returned', 'answered'];

  for (const existing of [false, true]) {
    it(`syncs the whole temp file before the rename, and the directory after it, before it resolves (${existing ? 'replacing a file' : 'a new file'})`, async () => {
      const path = join(dir.path, 'peers.json');
      if (existing) await writeFile(path, 'old');
      const { events, synced } = watchWrite(path);
      await writeFileAtomic(path, content);
      events.push('answered');
      expect(events).toEqual([whole, ...after]);
      expect(inode(path)).toBe(synced());
      expect(readFileSync(path, 'utf8')).toBe(content);
    });
  }

  it('writeFileExclusive syncs the whole temp file before the link, and the directory after it, before it resolves', async () => {
    const path = join(dir.path, 'relay.key');
    const { events, synced } = watchWrite(path);
    expect(await writeFileExclusive(path, content)).toBe(true);
    events.push('answered');
    expect(events).toEqual([whole, ...after]);
    expect(inode(path)).toBe(synced());
  });
});

describe("a journaled store's commit", () => {
  const sender = newIdentity(81);
  const receiver = newIdentity(82);

  /** Watches the syncs of the mailbox at `path`: which of `messages` the file synced holds. */
  function watchJournal(path: string, messages: readonly Envelope[], watched: typeof syncs = syncs): string[] {
    const journal = journalPathOf(path);
    return watchSyncs(({ ino, directory }) => {
      if (directory || ino !== inode(journal)) return `fsync of something else than ${basename(journal)}`;
      const text = readFileSync(journal, 'utf8');
      return `fdatasync ${basename(journal)} holding ${messages.filter((m) => text.includes(m.msg_id)).map((m) => m.text).join(', ')}`;
    }, watched);
  }

  it('fdatasyncs the journal holding the op before it is answered', async () => {
    const path = join(dir.path, 'mailbox', receiver.key, 's1.json');
    const mailbox = await Mailbox.open(path);
    const first = message(sender, receiver, { text: 'first' });
    const second = message(sender, receiver, { text: 'second' });
    const events = watchJournal(path, [first, second]);
    expect((await mailbox.store(first)).outcome).toBe('stored');
    events.push('answered first');
    expect((await mailbox.store(second)).outcome).toBe('stored');
    events.push('answered second');
    await mailbox.close();
    expect(events).toEqual([
      `fdatasync s1.journal holding first`,
      'returned',
      'answered first',
      `fdatasync s1.journal holding first, second`,
      'returned',
      'answered second',
    ]);
  });

  it('answers each of concurrent commits only after a journal sync that held it returned', async () => {
    const path = join(dir.path, 'mailbox', receiver.key, 's1.json');
    const mailbox = await Mailbox.open(path);
    const messages = ['one', 'two', 'three', 'four'].map((text) => message(sender, receiver, { text }));
    const events = watchJournal(path, messages);
    const store = async (m: Envelope): Promise<void> => {
      expect((await mailbox.store(m)).outcome).toBe('stored');
      events.push(`answered ${m.text}`);
    };
    await Promise.all(messages.map(store));
    await mailbox.close();
    for (const m of messages) {
      const answered = events.indexOf(`answered ${m.text}`);
      expect(answered).toBeGreaterThan(0);
      // The last sync that returned before the answer held the message.
      const returned = events.lastIndexOf('returned', answered);
      expect(returned, `a journal sync returned before ${m.text} was answered: ${events.join(' | ')}`).toBeGreaterThan(0);
      expect(events[returned - 1]?.split(' holding ')[1]?.split(', ')).toContain(m.text);
    }
  });

  it('cuts a failed append back and fdatasyncs the journal without its line before the failure is reported', async () => {
    // The second commit's sync fails (src/store/fault-point.ts, read at module load).
    vi.stubEnv('INTERLINK_FAULT_AT', 'mailbox.append.sync@2*1');
    vi.resetModules();
    const fresh = { Mailbox: (await import('../../src/mailbox/mailbox.js')).Mailbox, syncs: (await import('../../src/store/sync.js')).syncs };
    const path = join(dir.path, 'mailbox', receiver.key, 's1.json');
    const mailbox = await fresh.Mailbox.open(path);
    const kept = message(sender, receiver, { text: 'kept' });
    const lost = message(sender, receiver, { text: 'lost' });
    const events = watchJournal(path, [kept, lost], fresh.syncs);
    expect((await mailbox.store(kept)).outcome).toBe('stored');
    events.push('answered kept');
    await expect(mailbox.store(lost)).rejects.toMatchObject({ code: 'storage' });
    events.push('failed lost');
    await mailbox.close();
    expect(events).toEqual(['fdatasync s1.journal holding kept', 'returned', 'answered kept', 'fdatasync s1.journal holding kept', 'returned', 'failed lost']);
  });
});
