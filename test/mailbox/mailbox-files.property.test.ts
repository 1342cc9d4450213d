/**
 * The files say what memory says: after any sequence of stores, acknowledgements,
 * reopenings and compactions, a freshly opened mailbox holds exactly the state that the
 * same operations give in memory.
 */
import fc from 'fast-check';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Envelope } from '../../src/envelope/envelope.js';
import { Mailbox } from '../../src/mailbox/mailbox.js';
import { message, newIdentity, tempDir } from '../helpers/fixtures.js';

const alice = newIdentity(21);
const bob = newIdentity(22);

type Step = { kind: 'store'; big: boolean } | { kind: 'redeliver'; pick: number } | { kind: 'ack'; pick: number } | { kind: 'reopen' };

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ kind: fc.constant('store' as const), big: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('redeliver' as const), pick: fc.nat() }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('ack' as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('reopen' as const) }) },
);

let dir: { path: string; remove: () => Promise<void> };
beforeAll(async () => (dir = await tempDir()));
afterAll(() => dir.remove());

describe('mailbox files', () => {
  it('reopen to exactly the state the operations describe', async () => {
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(stepArb, { maxLength: 40 }), async (steps) => {
        const path = join(dir.path, `run-${run++}`, 'main.json');
        let mailbox = await Mailbox.open(path);
        const sent: Envelope[] = [];
        const expectedUnread = new Set<string>();
        const expectedAcked = new Set<string>();
        for (const step of steps) {
          if (step.kind === 'store') {
            // Large bodies push the journal past the compaction threshold now and then.
            const m = message(alice, bob, { text: step.big ? 'b'.repeat(200 * 1024) : 'small' });
            sent.push(m);
            expect((await mailbox.store(m)).outcome).toBe('stored');
            expectedUnread.add(m.msg_id);
          } else if (step.kind === 'redeliver' && sent.length > 0) {
            expect((await mailbox.store(sent[step.pick % sent.length]!)).outcome).toBe('duplicate');
          } else if (step.kind === 'ack' && sent.length > 0) {
            const m = sent[step.pick % sent.length]!;
            await mailbox.acknowledge([{ sender: m.from, msg_id: m.msg_id }]);
            expectedUnread.delete(m.msg_id);
            expectedAcked.add(m.msg_id);
          } else if (step.kind === 'reopen') {
            mailbox = await Mailbox.open(path);
          }
        }
        const inMemory = await mailbox.all();
        const reopened = await Mailbox.open(path, { readOnly: true });
        const onDisk = await reopened.all();
        expect(onDisk).toEqual(inMemory);
        expect(reopened.recoveries).toEqual([]);
        const unread = new Set((await reopened.fetch(100)).messages.map((r) => r.envelope.msg_id));
        expect(unread).toEqual(expectedUnread);
        for (const id of expectedAcked) expect(unread.has(id)).toBe(false);
      }),
      { numRuns: 25 },
    );
  });
});
