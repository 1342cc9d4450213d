/**
 * A disk that fails with EIO under a running server (issue 16, faults below), injected at
 * the fs boundary (INTERLINK_FAULT_AT, store/fault-point.ts) while a flag file exists, so
 * the fault clears while the process keeps running:
 * - the receiver's mailbox append (the write, or its fdatasync) fails while messages
 *   arrive: the server keeps running, logs what fails and where, acknowledges nothing, so
 *   the messages stay queued on the relay; once the fault clears each arrives once, in order;
 * - the sender's outbox append fails: send_message answers `storage` naming the file, no
 *   msg_id, nothing pending and nothing delivered; once it clears, sends work;
 * - the relay's store fails: it refuses the offers, the sender keeps them pending, and
 *   they are delivered once when it clears.
 * Real relay and serve processes, the official MCP SDK client.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { eventually, pair, peerPool, resultData, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { startRelay, type RelayProcess } from '../helpers/spawn-relay.js';

let root: string;
const pool = peerPool(() => root);

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-io-errors-'));
});
afterEach(async () => {
  await pool.closeAll();
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

/** A relay with --db and --metrics; `queued()` reads its queued-messages gauge, `refused(code)` its refusals of that code. */
async function relayWithMetrics(env: Record<string, string> = {}): Promise<RelayProcess & { queued: () => Promise<number>; refused: (code: string) => Promise<number> }> {
  const relay = await startRelay({ db: join(root, 'relay-db'), flags: ['--metrics', '127.0.0.1:0'], env });
  await relay.child.waitForLines(3);
  const url = /(http:\/\/127\.0\.0\.1:\d+\/metrics)/.exec(relay.child.lines.join('\n'))?.[1];
  if (url === undefined) throw new Error(`no metrics address in ${relay.child.lines.join(' | ')}`);
  const queued = async () => {
    const body = await (await fetch(url)).text();
    return Number(/^interlink_relay_queued_messages (\d+)$/m.exec(body)?.[1]);
  };
  const refused = async (code: string) => {
    const body = await (await fetch(url)).text();
    return Number(new RegExp(`^interlink_relay_refused_total\\{code="${code}"\\} (\\d+)$`, 'm').exec(body)?.[1] ?? 0);
  };
  return { ...relay, queued, refused };
}

/** The structured log lines of `event` a server wrote on stderr. */
function logged(stderr: string, event: string): Record<string, unknown>[] {
  return stderr
    .split('\n')
    .filter((line) => line.includes(`"event":"${event}"`))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

async function texts(p: Peer): Promise<string[]> {
  return (await p.call<{ messages: { text: string }[] }>('receive_messages', { limit: 100 })).messages.map((m) => m.text);
}

/** Sends and waits until a relay took it; returns the msg_id. */
async function sendAccepted(alice: Peer, text: string): Promise<string> {
  const { msg_id } = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text });
  await eventually(async () => ((await alice.call<{ state: string }>('message_status', { msg_id })).state !== 'pending' ? true : undefined), 15_000, `${text} taken by the relay`);
  return msg_id;
}

describe('EIO under the receiver', () => {
  for (const step of ['write', 'sync'] as const) {
    it(`keeps running, says so, leaves the messages on the relay, and takes each once and in order when the mailbox ${step} works again`, async () => {
      const relay = await relayWithMetrics();
      const flag = join(root, 'disk-fails');
      const alice = await pool.start('alice', 'a1', relay.url);
      const bob = await pool.start('bob', 'b1', relay.url, { INTERLINK_FAULT_AT: `mailbox.append.${step} while ${flag}` });
      await pair(alice, bob);
      await sendAccepted(alice, 'warm-up');
      await eventually(async () => ((await texts(bob)).includes('warm-up') ? true : undefined), 15_000, 'the warm-up at bob');
      await eventually(async () => ((await relay.queued()) === 0 ? true : undefined), 15_000, 'the relay empty after the warm-up');

      await writeFile(flag, '');
      const sent = ['one', 'two', 'three', 'four', 'five'];
      const ids: string[] = [];
      for (const text of sent) ids.push(await sendAccepted(alice, text));

      // Said where a person looks: the server's log names the file and the error.
      const failure = await eventually(async () => logged(bob.stderr(), 'inbound_storage_failed')[0], 15_000, 'inbound_storage_failed in the log');
      expect(String(failure.error)).toContain(join(bob.state, 'mailbox'));
      expect(String(failure.error)).toContain('(EIO: i/o error)');
      // Nothing acknowledged: all five wait on the relay, none in the mailbox, and the
      // sender is not told they were stored.
      expect(await relay.queued()).toBeGreaterThanOrEqual(sent.length);
      expect(await texts(bob)).toEqual(['warm-up']);
      for (const msg_id of ids) expect((await alice.call<{ state: string }>('message_status', { msg_id })).state).toBe('bus_accepted');
      expect(bob.pid()).not.toBeNull();
      await bob.call('get_my_session_id');

      // The fault clears; the same process takes them, each once and in order.
      await rm(flag);
      const all = await eventually(
        async () => {
          const got = await texts(bob);
          return got.length >= sent.length + 1 ? got : undefined;
        },
        40_000,
        'the five messages at bob',
      );
      expect(all).toEqual(['warm-up', ...sent]);
      await eventually(async () => ((await relay.queued()) === 0 ? true : undefined), 20_000, 'the relay empty again');
      for (const msg_id of ids) {
        await eventually(async () => ((await alice.call<{ state: string }>('message_status', { msg_id })).state === 'receiver_stored' ? true : undefined), 20_000, 'receipts');
      }
      expect(await texts(bob)).toEqual(['warm-up', ...sent]);
    }, 90_000);
  }
});

