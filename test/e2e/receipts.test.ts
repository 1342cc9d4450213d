/**
 * Signed receipts (issue 15): the receiver reports `receiver_stored` and
 * `receiver_acknowledged` to the sender's session, which shows them as reported by the
 * receiver, apart from its own states; a receipt never wakes a host and is never itself
 * receipted; a receipt signed by a stranger is refused, one in a peer's name whose
 * signature does not verify is refused without touching the outbox, and one from a peer
 * about a message that peer was never sent changes nothing. Real serve processes, the SDK client,
 * and a lying relay (test/helpers/lying-relay.ts) for the forgeries.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { wireOf } from '../../src/envelope/envelope.js';
import { signEnvelope } from '../../src/envelope/sign.js';
import { loadIdentity } from '../../src/identity/identity.js';
import { receiptText } from '../../src/receipts/receipts.js';
import { runCli, userEnv } from '../helpers/cli.js';
import { newIdentity } from '../helpers/fixtures.js';
import { LyingRelay } from '../helpers/lying-relay.js';
import { eventually, pair, peerPool, type Peer } from '../helpers/mcp.js';

interface Status {
  state: string;
  history: { state: string; at: number; reported_by?: string }[];
}

let root: string;
let relay: LyingRelay;
const pool = peerPool(() => root);

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-receipts-'));
  relay = await LyingRelay.start();
});
afterEach(async () => {
  await pool.closeAll();
  await relay.close();
  await rm(root, { recursive: true, force: true });
});

async function status(p: Peer, msgId: string): Promise<Status> {
  return p.call<Status>('message_status', { msg_id: msgId });
}

function stateIs(p: Peer, msgId: string, state: string): Promise<Status> {
  return eventually(async () => {
    const s = await status(p, msgId);
    return s.state === state ? s : undefined;
  }, 15_000, `${msgId} ${state}`);
}

/** The notices a Claude-mode session wrote to its inbox file. */
async function notices(p: Peer, session: string): Promise<string[]> {
  const text = await readFile(join(p.state, 'inbox', `${session}.jsonl`), 'utf8').catch(() => '');
  return text.split('\n').filter((line) => line !== '');
}

