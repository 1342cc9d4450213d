/**
 * The first start of a version with the replay index, on a machine whose sessions already
 * admitted messages: the index is filled from every mailbox of the identity (records and
 * tombstones), so a copy of a message one session admitted before the upgrade is not
 * admitted by another after it. Runs only when the index has no files yet; several
 * sessions starting at once may each seed it, which is harmless (a claim by the same
 * session is its own).
 */
import { existsSync, readdirSync } from 'node:fs';
import { sessionFileIn, sessionOfFile } from '../config/layout.js';
import { journalPathOf } from '../store/journal.js';
import { Mailbox } from '../mailbox/mailbox.js';
import { log } from '../log.js';
import type { ReplayIndex } from './claims.js';
import { messageOf } from '../errors.js';

/** Whether the index at `path` has never been written (decide before opening it). */
export function isNewIndex(path: string): boolean {
  return !existsSync(path) && !existsSync(journalPathOf(path));
}

/** Claims, for each session with a mailbox in `mailboxDir`, everything that mailbox admitted. */
export async function seedFromMailboxes(index: ReplayIndex, mailboxDir: string): Promise<number> {
  let names: string[];
  try {
    names = readdirSync(mailboxDir);
  } catch {
    return 0;
  }
  // A mailbox is a snapshot, a journal or both.
  const sessions = [...new Set(names.flatMap((name) => sessionOfFile(name) ?? []))];
  let seeded = 0;
  for (const session of sessions) {
    let admitted: { from: string; msg_id: string; ts: number }[];
    try {
      const mailbox = await Mailbox.open(sessionFileIn(mailboxDir, session), { readOnly: true });
      admitted = await mailbox.admitted();
      await mailbox.close();
    } catch (err) {
      // A damaged mailbox is reported when its own session opens it; the others still seed.
      log.warn('replay_seed_skipped', { session, error: messageOf(err) });
      continue;
    }
    const outcomes = await Promise.all(admitted.map((a) => index.claim({ ...a, session })));
    seeded += outcomes.filter((o) => o.outcome === 'claimed').length;
  }
  if (seeded > 0) log.info('replay_index_seeded', { entries: seeded, sessions: sessions.length });
  return seeded;
}
