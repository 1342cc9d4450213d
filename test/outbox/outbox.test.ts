/** The durable outbox: idempotency, acceptance records (committed lazily), reopening. */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Outbox, intentOf, isPending } from '../../src/outbox/outbox.js';
import { message, newIdentity, tempDir } from '../helpers/fixtures.js';

const alice = newIdentity(31);
const bob = newIdentity(32);
const route = `${bob.key}#b1`;

let dir: { path: string; remove: () => Promise<void> };
let path: string;
beforeEach(async () => {
  dir = await tempDir();
  path = join(dir.path, 'outbox', alice.key, 'a1.json');
});
afterEach(() => dir.remove());

/** Rejects if `promise` has not settled within `ms`: a lazily committed op must not wait forever. */
function within<T>(promise: Promise<T>, ms: number): Promise<T> {
  return Promise.race([promise, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`not settled within ${ms} ms`)), ms))]);
}

describe('outbox', () => {
  it('commits every acceptance, however lazy and eager commits interleave', async () => {
    const outbox = await Outbox.open(path);
    const first = message(alice, bob, { text: 'one' });
    const second = message(alice, bob, { text: 'two' });
    const idle = () => new Promise((resolve) => setImmediate(resolve));
    await outbox.add(first, route);
    await idle(); // the commit loop has finished: the next lazy op starts a linger timer
    const acceptedFirst = outbox.markAccepted(first.msg_id, 'ws://r1');
    // An eager commit while the lazy one lingers takes it along...
    await outbox.add(second, route);
    await within(acceptedFirst, 2_000);
    await idle();
    // ...and a lazy commit after that still gets committed on its own.
    await within(outbox.markAccepted(second.msg_id, 'ws://r1'), 2_000);
    await outbox.close();
    const reopened = await Outbox.open(path, { readOnly: true });
    expect((await reopened.all()).map((r) => [r.envelope.text, isPending(r), r.states.map((s) => s.state)])).toEqual([
      ['one', false, ['pending', 'bus_accepted']],
      ['two', false, ['pending', 'bus_accepted']],
    ]);
  });

  it('commits a receiver\'s report with the next send, or alone once its linger (1 s) is over, not sooner', async () => {
    const outbox = await Outbox.open(path);
    const first = message(alice, bob, { text: 'one' });
    await outbox.add(first, route);
    const reportedAt = Date.now();
    let durable = false;
    const report = outbox.recordRemote(bob.key, [{ msg_id: first.msg_id, state: 'receiver_stored', at: 1 }]).then((r) => {
      durable = true;
      return r;
    });
    // A tenth of a second later it still waits for company (an accepted-by-relay record would have gone alone by now).
    await new Promise((resolve) => setTimeout(resolve, 100));
    if (Date.now() - reportedAt < 900) expect(durable).toBe(false);
    await outbox.add(message(alice, bob, { text: 'two' }), route);
    await new Promise((resolve) => setImmediate(resolve));
    expect(durable).toBe(true);
    expect(await report).toEqual({ applied: 1, ignored: 0 });

    // With no send to ride along, a report still commits.
    const alone = outbox.recordRemote(bob.key, [{ msg_id: first.msg_id, state: 'receiver_acknowledged', at: 2 }]);
    expect(await within(alone, 5_000)).toEqual({ applied: 1, ignored: 0 });
    // And one left waiting at close is committed by it.
    const atClose = outbox.recordRemote(bob.key, [{ msg_id: first.msg_id, state: 'receiver_refused', at: 3, code: 'stale' }]);
    await outbox.close();
    expect(await atClose).toEqual({ applied: 1, ignored: 0 });
    const reopened = await Outbox.open(path, { readOnly: true });
    expect((await reopened.get(first.msg_id))?.remote?.map((r) => r.state)).toEqual(['receiver_stored', 'receiver_acknowledged', 'receiver_refused']);
  });

  it('answers a repeated idempotency key with the original record, and a different intent with a conflict', async () => {
    const outbox = await Outbox.open(path);
    const fields = { to: bob.key, session: 'b1', text: 'deploy?' };
    const key = { key: 'k1', intent: intentOf(fields) };
    const m = message(alice, bob, { text: 'deploy?' });
    expect((await outbox.add(m, route, key)).outcome).toBe('added');
    const again = await outbox.add(message(alice, bob, { text: 'deploy?' }), route, key);
    expect(again).toMatchObject({ outcome: 'duplicate', record: { envelope: { msg_id: m.msg_id } } });
    const changed = await outbox.add(message(alice, bob, { text: 'deploy now' }), route, { key: 'k1', intent: intentOf({ ...fields, text: 'deploy now' }) });
    expect(changed.outcome).toBe('conflict');
    await outbox.close();
    expect((await (await Outbox.open(path)).byIdempotencyKey('k1'))?.envelope.msg_id).toBe(m.msg_id);
  });

  it('lists as pending only what no relay accepted, and keeps acceptances per relay', async () => {
    const outbox = await Outbox.open(path);
    const a = message(alice, bob, { text: 'a' });
    const b = message(alice, bob, { text: 'b' });
    await outbox.add(a, route);
    await outbox.add(b, route);
    await outbox.markAccepted(a.msg_id, 'ws://r1');
    await outbox.markAccepted(a.msg_id, 'ws://r2');
    await outbox.markAccepted(a.msg_id, 'ws://r1');
    expect((await outbox.pending()).map((r) => r.envelope.text)).toEqual(['b']);
    expect((await outbox.get(a.msg_id))?.accepted_by).toEqual(['ws://r1', 'ws://r2']);
    await outbox.close();
  });
});
