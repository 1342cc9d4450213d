/**
 * A full disk under the sender's state root (a tiny tmpfs, which root can mount): sends
 * that run out of space are reported failed, and none of them is ever delivered, also
 * after the disk has room again and the outbox is read back from its files. Sends that
 * were reported `pending` all arrive.
 */
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, open, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { eventually, pair, resultData, startPeer, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { startRelay } from '../helpers/spawn-relay.js';

let root: string;
let disk: string | undefined;
const peers: Peer[] = [];

function tryMount(dir: string): boolean {
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', dir], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

const mountable = (() => {
  if (process.getuid?.() !== 0) return false;
  const probe = join(tmpdir(), `interlink-mount-probe-${process.pid}`);
  execFileSync('mkdir', ['-p', probe]);
  const ok = tryMount(probe);
  if (ok) execFileSync('umount', [probe]);
  execFileSync('rmdir', [probe]);
  return ok;
})();

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-full-disk-'));
});
afterEach(async () => {
  await Promise.all(peers.splice(0).map((p) => p.close().catch(() => undefined)));
  await reapAll();
  if (disk !== undefined) execFileSync('umount', ['-l', disk]);
  disk = undefined;
  await rm(root, { recursive: true, force: true });
});

/** Fills the filesystem at `dir` until a write fails with ENOSPC. */
async function fill(dir: string): Promise<void> {
  const handle = await open(join(dir, 'filler'), 'w');
  const chunk = Buffer.alloc(4096, 0x61);
  try {
    for (let i = 0; i < 4096; i++) await handle.write(chunk);
    throw new Error('the tmpfs never filled up');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
  } finally {
    await handle.close();
  }
}

describe.skipIf(!mountable)('a full disk under the sender', () => {
  it('never delivers a send it reported failed, also after the disk has room again', async () => {
    const relay = await startRelay();
    disk = join(root, 'alice-disk');
    await mkdir(disk);
    expect(tryMount(disk)).toBe(true);
    // alice's state root lives on the tiny disk; her config and bob live elsewhere.
    const alice = await startPeer({ root, name: 'alice', session: 'a1', relays: relay.url, env: { INTERLINK_STATE_DIR: join(disk, 'state') } });
    peers.push(alice);
    const bob = await startPeer({ root, name: 'bob', session: 'b1', relays: relay.url });
    peers.push(bob);
    await pair(alice, bob);
    const warmup = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text: 'warm-up' });
    await eventually(async () => ((await alice.call<{ state: string }>('message_status', { msg_id: warmup.msg_id })).state === 'bus_accepted' ? true : undefined));

    // Leave a little room (a spare file freed after the fill), less than the batch needs.
    await writeFile(join(disk, 'spare'), Buffer.alloc(12 * 1024));
    await fill(disk);
    await rm(join(disk, 'spare'));
    const texts = Array.from({ length: 12 }, (_, i) => `full-disk ${i} ${'x'.repeat(2048)}`);
    const results = await Promise.all(
      texts.map(async (text) => {
        const result = await alice.client.callTool({ name: 'send_message', arguments: { to: 'bob', session: 'b1', text } });
        return { text, failed: result.isError === true, data: resultData(result) as { error?: { code: string } } };
      }),
    );
    const failed = results.filter((r) => r.failed);
    const sent = results.filter((r) => !r.failed);
    expect(failed.length).toBeGreaterThan(0);
    for (const f of failed) expect(f.data.error?.code).toBe('storage');

    // Room again. A new send makes the server read its outbox back from the files.
    await rm(join(disk, 'filler'));
    const after = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text: 'after the disk has room' });
    const expected = new Set([...sent.map((s) => s.text), 'warm-up', 'after the disk has room']);
    const received = await eventually(
      async () => {
        const { pending } = await alice.call<{ pending: unknown[] }>('list_pending');
        const inbox = await bob.call<{ messages: { text: string }[] }>('receive_messages', { limit: 100 });
        const texts = new Set(inbox.messages.map((m) => m.text));
        const waiting = pending.length;
        return waiting === 0 && [...expected].every((t) => texts.has(t)) ? texts : undefined;
      },
      30_000,
      'every send reported pending at bob',
    );
    // A relay took it; bob's receipt may already have moved it on (a receipt leaves 1 s after bob stores it).
    expect(['bus_accepted', 'receiver_stored', 'receiver_acknowledged']).toContain((await alice.call<{ state: string }>('message_status', { msg_id: after.msg_id })).state);
    for (const f of failed) expect(received.has(f.text), f.text.slice(0, 12)).toBe(false);
    expect(received.size).toBe(expected.size);
  });
});
