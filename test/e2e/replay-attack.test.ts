/**
 * At most once per identity, tried by a lying relay (test/helpers/lying-relay.ts) against
 * real `serve` processes: Bob runs two sessions, b1 and b2, of one identity on one machine.
 * Every copy the relay replays — into the other session, into the same session after a
 * restart, with the session of the route or the signed session changed, as version 4 or as
 * a version 2 envelope (which does not sign the session; admitted only from a peer marked
 * clear) — is refused, and every refusal that is not a routine redelivery is logged and
 * listed by `inbox --rejected`.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Envelope } from '../../src/envelope/envelope.js';
import { signEnvelope } from '../../src/envelope/sign.js';
import { loadIdentity } from '../../src/identity/identity.js';
import { runCli, userEnv } from '../helpers/cli.js';
import { LyingRelay } from '../helpers/lying-relay.js';
import { eventually, pair, peerPool, type Peer } from '../helpers/mcp.js';

interface Received {
  messages: { msg_id: string; text: string }[];
}

let root: string;
let relay: LyingRelay;
const pool = peerPool(() => root);

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-replay-'));
  relay = await LyingRelay.start();
});
afterEach(async () => {
  await pool.closeAll();
  await relay.close();
  await rm(root, { recursive: true, force: true });
});

async function texts(p: Peer): Promise<string[]> {
  const got = await p.call<Received>('receive_messages', { limit: 100 });
  return got.messages.map((m) => m.text);
}

/** The refusals `inbox --rejected` lists for one of Bob's sessions, as `<code> <msg_id>`. */
async function listedRejections(bob: Peer, session: string): Promise<string[]> {
  const run = await runCli(['inbox', '--rejected', '--session', session, '--json'], userEnv({ root, configDir: bob.config, stateDir: bob.state }));
  expect(run.code, run.stderr).toBe(0);
  const listed = JSON.parse(run.stdout) as { rejected: { code: string; msg_id: string }[] };
  return listed.rejected.map((r) => `${r.code} ${r.msg_id}`);
}

/** What b's log says about one msg_id: the codes of its `inbound_rejected` lines. */
function loggedCodes(p: Peer, msgId: string): string[] {
  return p
    .stderr()
    .split('\n')
    .filter((line) => line.includes('"inbound_rejected"') && line.includes(msgId))
    .map((line) => (JSON.parse(line) as { code: string }).code);
}

/** Bob marks Alice clear, as a person does for a peer that cannot seal (the Rust Interlink). */
async function markClear(bob: Peer, aliceKey: string): Promise<void> {
  const run = await runCli(['peers', 'add', 'alice', aliceKey, '--clear', '--json'], userEnv({ root, configDir: bob.config, stateDir: bob.state }));
  expect(run.code, run.stderr).toBe(0);
  expect(JSON.parse(run.stdout)).toMatchObject({ outcome: 'updated', clear: true });
}

async function setUp(options: { clear?: boolean } = {}): Promise<{ alice: Peer; b1: Peer; b2: Peer; bobKey: string }> {
  const alice = await pool.start('alice', 'a1', relay.url);
  const b1 = await pool.start('bob', 'b1', relay.url);
  const b2 = await pool.start('bob', 'b2', relay.url);
  const { aKey, bKey } = await pair(alice, b1);
  if (options.clear === true) await markClear(b1, aKey);
  await Promise.all([relay.reader(`${bKey}#b1`), relay.reader(`${bKey}#b2`)]);
  return { alice, b1, b2, bobKey: bKey };
}

