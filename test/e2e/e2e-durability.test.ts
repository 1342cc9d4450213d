/**
 * Nothing accepted is lost: kill -9 of the receiver mid-burst, of the relay with --db,
 * and of the sender with messages still in its outbox; and the zero-config local relay
 * that two servers start at the same moment.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Mailbox } from '../../src/mailbox/mailbox.js';
import { eventually, kill9, pair, startPeer, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { freePort, startRelay } from '../helpers/spawn-relay.js';

let root: string;
const open: Peer[] = [];
const extraPids: number[] = [];

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-durable-'));
});
afterEach(async () => {
  await Promise.all(open.splice(0).map((p) => p.close().catch(() => undefined)));
  for (const pid of extraPids.splice(0)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

async function peer(name: string, session: string, relays: string, env: Record<string, string> = {}): Promise<Peer> {
  const p = await startPeer({ root, name, session, relays, env });
  open.push(p);
  return p;
}

function crash(p: Peer): void {
  kill9(p);
  open.splice(open.indexOf(p), 1);
}

async function identities(alice: Peer, bob: Peer): Promise<{ aliceKey: string; bobKey: string }> {
  const { aKey, bKey } = await pair(alice, bob);
  return { aliceKey: aKey, bobKey: bKey };
}

/** Bob's mailbox, read from disk without touching it. */
async function storedIds(state: string, bobKey: string, session: string): Promise<string[]> {
  const mailbox = await Mailbox.open(join(state, 'mailbox', bobKey, `${session}.json`), { readOnly: true });
  return (await mailbox.all()).map((r) => r.envelope.msg_id);
}

async function sendMany(alice: Peer, count: number, label: string): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i += 20) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(20, count - i) }, (_, j) => alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text: `${label} ${i + j}` })),
    );
    ids.push(...batch.map((r) => r.msg_id));
  }
  return ids;
}

function exactlyOnce(stored: string[], sent: string[]): void {
  expect(new Set(stored).size).toBe(stored.length);
  expect(new Set(stored)).toEqual(new Set(sent));
}

describe('durability end to end', () => {
  it('delivers all 200 messages exactly once when the receiver is killed mid-burst and restarted', async () => {
    const relay = await startRelay({ db: join(root, 'relay-db') });
    const alice = await peer('alice', 'a1', relay.url);
    const bob = await peer('bob', 'b1', relay.url);
    const { bobKey } = await identities(alice, bob);
    const sending = sendMany(alice, 200, 'burst');
    await eventually(async () => ((await storedIds(bob.state, bobKey, 'b1')).length >= 30 ? true : undefined), 20_000, '30 stored');
    crash(bob);
    const sent = await sending;
    const restarted = await peer('bob', 'b1', relay.url);
    const stored = await eventually(
      async () => {
        const ids = await storedIds(restarted.state, bobKey, 'b1');
        return ids.length >= 200 ? ids : undefined;
      },
      30_000,
      'all 200 stored',
    );
    exactlyOnce(stored, sent);
  });

  it('keeps every accepted message across kill -9 of a relay with --db', async () => {
    const port = await freePort();
    const db = join(root, 'relay-db');
    const relay = await startRelay({ port, db });
    const alice = await peer('alice', 'a1', relay.url);
    const bob = await peer('bob', 'b1', relay.url);
    const { bobKey } = await identities(alice, bob);
    await bob.close();
    open.splice(open.indexOf(bob), 1);
    const sent = await sendMany(alice, 50, 'queued');
    for (const id of sent) {
      // Accepted while Bob's session is on no roster: awaiting_session.
      await eventually(async () => ((await alice.call<{ state: string }>('message_status', { msg_id: id })).state === 'awaiting_session' ? true : undefined));
    }
    await relay.child.kill('SIGKILL');
    const again = await startRelay({ port, db });
    const restarted = await peer('bob', 'b1', again.url);
    const stored = await eventually(async () => {
      const ids = await storedIds(restarted.state, bobKey, 'b1');
      return ids.length >= 50 ? ids : undefined;
    });
    exactlyOnce(stored, sent);
  });

  it('sends what was still in the outbox after the sender is killed and restarted', async () => {
    const port = await freePort();
    const url = `ws://127.0.0.1:${port}`;
    const keyFile = join(root, 'relay.key');
    const relay = await startRelay({ port, keyFile });
    const alice = await peer('alice', 'a1', url);
    const bob = await peer('bob', 'b1', url);
    const { bobKey } = await identities(alice, bob);
    await relay.child.kill('SIGKILL');
    const sent = await sendMany(alice, 20, 'offline');
    const pending = await alice.call<{ pending: unknown[] }>('list_pending');
    expect(pending.pending).toHaveLength(20);
    crash(alice);
    await startRelay({ port, keyFile });
    await peer('alice', 'a1', url);
    const stored = await eventually(async () => {
      const ids = await storedIds(bob.state, bobKey, 'b1');
      return ids.length >= 20 ? ids : undefined;
    });
    exactlyOnce(stored, sent);
  });

  it('ends with one local relay when two servers start at once with no INTERLINK_URL', async () => {
    const addr = `127.0.0.1:${await freePort()}`;
    const env = { INTERLINK_URL: '', INTERLINK_LOCAL_RELAY: addr };
    const [alice, bob] = await Promise.all([peer('alice', 'a1', '', env), peer('bob', 'b1', '', env)]);
    const relays = execFileSync('pgrep', ['-f', `relay --addr ${addr}`]).toString().trim().split('\n').map(Number);
    extraPids.push(...relays);
    const { bobKey } = await identities(alice, bob);
    const sent = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text: 'zero config' });
    const stored = await eventually(async () => {
      const ids = await storedIds(bob.state, bobKey, 'b1');
      return ids.length >= 1 ? ids : undefined;
    });
    expect(stored).toEqual([sent.msg_id]);
    const live = await eventually(async () => {
      const pids = execFileSync('pgrep', ['-f', `relay --addr ${addr}`]).toString().trim().split('\n');
      return pids.length === 1 ? pids : undefined;
    });
    expect(live).toHaveLength(1);
  });
});
