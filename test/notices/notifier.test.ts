/** The notifier on a real mailbox, with a fake clock and a recording sink. */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { NoticeOutcome } from '../../src/mailbox/format.js';
import { Mailbox } from '../../src/mailbox/mailbox.js';
import type { Notice } from '../../src/notices/notice.js';
import { Notifier, type NoticeSink } from '../../src/notices/notifier.js';
import { message, newIdentity, tempDir } from '../helpers/fixtures.js';
import { eventually } from '../helpers/mcp.js';

const alice = newIdentity(41);
const bob = newIdentity(42);

let dir: { path: string; remove: () => Promise<void> };
let now: number;
const notifiers: Notifier[] = [];
beforeEach(async () => {
  dir = await tempDir();
  now = 1_900_000_000_000;
});
afterEach(async () => {
  await Promise.all(notifiers.splice(0).map((n) => n.stop()));
  await dir.remove();
});

interface Recording extends NoticeSink {
  notices: { notice: Notice; text: string }[];
}

function recordingSink(outcome: NoticeOutcome | Error = 'inbox_queued'): Recording {
  const notices: { notice: Notice; text: string }[] = [];
  return {
    name: 'recording',
    notices,
    deliver: async (notice, text) => {
      notices.push({ notice, text });
      if (outcome instanceof Error) throw outcome;
      return outcome;
    },
  };
}

/** A sink whose handoffs wait until released (or cut short by close); counts handoffs under way at once. */
function gatedSink(): Recording & { release: () => void; overlapped: () => boolean; closed: () => boolean } {
  const notices: { notice: Notice; text: string }[] = [];
  const gates: ((outcome: NoticeOutcome) => void)[] = [];
  let active = 0;
  let overlapped = false;
  let closed = false;
  return {
    name: 'gated',
    notices,
    deliver: async (notice, text) => {
      notices.push({ notice, text });
      if (++active > 1) overlapped = true;
      const outcome = await new Promise<NoticeOutcome>((resolve) => gates.push(resolve));
      active--;
      return outcome;
    },
    close: () => {
      closed = true;
      for (const gate of gates.splice(0)) gate('delivery_unknown');
    },
    release: () => gates.shift()?.('inbox_queued'),
    overlapped: () => overlapped,
    closed: () => closed,
  };
}

const petnames = async (key: string) => (key === alice.key ? 'alice' : '?');

async function setup(sink: NoticeSink = recordingSink(), senderName = petnames): Promise<{ mailbox: Mailbox; notifier: Notifier }> {
  const mailbox = await Mailbox.open(join(dir.path, 'mailbox', bob.key, 'main.json'), { now: () => now });
  const notifier = new Notifier({ mailbox, identity: bob.key, session: 'main', sink, senderName, now: () => now });
  notifiers.push(notifier);
  return { mailbox, notifier };
}

const receipt = (m: { from: string; msg_id: string }) => ({ sender: m.from, msg_id: m.msg_id });