describe('a lying relay replays signed messages', () => {
  it('refuses a version 4 message in any session but the one it was signed for, and after a restart', async () => {
    const { alice, b1, b2, bobKey } = await setUp();
    const receipt = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text: 'do this once' });
    const sent = await relay.sentWhere('the signed message', (s) => s.payload.msg_id === receipt.msg_id);
    expect(sent.payload).toMatchObject({ v: 4, to_session: 'b1' });
    await eventually(async () => ((await texts(b1)).includes('do this once') ? true : undefined));

    // Into the other session, as it was signed: refused for the signed session.
    await relay.deliver(`${bobKey}#b2`, sent.payload);
    // With the signed session rewritten to b2: the signature no longer holds.
    await relay.deliver(`${bobKey}#b2`, { ...sent.payload, to_session: 'b2' });
    expect(await texts(b2)).toEqual([]);
    expect(loggedCodes(b2, receipt.msg_id)).toEqual(['wrong_session', 'bad_signature']);
    // A bad signature proves no sender, so only the session refusal is listed.
    expect(await listedRejections(b2, 'b2')).toEqual([`wrong_session ${receipt.msg_id}`]);

    // Into the same session after a restart: the mailbox and the index both remember it.
    await pool.stop(b1);
    const again = await pool.start('bob', 'b1', relay.url);
    await relay.reader(`${bobKey}#b1`);
    await relay.deliver(`${bobKey}#b1`, sent.payload);
    expect(await texts(again)).toEqual(['do this once']);
  });

  it('admits a version 2 message (its session is not signed) from a peer marked clear in one session only, across restarts; never a clear self message', async () => {
    const { alice, b1, b2, bobKey } = await setUp({ clear: true });
    // A peer that still sends version 2 (the Rust Interlink): signed by Alice's real key.
    const aliceId = await loadIdentity(join(alice.config, 'id.key'));
    const legacy: Envelope = signEnvelope(aliceId.signingKey, { to: bobKey, text: 'v2, do this once', reply_to: `${aliceId.key}#a1` });
    expect(legacy.v).toBeUndefined();
    await relay.deliver(`${bobKey}#b1`, legacy);
    expect(await texts(b1)).toEqual(['v2, do this once']);

    await relay.deliver(`${bobKey}#b2`, legacy);
    expect(await texts(b2)).toEqual([]);
    expect(loggedCodes(b2, legacy.msg_id)).toEqual(['replay']);
    expect(b2.stderr()).toContain('already admitted by session \\"b1\\"');
    expect(await listedRejections(b2, 'b2')).toEqual([`replay ${legacy.msg_id}`]);

    // The index is on disk: a restarted b2 (and a b3 that never saw it) still refuse it.
    await pool.stop(b2);
    const b2again = await pool.start('bob', 'b2', relay.url);
    const b3 = await pool.start('bob', 'b3', relay.url);
    await Promise.all([relay.reader(`${bobKey}#b2`), relay.reader(`${bobKey}#b3`)]);
    await relay.deliver(`${bobKey}#b2`, legacy);
    await relay.deliver(`${bobKey}#b3`, legacy);
    expect(await texts(b2again)).toEqual([]);
    expect(await texts(b3)).toEqual([]);
    expect(loggedCodes(b3, legacy.msg_id)).toEqual(['replay']);

    // A version 2 message from Bob's own key (to: "self"): our sessions always seal, so a
    // clear one is refused in every session, and listed.
    const bobId = await loadIdentity(join(b1.config, 'id.key'));
    const self = signEnvelope(bobId.signingKey, { to: bobKey, text: 'note to self' });
    await relay.deliver(`${bobKey}#b3`, self);
    await relay.deliver(`${bobKey}#b1`, self);
    expect(await texts(b3)).toEqual([]);
    expect(await texts(b1)).toEqual(['v2, do this once']);
    expect(loggedCodes(b1, self.msg_id)).toEqual(['unsealed']);
    expect(await listedRejections(b3, 'b3')).toEqual([`replay ${legacy.msg_id}`, `unsealed ${self.msg_id}`]);
  });

  it('refuses a clear message from a peer not marked clear, and lists it', async () => {
    const { alice, b1, bobKey } = await setUp();
    const aliceId = await loadIdentity(join(alice.config, 'id.key'));
    const v2 = signEnvelope(aliceId.signingKey, { to: bobKey, text: 'clear v2' });
    const v3 = signEnvelope(aliceId.signingKey, { to: bobKey, to_session: 'b1', text: 'clear v3', version: 3 });
    await relay.deliver(`${bobKey}#b1`, v2);
    await relay.deliver(`${bobKey}#b1`, v3);
    expect(await texts(b1)).toEqual([]);
    expect([...loggedCodes(b1, v2.msg_id), ...loggedCodes(b1, v3.msg_id)]).toEqual(['unsealed', 'unsealed']);
    expect(await listedRejections(b1, 'b1')).toEqual(expect.arrayContaining([`unsealed ${v2.msg_id}`, `unsealed ${v3.msg_id}`]));
  });

  it('fills the index from the mailboxes on the first start of a version that has one', async () => {
    const { alice, b1, b2, bobKey } = await setUp({ clear: true });
    const aliceId = await loadIdentity(join(alice.config, 'id.key'));
    const legacy = signEnvelope(aliceId.signingKey, { to: bobKey, text: 'admitted before the upgrade' });
    await relay.deliver(`${bobKey}#b1`, legacy);
    expect(await texts(b1)).toEqual(['admitted before the upgrade']);
    // Read, so b2, which takes the mail of b1 once b1 has ended, has nothing of b1's to show.
    await b1.call('acknowledge_messages', { messages: (await b1.call<{ messages: { receipt: unknown }[] }>('receive_messages')).messages.map((m) => m.receipt) });
    // As the state root of an earlier version: mailboxes, but no replay index.
    await Promise.all([pool.stop(b1), pool.stop(b2)]);
    await rm(join(b1.state, 'replay'), { recursive: true });
    const b2again = await pool.start('bob', 'b2', relay.url);
    await relay.reader(`${bobKey}#b2`);
    await relay.deliver(`${bobKey}#b2`, legacy);
    expect(await texts(b2again), b2again.stderr()).toEqual([]);
    expect(loggedCodes(b2again, legacy.msg_id)).toEqual(['replay']);
  });

  it('seals the reply route: a relay neither sees it nor changes it by adding its own', async () => {
    const { alice, b1, bobKey } = await setUp();
    const receipt = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text: 'where do I answer?' });
    const sent = await relay.sentWhere('the signed message', (s) => s.payload.msg_id === receipt.msg_id);
    const aliceKey = String(sent.payload.from);
    expect(sent.payload.reply_to).toBeUndefined();
    expect(JSON.stringify(sent.payload)).not.toContain('#a1');
    await eventually(async () => ((await texts(b1)).length === 1 ? true : undefined));
    // A copy with a reply_to of the relay's choosing is the same message: a quiet redelivery.
    await relay.deliver(`${bobKey}#b1`, { ...sent.payload, reply_to: `${aliceKey}#attacker-chosen` });
    expect(loggedCodes(b1, receipt.msg_id)).toEqual([]);
    const got = await b1.call<{ messages: { text: string; reply_to?: string }[] }>('receive_messages');
    expect(got.messages).toEqual([expect.objectContaining({ text: 'where do I answer?', reply_to: `${aliceKey}#a1` })]);
  });
});