describe('signed receipts', () => {
  it('drive the sender to receiver_stored and receiver_acknowledged, reported by the receiver, without a notice or a receipt of a receipt', async () => {
    const alice = await pool.start('alice', 'a1', relay.url);
    const bob = await pool.start('bob', 'b1', relay.url);
    const { aKey, bKey } = await pair(alice, bob);
    await Promise.all([relay.reader(`${aKey}#a1`), relay.reader(`${bKey}#b1`)]);

    const sent = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text: 'please review' });
    const stored = await stateIs(alice, sent.msg_id, 'receiver_stored');
    expect(stored.history.map((h) => [h.state, h.reported_by])).toEqual([
      ['pending', undefined],
      ['bus_accepted', undefined],
      ['receiver_stored', 'receiver'],
    ]);

    const got = await eventually(async () => {
      const inbox = await bob.call<{ messages: { msg_id: string; receipt: { sender: string; msg_id: string } }[] }>('receive_messages');
      return inbox.messages.length > 0 ? inbox : undefined;
    });
    await bob.call('acknowledge_messages', { messages: [got.messages[0]!.receipt] });
    const acked = await stateIs(alice, sent.msg_id, 'receiver_acknowledged');
    const remote = acked.history.filter((h) => h.reported_by === 'receiver');
    expect(remote.map((h) => h.state)).toEqual(['receiver_stored', 'receiver_acknowledged']);
    expect(remote[1]!.at).toBeGreaterThanOrEqual(remote[0]!.at);

    // The receipts went as sealed envelopes of kind receipt, from bob to alice's session.
    const receipts = relay.sent.filter((s) => s.payload.kind === 'receipt');
    expect(receipts.length).toBeGreaterThanOrEqual(1);
    for (const r of receipts) {
      expect(r.to).toBe(`${aKey}#a1`);
      expect(r.payload).toMatchObject({ v: 4, from: bKey, to: aKey, to_session: 'a1' });
      expect(r.payload).not.toHaveProperty('text');
    }
    // No notice for alice, nothing in her mailbox, and no receipt sent back for a receipt.
    expect(await notices(alice, 'a1')).toEqual([]);
    expect((await alice.call<{ messages: unknown[] }>('receive_messages')).messages).toEqual([]);
    expect(relay.sent.filter((s) => s.payload.kind === 'receipt' && s.payload.from === aKey)).toEqual([]);

    // A person sees the same at the terminal.
    const run = await runCli(['inbox', '--sent', '--json'], userEnv({ root, configDir: alice.config, stateDir: alice.state }));
    expect(run.code, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject({ sent: [{ msg_id: sent.msg_id, state: 'receiver_acknowledged', reported_by: 'receiver' }] });
    const text = await runCli(['inbox', '--sent'], userEnv({ root, configDir: alice.config, stateDir: alice.state }));
    expect(text.stdout).toContain('receiver_acknowledged (reported by the receiver)');
  });

  it('refuses a receipt signed by a stranger, and ignores one from a peer about a message it was never sent or one it does not know', async () => {
    const alice = await pool.start('alice', 'a1', relay.url);
    const bob = await pool.start('bob', 'b1', relay.url);
    const carol = await pool.start('carol', 'c1', relay.url);
    const { aKey } = await pair(alice, bob);
    await pair(alice, carol, { a: 'alice', b: 'carol' });
    await relay.reader(`${aKey}#a1`);
    // Bob is offline from here on: what he would report, nobody else can.
    await pool.stop(bob);

    const sent = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text: 'for bob only' });
    await stateIs(alice, sent.msg_id, 'bus_accepted');
    const forged = (from: { signingKey: Parameters<typeof signEnvelope>[0] }, msgId: string) =>
      wireOf(signEnvelope(from.signingKey, { to: aKey, to_session: 'a1', kind: 'receipt', text: receiptText([{ msg_id: msgId, state: 'receiver_acknowledged', at: Date.now() }]) })) as unknown as Record<string, unknown>;

    const stranger = newIdentity();
    await relay.deliver(`${aKey}#a1`, forged(stranger, sent.msg_id));
    const carolId = await loadIdentity(join(carol.config, 'id.key'));
    await relay.deliver(`${aKey}#a1`, forged(carolId, sent.msg_id));
    await relay.deliver(`${aKey}#a1`, forged(carolId, 'f'.repeat(32)));

    const now = await status(alice, sent.msg_id);
    expect(now.state).toBe('bus_accepted');
    expect(now.history.some((h) => h.reported_by !== undefined)).toBe(false);
    const refusals = alice
      .stderr()
      .split('\n')
      .filter((line) => line.includes('"inbound_rejected"'))
      .map((line) => (JSON.parse(line) as { code: string; from: string }).code);
    expect(refusals).toEqual(['not_allowlisted']);
    expect(await notices(alice, 'a1')).toEqual([]);
  });

  it("refuses a receipt in a peer's name whose signature does not verify, leaving the outbox as it was; the peer's genuine receipt still counts", async () => {
    const alice = await pool.start('alice', 'a1', relay.url);
    const bob = await pool.start('bob', 'b1', relay.url);
    const { aKey, bKey } = await pair(alice, bob);
    await relay.reader(`${aKey}#a1`);
    // Bob is offline from here on: every receipt alice gets is the test's.
    await pool.stop(bob);

    const sent = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text: 'for bob only' });
    await stateIs(alice, sent.msg_id, 'bus_accepted');
    const bobId = await loadIdentity(join(bob.config, 'id.key'));
    const receipt = (from: { signingKey: Parameters<typeof signEnvelope>[0] }) =>
      wireOf(signEnvelope(from.signingKey, { to: aKey, to_session: 'a1', kind: 'receipt', text: receiptText([{ msg_id: sent.msg_id, state: 'receiver_acknowledged', at: Date.now() }]) })) as unknown as Record<string, unknown>;
    const genuine = receipt(bobId);
    const forgeries = [
      // Unsigned: a signature of zeros.
      { ...genuine, sig: Buffer.alloc(64).toString('base64url') },
      // Bob's signature, but over another receipt's bytes.
      { ...genuine, sig: receipt(bobId).sig },
      // Signed by a stranger, in bob's name.
      { ...receipt(newIdentity()), from: bKey },
    ];
    for (const forgery of forgeries) await relay.deliver(`${aKey}#a1`, forgery);

    const now = await status(alice, sent.msg_id);
    expect(now.state).toBe('bus_accepted');
    expect(now.history.some((h) => h.reported_by !== undefined)).toBe(false);
    const refusals = alice
      .stderr()
      .split('\n')
      .filter((line) => line.includes('"inbound_rejected"'))
      .map((line) => JSON.parse(line) as { code: string; from: string });
    expect(refusals).toEqual(forgeries.map(() => expect.objectContaining({ code: 'bad_signature', from: bKey })));

    // The genuine receipt, under the msg_id the first two forgeries carried, is applied.
    await relay.deliver(`${aKey}#a1`, genuine);
    const acked = await stateIs(alice, sent.msg_id, 'receiver_acknowledged');
    expect(acked.history.filter((h) => h.reported_by === 'receiver').map((h) => h.state)).toEqual(['receiver_acknowledged']);
  });
});