describe('EIO under the sender', () => {
  it('answers send_message with a storage error naming the outbox, sends nothing, and sends again once the fdatasync works', async () => {
    const relay = await relayWithMetrics();
    const flag = join(root, 'disk-fails');
    const alice = await pool.start('alice', 'a1', relay.url, { INTERLINK_FAULT_AT: `outbox.append.sync while ${flag}` });
    const bob = await pool.start('bob', 'b1', relay.url);
    await pair(alice, bob);
    await sendAccepted(alice, 'warm-up');

    await writeFile(flag, '');
    for (const text of ['lost one', 'lost two', 'lost three']) {
      const result = await alice.client.callTool({ name: 'send_message', arguments: { to: 'bob', session: 'b1', text } });
      expect(result.isError, text).toBe(true);
      const data = resultData(result) as { msg_id?: string; error?: { code: string; message: string } };
      expect(data.msg_id).toBeUndefined();
      expect(data.error?.code).toBe('storage');
      expect(data.error?.message).toContain(join(alice.state, 'outbox'));
      expect(data.error?.message).toContain('(EIO: i/o error)');
    }
    expect((await alice.call<{ pending: unknown[] }>('list_pending')).pending).toEqual([]);
    expect(alice.pid()).not.toBeNull();

    await rm(flag);
    await sendAccepted(alice, 'after');
    await eventually(async () => ((await texts(bob)).includes('after') ? true : undefined), 15_000, 'after at bob');
    // Nothing of the failed sends came back from the files or reached the relay.
    expect(await texts(bob)).toEqual(['warm-up', 'after']);
    expect((await alice.call<{ pending: unknown[] }>('list_pending')).pending).toEqual([]);
  }, 60_000);
});

describe('EIO under the relay', () => {
  it('refuses the offers, the sender keeps them pending, and they arrive once when its store works again', async () => {
    const flag = join(root, 'disk-fails');
    const relay = await relayWithMetrics({ INTERLINK_FAULT_AT: `relay.append.sync while ${flag}` });
    const alice = await pool.start('alice', 'a1', relay.url);
    const bob = await pool.start('bob', 'b1', relay.url);
    await pair(alice, bob);
    await sendAccepted(alice, 'warm-up');

    await writeFile(flag, '');
    const sent = ['one', 'two', 'three'];
    const ids: string[] = [];
    for (const text of sent) ids.push((await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text })).msg_id);
    // Offered again while the relay's disk fails (every second, not at the 30 s idle pass),
    // the oldest first with nothing overtaking it, kept pending, and said on both sides,
    // each once for the episode: the sender's first refusal (agent/refusal-log.ts), the
    // relay's first failure in full and the repeats counted (relay/repeated-log.ts). The
    // relay's refusal counter shows the offers made again.
    await eventually(async () => ((await relay.refused('storage')) >= 3 ? true : undefined), 15_000, 'the oldest message refused again');
    expect(logged(alice.stderr(), 'relay_refused_send')).toEqual([expect.objectContaining({ code: 'storage', msg_id: ids[0] })]);
    const failed = logged(relay.child.stderr(), 'relay_commit_failed');
    expect(failed.length).toBeGreaterThanOrEqual(1);
    expect(String(failed[0]!.error)).toContain(`${join(root, 'relay-db')}`);
    expect(String(failed[0]!.error)).toContain('(EIO: i/o error)');
    for (const msg_id of ids) expect((await alice.call<{ state: string }>('message_status', { msg_id })).state).toBe('pending');

    await rm(flag);
    const all = await eventually(
      async () => {
        const got = await texts(bob);
        return got.length >= sent.length + 1 ? got : undefined;
      },
      // Well before the sender's 30 s idle pass: it offers a refused message again each second.
      10_000,
      'the three messages at bob',
    );
    expect(all).toEqual(['warm-up', ...sent]);
    // The relay delivers to bob and answers alice at the same commit; alice records the
    // acceptance in her outbox a moment later (a race a loaded CI machine lost once).
    await eventually(
      async () => ((await alice.call<{ pending: unknown[] }>('list_pending')).pending.length === 0 ? true : undefined),
      10_000,
      'nothing pending at alice',
    );
  }, 60_000);
});
