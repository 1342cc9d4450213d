/**
 * The calendar and clocks that disagree: a receiver back after days offline gets its
 * mail; one away for longer than the window refuses it visibly (recorded, counted by
 * `status`, shown by `inbox --rejected`); a receiver whose clock runs behind holds a
 * message from the future instead of dropping it, and takes it once it is due. Each
 * receiver's clock is moved with a preload (test/helpers/clock-shift.mjs).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runCli, userEnv } from '../helpers/cli.js';
import { eventually, pair, peerPool, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { processIsRunning } from '../../src/store/liveness.js';
import { startRelay } from '../helpers/spawn-relay.js';

const HOUR = 60 * 60 * 1000;
const DAY = 24 * HOUR;
const PRELOAD = join(import.meta.dirname, '..', 'helpers', 'clock-shift.mjs');

let root: string;
const pool = peerPool(() => root);

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-clocks-'));
});
afterEach(async () => {
  await pool.closeAll();
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

function peer(name: string, session: string, relays: string, offsetMs = 0, extra: Record<string, string> = {}): Promise<Peer> {
  const env: Record<string, string> = offsetMs === 0 ? {} : { NODE_OPTIONS: `--import=${PRELOAD}`, INTERLINK_TEST_CLOCK_OFFSET_MS: String(offsetMs) };
  return pool.start(name, session, relays, { ...env, ...extra });
}

const stop = pool.stop;

type Inbox = { messages: { msg_id: string; text: string }[] };

async function receives(p: Peer, msgId: string, timeoutMs = 15_000): Promise<void> {
  await eventually(async () => ((await p.call<Inbox>('receive_messages')).messages.some((m) => m.msg_id === msgId) ? true : undefined), timeoutMs, `message ${msgId}`);
}

/** Alice and Bob paired; Bob's server stopped, so what Alice sends waits on the relay. */
async function bobAway() {
  const relay = await startRelay();
  const alice = await peer('alice', 'a1', relay.url);
  const bob = await peer('bob', 'b1', relay.url);
  await pair(alice, bob);
  await stop(bob);
  const send = async (text: string) => {
    const sent = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text });
    // Accepted while Bob's session is on no roster: awaiting_session.
    await eventually(async () => ((await alice.call<{ state: string }>('message_status', { msg_id: sent.msg_id })).state === 'awaiting_session' ? true : undefined));
    return sent.msg_id;
  };
  return { relay, alice, send };
}

describe('a receiver back after days offline', () => {
  for (const [label, offset] of [['25 hours', 25 * HOUR], ['6 days', 6 * DAY]] as const) {
    it(`gets the message that waited ${label}`, async () => {
      const { relay, send } = await bobAway();
      const msgId = await send(`waited ${label}`);
      const bob = await peer('bob', 'b1', relay.url, offset);
      await receives(bob, msgId);
    });
  }

  it('after 8 days refuses it as stale, and the refusal is recorded, counted and shown', async () => {
    const { relay, send } = await bobAway();
    const msgId = await send('too late');
    const bob = await peer('bob', 'b1', relay.url, 8 * DAY);
    await eventually(async () => (bob.stderr().includes(msgId) ? true : undefined), 15_000, 'the refusal in the log');
    expect((await bob.call<Inbox>('receive_messages')).messages).toEqual([]);
    const env = userEnv({ root: join(root, 'bob'), configDir: bob.config, stateDir: bob.state }, { INTERLINK_URL: relay.url });
    const shown = await eventually(async () => {
      const run = await runCli(['inbox', '--rejected', '--json'], env);
      const rows = (JSON.parse(run.stdout) as { rejected: { msg_id: string; code: string; sender: string }[] }).rejected;
      return rows.length > 0 ? rows : undefined;
    });
    expect(shown).toEqual([expect.objectContaining({ msg_id: msgId, code: 'stale', sender: 'alice' })]);
    const status = await runCli(['status'], env);
    expect(status.stdout).toContain('refused by the gate: 1 (interlink-mcp inbox --rejected)');
  });
});

interface Status {
  history: { state: string; reported_by?: string; code?: string }[];
}

/** The refusal Bob reported to Alice in a signed receipt, once her session has it. */
function refusalReported(alice: Peer, msgId: string): Promise<Status['history'][number]> {
  return eventually(
    async () => (await alice.call<Status>('message_status', { msg_id: msgId })).history.find((h) => h.state === 'receiver_refused' && h.reported_by === 'receiver'),
    20_000,
    'receiver_refused at the sender',
  );
}

/**
 * A message 170 h old when Bob reads it, with both clocks right by then: Alice sent it while
 * her clock was 170 h behind, and both sessions start again on right clocks. Bob's new
 * process has admitted nothing from Alice: only the sealed body names her session.
 */
async function staleForBob(bobEnv: Record<string, string> = {}) {
  const { relay, alice: first, send } = await bobAway();
  await stop(first);
  const behind = await peer('alice', 'a1', relay.url, -170 * HOUR);
  const sent = await behind.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text: 'waited a week and two hours' });
  // Accepted while Bob's session is on no roster: awaiting_session.
  await eventually(async () => (['bus_accepted', 'awaiting_session'].includes((await behind.call<{ state: string }>('message_status', { msg_id: sent.msg_id })).state) ? true : undefined));
  await stop(behind);
  void send;
  const alice = await peer('alice', 'a1', relay.url);
  const bob = await peer('bob', 'b1', relay.url, 0, bobEnv);
  return { relay, alice, bob, msgId: sent.msg_id };
}

describe('a refusal after the seal was opened is told to the sender, whatever restarted', () => {
  it('a receiver restarted before it refuses a message 170 h old reports receiver_refused (stale)', async () => {
    const { alice, msgId } = await staleForBob();
    expect(await refusalReported(alice, msgId)).toMatchObject({ code: 'stale' });
  });

  it('a receiver killed after the relay forgot the refused message, before the receipt left, reports it when it starts again', async () => {
    const { relay, alice, bob: dying, msgId } = await staleForBob({ INTERLINK_CRASH_AT: 'receipts.before_send' });
    const pid = dying.pid()!;
    await eventually(async () => (!processIsRunning(pid) ? true : undefined), 20_000, 'bob killed at receipts.before_send');
    await stop(dying).catch(() => undefined);
    // The relay was acknowledged before the crash: it has nothing to deliver again.
    await peer('bob', 'b1', relay.url);
    expect(await refusalReported(alice, msgId)).toMatchObject({ code: 'stale' });
  });
});

describe('a receiver whose clock runs behind', () => {
  it('holds a message from its future and takes it once it is due', async () => {
    const { relay, send } = await bobAway();
    const msgId = await send('from the future');
    // Bob's clock is 75 s behind: the message is 75 s ahead of it, beyond the 60 s the gate admits.
    const bob = await peer('bob', 'b1', relay.url, -75_000);
    await eventually(async () => (bob.stderr().includes('inbound_held') || (await bob.call<Inbox>('receive_messages')).messages.length > 0 ? true : undefined));
    await receives(bob, msgId, 40_000);
    expect(bob.stderr()).not.toContain('"code":"from_future"');
  });
});
