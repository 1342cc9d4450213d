/** Reading and acknowledging across this session's mailbox and the ended sessions' it took, on real mailboxes. */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { acknowledgeWhereHeld, presentTogether } from '../../src/agent/inherited.js';
import { Mailbox } from '../../src/mailbox/mailbox.js';
import { message, newIdentity, tempDir } from '../helpers/fixtures.js';

const me = newIdentity(71);
const alice = newIdentity(72);
const carol = newIdentity(73);
let dir: { path: string; remove: () => Promise<void> };
let own: Mailbox;
let ended: Mailbox;
let clock: number;

beforeEach(async () => {
  dir = await tempDir();
  clock = 1_800_000_000_000;
  const now = () => clock++;
  own = await Mailbox.open(join(dir.path, 's2.json'), { now });
  ended = await Mailbox.open(join(dir.path, 's1.json'), { now });
});
afterEach(async () => {
  await own.close();
  await ended.close();
  await dir.remove();
});

const page = async (limit = 20) => presentTogether(await own.fetch(100), [{ session: 's1', fetched: await ended.fetch(100) }], limit);

describe('mail from several mailboxes', () => {
  it("shows each sender's messages in the order it signed them, whichever session they were written to, and marks the taken ones", async () => {
    const base = Date.now();
    // alice's second message reached this session before her first reached the ended one.
    await own.store(message(alice, me, { text: 'a2', ts: base + 2 }));
    await own.store(message(carol, me, { text: 'c1', ts: base + 1 }));
    await ended.store(message(alice, me, { text: 'a1', ts: base + 1 }));
    await ended.store(message(alice, me, { text: 'a3', ts: base + 3 }));
    const { messages, more } = await page();
    expect(messages.map((m) => m.text)).toEqual(['a1', 'c1', 'a2', 'a3']);
    expect(messages.map((m) => m.to_session)).toEqual(['s1', undefined, undefined, 's1']);
    expect(more).toBe(false);
  });

  it('puts progress updates after everything that deserves attention, and says when more wait', async () => {
    const base = Date.now();
    await own.store(message(alice, me, { text: 'progress', ts: base + 1, task_id: 't', status: 'update' }));
    await ended.store(message(carol, me, { text: 'question', ts: base + 2, task_id: 'q', status: 'needs_input' }));
    await ended.store(message(carol, me, { text: 'another', ts: base + 3 }));
    expect((await page()).messages.map((m) => m.text)).toEqual(['question', 'another', 'progress']);
    const first = await page(2);
    expect(first.messages.map((m) => m.text)).toEqual(['question', 'another']);
    expect(first.more).toBe(true);
  });

  it('acknowledges each receipt where it is held and counts what none holds as unknown', async () => {
    const a = message(alice, me, { text: 'mine' });
    const b = message(carol, me, { text: 'taken' });
    await own.store(a);
    await ended.store(b);
    const receipts = [a, b, message(carol, me, { text: 'never seen' })].map((e) => ({ sender: e.from, msg_id: e.msg_id }));
    expect(await acknowledgeWhereHeld(own, [{ mailbox: ended }], receipts)).toEqual({ acknowledged: 2, already_acknowledged: 0, unknown: 1 });
    expect(await acknowledgeWhereHeld(own, [{ mailbox: ended }], receipts.slice(0, 2))).toEqual({ acknowledged: 0, already_acknowledged: 2, unknown: 0 });
    expect((await own.fetch()).messages).toEqual([]);
    expect((await ended.fetch()).messages).toEqual([]);
  });
});