describe('notifier', () => {
  it('names the peer a mailbox bound refuses, and the bound, in the notice', async () => {
    const sink = recordingSink();
    const mailbox = await Mailbox.open(join(dir.path, 'mailbox', bob.key, 'main.json'), { now: () => now, limits: { maxRecords: 8, maxBytes: 1 << 20, senderRecords: 2 } });
    const notifier = new Notifier({ mailbox, identity: bob.key, session: 'main', sink, senderName: petnames, now: () => now });
    notifiers.push(notifier);
    for (let i = 0; i < 2; i++) expect((await mailbox.store(message(alice, bob, { ts: now + i }))).outcome).toBe('stored');
    expect(await mailbox.store(message(alice, bob, { ts: now + 2 }))).toMatchObject({ outcome: 'full', reason: 'sender_records', sender: alice.key });
    await notifier.reconcile();
    expect(sink.notices).toHaveLength(1);
    const { notice, text } = sink.notices[0]!;
    expect(notice.refusals).toHaveLength(1);
    expect(text).toContain('mail from alice is refused');
    expect(text).toContain('alice holds its share of 2 unread messages (sender_records)');
  });

  it('sends one pointer per reservation, records inbox_queued, and notifies again only after the hold', async () => {
    const sink = recordingSink();
    const { mailbox, notifier } = await setup(sink);
    const m = message(alice, bob, { text: 'SECRET BODY', ts: now });
    await mailbox.store(m, { peer: 'alice' });
    await notifier.reconcile();
    expect(sink.notices).toHaveLength(1);
    const { notice, text } = sink.notices[0]!;
    expect(notice).toMatchObject({ count: 1, senders: ['alice'], session: 'main' });
    expect(text).toContain(notice.notification_id);
    expect(text).toContain('receive_messages');
    expect(text).not.toContain('SECRET BODY');
    expect((await mailbox.get(m.from, m.msg_id))?.states.map((s) => s.state)).toEqual(['receiver_stored', 'inbox_queued']);

    // A second message joins the outstanding reservation: no new notice within 30 s.
    await mailbox.store(message(alice, bob, { ts: now }));
    now += 29_999;
    await notifier.reconcile();
    expect(sink.notices).toHaveLength(1);
    // Then the retry notice covers both, and waits 60 s.
    now += 1;
    await notifier.reconcile();
    expect(sink.notices).toHaveLength(2);
    expect(sink.notices[1]!.notice.count).toBe(2);
    now += 59_999;
    await notifier.reconcile();
    expect(sink.notices).toHaveLength(2);
  });

  it('ends the reservation when everything it covered is acknowledged, and notifies a newer arrival at once', async () => {
    const sink = recordingSink();
    const { mailbox, notifier } = await setup(sink);
    const first = message(alice, bob, { ts: now });
    await mailbox.store(first);
    await notifier.reconcile();
    const second = message(alice, bob, { ts: now });
    await mailbox.store(second);
    await notifier.reconcile();
    expect(sink.notices).toHaveLength(1);
    await mailbox.acknowledge([receipt(first)]);
    expect((await mailbox.noticeState()).reservation).toBeUndefined();
    await notifier.reconcile();
    expect(sink.notices).toHaveLength(2);
    expect(sink.notices[1]!.notice.count).toBe(1);
    await mailbox.acknowledge([receipt(second)]);
    await notifier.reconcile();
    expect(sink.notices).toHaveLength(2);
  });

  it('never wakes for progress', async () => {
    const sink = recordingSink();
    const { mailbox, notifier } = await setup(sink);
    await mailbox.store(message(alice, bob, { ts: now, task_id: 't', status: 'update', text: '40%' }));
    await notifier.reconcile();
    now += 600_000;
    await notifier.reconcile();
    expect(sink.notices).toEqual([]);
  });

  it('records a failed handoff as delivery_failed and tries again after the hold', async () => {
    const sink = recordingSink(new Error('host gone'));
    const { mailbox, notifier } = await setup(sink);
    const m = message(alice, bob, { ts: now });
    await mailbox.store(m);
    await notifier.reconcile();
    expect((await mailbox.get(m.from, m.msg_id))?.states.map((s) => s.state)).toEqual(['receiver_stored', 'delivery_failed']);
    now += 30_000;
    await notifier.reconcile();
    expect(sink.notices).toHaveLength(2);
  });

  it('lets only one notifier of a session wake the host, and another take over when it stops', async () => {
    const sinkA = recordingSink();
    const sinkB = recordingSink();
    const a = await setup(sinkA);
    const b = await setup(sinkB);
    await a.mailbox.store(message(alice, bob, { ts: now }));
    await a.notifier.reconcile();
    await b.notifier.reconcile();
    now += 30_000;
    await b.notifier.reconcile();
    await a.notifier.reconcile();
    expect(sinkA.notices).toHaveLength(2);
    expect(sinkB.notices).toHaveLength(0);
    await a.notifier.stop();
    now += 60_000;
    await b.notifier.reconcile();
    expect(sinkB.notices).toHaveLength(1);
    expect(sinkB.notices[0]!.notice.count).toBe(1);
  });

  it('keeps its reservation across a restart, so a restart is no notice storm', async () => {
    const sink = recordingSink();
    const first = await setup(sink);
    await first.mailbox.store(message(alice, bob, { ts: now }));
    await first.notifier.reconcile();
    await first.notifier.stop();
    const second = await setup(sink);
    await second.notifier.reconcile();
    expect(sink.notices).toHaveLength(1);
  });

  it('runs one more pass for reconciles during a pass, never two at once, and resolves them after it', async () => {
    const sink = gatedSink();
    const { mailbox, notifier } = await setup(sink);
    const m = message(alice, bob, { ts: now });
    await mailbox.store(m);
    const first = notifier.reconcile();
    await eventually(async () => (sink.notices.length === 1 ? true : undefined), 10_000, 'the first handoff');
    // The hold has passed by the time the next pass reads the reservation: it notifies again.
    now += 30_000;
    const second = notifier.reconcile();
    const third = notifier.reconcile();
    sink.release();
    await first;
    await eventually(async () => (sink.notices.length === 2 ? true : undefined), 10_000, 'the second handoff');
    sink.release();
    await Promise.all([second, third]);
    expect((await mailbox.get(m.from, m.msg_id))?.states.map((s) => s.state)).toEqual(['receiver_stored', 'inbox_queued', 'inbox_queued']);
    await notifier.reconcile();
    expect(sink.notices).toHaveLength(2);
    expect(sink.overlapped()).toBe(false);
  });

  it('on stop cuts the handoff short, waits for its pass, and runs no other, even one asked for', async () => {
    const sink = gatedSink();
    const { mailbox, notifier } = await setup(sink);
    const m = message(alice, bob, { ts: now });
    await mailbox.store(m);
    void notifier.reconcile();
    await eventually(async () => (sink.notices.length === 1 ? true : undefined), 10_000, 'the handoff');
    now += 30_000;
    const asked = notifier.reconcile();
    await notifier.stop();
    expect(sink.closed()).toBe(true);
    expect((await mailbox.get(m.from, m.msg_id))?.states.map((s) => s.state)).toEqual(['receiver_stored', 'delivery_unknown']);
    await asked;
    await notifier.reconcile();
    expect(sink.notices).toHaveLength(1);
  });

  it('keeps reconciling after a pass failed', async () => {
    const sink = recordingSink();
    let failures = 1;
    const { mailbox, notifier } = await setup(sink, async (key) => {
      if (failures-- > 0) throw new Error('peers.json unreadable');
      return petnames(key);
    });
    await mailbox.store(message(alice, bob, { ts: now }));
    await notifier.reconcile();
    expect(sink.notices).toEqual([]);
    now += 30_000;
    await notifier.reconcile();
    expect(sink.notices.map((n) => n.notice.senders)).toEqual([['alice']]);
  });
});
