/**
 * A lying relay suite (issue 16, point 3): a relay that speaks the documented frames
 * (test/helpers/lying-relay.ts) lies to real `serve` processes driven by the SDK client,
 * and the receivers must admit exactly what the trust gate admits, never twice, and log
 * why they refused. Each lie and where it is tried:
 *
 * | lie | test |
 * | --- | --- |
 * | replays into the same session | "reorders, duplicates, drops and delays …" (copies under new and reused ids, concurrent) |
 * | replays into another session, after a restart, a session started later, version 2 | test/e2e/replay-attack.test.ts |
 * | reorders | "reorders, duplicates, drops and delays …" |
 * | duplicates | "reorders, duplicates, drops and delays …" |
 * | delays within the window | "reorders, duplicates, drops and delays …" (the dropped message delivered last) |
 * | delays past the window (signed long ago, or far ahead) | "holds what is a little ahead …"; a receiver's moved clock: test/e2e/clocks.test.ts |
 * | drops | "reorders, duplicates, drops and delays …" (the sender never sees it stored) |
 * | truncates | "refuses truncated payloads and frames …" |
 * | flips bits | "refuses every one of 50 seeded bit flips …" |
 * | forges senders | "refuses forged senders and rewritten recipients …"; forged receipts: test/e2e/receipts.test.ts |
 * | rewrites routes | "refuses forged senders and rewritten recipients …" (another identity's route, a rewritten `to`); another session's route: test/e2e/replay-attack.test.ts |
 * | rewrites `reply_to` | "ignores a reply_to the relay wrote …" (beside a seal, in a signed version 3, as a version 2 hint naming another key); on a copy of an admitted message: test/e2e/replay-attack.test.ts |
 * | substitutes roster keys | "routes by the peer's key, never by what the roster shows …" |
 * | forwards challenges | "tells nothing to a relay that passes another relay's challenge on …"; with the honest relay's welcome, or its own key: test/e2e/forwarding-relay.test.ts |
 *
 * Every refusal is acknowledged to the relay (PROTOCOL.md "Delivery and acknowledgement",
 * agent/inbound.ts), except a message held from the near future, which stays on the relay
 * until it is due.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { isSealed, parseEnvelope, wireOf, type WireEnvelope } from '../../src/envelope/envelope.js';
import { openEnvelope } from '../../src/envelope/open.js';
import { signEnvelope, verifyEnvelope, type EnvelopeFields } from '../../src/envelope/sign.js';
import { signedBytes } from '../../src/envelope/signed-bytes.js';
import { messageOf } from '../../src/errors.js';
import { signBytes } from '../../src/identity/ed25519.js';
import { loadIdentity, type Identity } from '../../src/identity/identity.js';
import { signAnnouncementV2 } from '../../src/presence/announcement.js';
import { sealDetails } from '../../src/presence/private.js';
import { expectSuccess, runCli, userEnv } from '../helpers/cli.js';
import { newIdentity } from '../helpers/fixtures.js';
import { LyingRelay, type Sent } from '../helpers/lying-relay.js';
import { eventually, pair, peerPool, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { seededRandom } from '../helpers/seeded.js';
import { startRelay } from '../helpers/spawn-relay.js';

const MINUTE = 60_000;
const DAY = 24 * 60 * MINUTE;
/** The seed of the bit flips: the same 50 positions on every run. */
const FLIP_SEED = 0x16_03;
const FLIPS = 50;

let root: string;
let relay: LyingRelay;
const pool = peerPool(() => root);

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-lying-'));
  relay = await LyingRelay.start();
});
afterEach(async () => {
  await pool.closeAll();
  await relay.close();
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

type Payload = Record<string, unknown>;

interface InboxMessage {
  msg_id: string;
  text: string;
  status?: string;
  task_id?: string;
  reply_to?: string;
}

interface LogLine {
  event: string;
  code?: string;
  reason?: string;
  msg_id?: string;
  from?: string;
  message?: string;
}

async function inbox(p: Peer): Promise<InboxMessage[]> {
  return (await p.call<{ messages: InboxMessage[] }>('receive_messages', { limit: 100 })).messages;
}

async function texts(p: Peer): Promise<string[]> {
  return (await inbox(p)).map((m) => m.text);
}

/** The structured lines of a server's log with this event (whole lines only: the last may still be arriving). */
function logged(p: Peer, event: string): LogLine[] {
  return p
    .stderr()
    .split('\n')
    .slice(0, -1)
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as LogLine)
    .filter((line) => line.event === event);
}

/** The gate's refusals in a server's log, once there are at least `count` of them (stderr may trail the acknowledgement). */
function refusals(p: Peer, count: number): Promise<LogLine[]> {
  return eventually(async () => {
    const lines = logged(p, 'inbound_rejected');
    return lines.length >= count ? lines : undefined;
  }, 15_000, `${count} inbound_rejected lines`);
}

async function identityOf(p: Peer): Promise<Identity> {
  return loadIdentity(join(p.config, 'id.key'));
}

/** An envelope signed with `from`'s key, as a relay carries it. */
function signed(from: Identity, fields: EnvelopeFields): Payload {
  return wireOf(signEnvelope(from.signingKey, fields));
}

/** What `inbox --rejected` lists for a session, as `<code> <msg_id>`. */
async function listed(p: Peer, session: string): Promise<string[]> {
  const run = await runCli(['inbox', '--rejected', '--session', session, '--json'], userEnv({ root, configDir: p.config, stateDir: p.state }));
  const rows = (JSON.parse(expectSuccess(run)) as { rejected: { code: string; msg_id: string }[] }).rejected;
  return rows.map((r) => `${r.code} ${r.msg_id}`);
}

async function stateOf(p: Peer, msgId: string): Promise<string> {
  return (await p.call<{ state: string }>('message_status', { msg_id: msgId })).state;
}

/** Alice and Bob, paired, each reading its route on the lying relay. */
async function aliceAndBob(bobEnv: Record<string, string> = {}) {
  const [alice, bob] = await Promise.all([pool.start('alice', 'a1', relay.url), pool.start('bob', 'b1', relay.url, bobEnv)]);
  const { aKey, bKey } = await pair(alice, bob);
  const aliceRoute = `${aKey}#a1`;
  const bobRoute = `${bKey}#b1`;
  await Promise.all([relay.reader(aliceRoute), relay.reader(bobRoute)]);
  return { alice, bob, aKey, bKey, aliceRoute, bobRoute };
}

/** Alice sends `text` to Bob's b1; the copy the relay was given. */
async function aliceSends(alice: Peer, text: string, args: Record<string, unknown> = {}): Promise<Sent & { msgId: string }> {
  const sent = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text, ...args });
  const copy = await relay.sentWhere(`the relay's copy of ${text}`, (s) => s.payload.msg_id === sent.msg_id);
  return { ...copy, msgId: sent.msg_id };
}

/**
 * What the gate must answer to a payload, worked out here with the same parser and
 * signature check: `bad_envelope` naming the first bad field, else `bad_signature` (the
 * lies below never leave a signature that verifies).
 */
function expectedRefusal(payload: Payload): { code: string; reason: string } {
  let wire: WireEnvelope;
  try {
    wire = parseEnvelope(payload);
  } catch (err) {
    return { code: 'bad_envelope', reason: messageOf(err) };
  }
  expect(verifyEnvelope(wire), `a lie that still verifies: ${JSON.stringify(payload)}`).toBe(false);
  return { code: 'bad_signature', reason: 'signature does not verify under the sender key' };
}

/**
 * Delivers every payload to `route` (each acknowledged: refused and dropped), then checks
 * that `p` logged one refusal for each, in order, with the verdict and reason the gate
 * owes it. Returns the refusal lines.
 */
async function refusedInTurn(p: Peer, route: string, payloads: readonly Payload[]): Promise<LogLine[]> {
  const before = logged(p, 'inbound_rejected').length;
  for (const payload of payloads) await relay.deliver(route, payload);
  const lines = (await refusals(p, before + payloads.length)).slice(before);
  expect(lines).toHaveLength(payloads.length);
  const expected = payloads.map(expectedRefusal);
  expect(lines.map((l) => ({ code: l.code, reason: l.reason }))).toEqual(expected);
  return lines;
}

describe('a lying relay against real receivers', () => {
  it('reorders, duplicates, drops and delays: each message admitted once, in the order it was signed; a drop is never reported stored', async () => {
    const { alice, bob, bobRoute } = await aliceAndBob();
    relay.withhold = (s) => s.to === bobRoute;
    const one = await aliceSends(alice, 'one');
    const two = await aliceSends(alice, 'two');
    const three = await aliceSends(alice, 'three');
    const four = await aliceSends(alice, 'four');

    // Backwards, 'three' dropped; 'four' twice at once (one reused id, one new), 'two' again
    // under its own id and under a new one, 'one' again after everything.
    const fourId = relay.push(bobRoute, four.payload);
    relay.push(bobRoute, four.payload, fourId);
    const fourAgain = relay.push(bobRoute, four.payload);
    const twoId = await relay.deliver(bobRoute, two.payload);
    await relay.deliver(bobRoute, two.payload, twoId);
    await relay.deliver(bobRoute, two.payload);
    await relay.deliver(bobRoute, one.payload);
    await relay.deliver(bobRoute, one.payload);
    await eventually(async () => (relay.acknowledged(bobRoute, fourId) && relay.acknowledged(bobRoute, fourAgain) ? true : undefined));

    expect(await texts(bob)).toEqual(['one', 'two', 'four']);
    // Copies of what this session admitted are routine: nothing refused, nothing listed.
    expect(logged(bob, 'inbound_rejected')).toEqual([]);
    expect(await listed(bob, 'b1')).toEqual([]);

    // The sender hears of the three that arrived; of the dropped one, never more than the relay's word.
    for (const m of [one, two, four]) await eventually(async () => ((await stateOf(alice, m.msgId)) === 'receiver_stored' ? true : undefined), 15_000, `${m.msgId} stored`);
    expect(await stateOf(alice, three.msgId)).toBe('bus_accepted');

    // Delivered at last (a delay, well inside the window): admitted, and shown in its signed place.
    await relay.deliver(bobRoute, three.payload);
    expect(await texts(bob)).toEqual(['one', 'two', 'three', 'four']);
    expect(logged(bob, 'inbound_rejected')).toEqual([]);
  });

  it('holds what is a little ahead without acknowledging it, and refuses what was signed more than 7 days ago or more than 10 minutes ahead, saying why', async () => {
    const { alice, bob, aKey, bKey, aliceRoute, bobRoute } = await aliceAndBob({ INTERLINK_LOG: 'info' });
    // A message Bob admits first, so he knows Alice's session to report refusals to.
    await aliceSends(alice, 'fresh');
    await eventually(async () => ((await texts(bob)).includes('fresh') ? true : undefined));

    const aliceId = await identityOf(alice);
    const now = Date.now();
    const at = (ts: number, text: string) => signed(aliceId, { to: bKey, to_session: 'b1', text, reply_to: aliceRoute, ts });
    const stale = at(now - 7 * DAY - MINUTE, 'signed 7 days and a minute ago');
    const farAhead = at(now + 11 * MINUTE, 'eleven minutes ahead');
    const ahead = at(now + 5 * MINUTE, 'five minutes ahead');
    const soon = at(now + MINUTE + 4_000, 'a minute and 4 s ahead');

    await relay.deliver(bobRoute, stale);
    await relay.deliver(bobRoute, farAhead);
    const lines = await refusals(bob, 2);
    expect(lines.map((l) => [l.code, l.msg_id, l.from])).toEqual([
      ['stale', stale.msg_id, aKey],
      ['from_future', farAhead.msg_id, aKey],
    ]);
    expect(lines[0]!.reason).toContain('more than 7 days old');
    expect(lines[1]!.reason).toContain('more than 60 s ahead');

    // Held: logged, not refused and not acknowledged, while the relay's later deliveries go on.
    const aheadId = relay.push(bobRoute, ahead);
    const soonId = relay.push(bobRoute, soon);
    const soonAgain = relay.push(bobRoute, soon);
    await eventually(async () => (logged(bob, 'inbound_held').filter((l) => l.msg_id === ahead.msg_id || l.msg_id === soon.msg_id).length === 3 ? true : undefined));
    await relay.deliver(bobRoute, at(Date.now(), 'after the held ones'));
    expect([aheadId, soonId, soonAgain].map((id) => relay.acknowledged(bobRoute, id))).toEqual([false, false, false]);
    expect(await texts(bob)).toEqual(['fresh', 'after the held ones']);

    // Once due (within 60 s of Bob's clock) the one a minute ahead is admitted, once, and both copies acknowledged.
    await eventually(async () => (relay.acknowledged(bobRoute, soonId) && relay.acknowledged(bobRoute, soonAgain) ? true : undefined), 15_000, 'the held message admitted when due');
    expect(await texts(bob)).toEqual(['fresh', 'after the held ones', 'a minute and 4 s ahead']);
    expect(relay.acknowledged(bobRoute, aheadId)).toBe(false);
    expect(logged(bob, 'inbound_rejected')).toHaveLength(2);
    expect(await listed(bob, 'b1')).toEqual([`stale ${String(stale.msg_id)}`, `from_future ${String(farAhead.msg_id)}`]);

    // The stale refusal is told to Alice's session in a signed, sealed receipt only she opens.
    const reported = await eventually(async () => {
      const entries = relay.sent
        .filter((s) => s.to === aliceRoute && s.payload.kind === 'receipt' && s.payload.from === bKey)
        .flatMap((s) => {
          const wire = parseEnvelope(s.payload);
          if (!isSealed(wire)) return [];
          return (JSON.parse(openEnvelope(aliceId.signingKey, wire).text) as { receipts: { msg_id: string; state: string; code?: string }[] }).receipts;
        });
      return entries.find((e) => e.msg_id === stale.msg_id);
    }, 15_000, 'the receipt reporting the stale refusal');
    expect(reported).toMatchObject({ state: 'receiver_refused', code: 'stale' });
  });

  it('refuses truncated payloads and frames: malformed or unsigned, acknowledged, logged with the field; the genuine copy is still admitted once', async () => {
    const { alice, bob, bobRoute } = await aliceAndBob();
    relay.withhold = (s) => s.to === bobRoute;
    // Long enough that a sealed body cut by 3 bytes is still well formed.
    const { payload: wire, msgId } = await aliceSends(alice, `a body of some length: ${'x'.repeat(1_000)}`);
    const cut = (field: string, by: number): Payload => ({ ...wire, [field]: String(wire[field]).slice(0, -by) });
    const without = (field: string): Payload => Object.fromEntries(Object.entries(wire).filter(([name]) => name !== field));
    const truncated: Payload[] = [
      cut('sealed', 4),
      cut('sealed', Math.floor(String(wire.sealed).length / 2)),
      cut('sealed', 1),
      { ...wire, sealed: '' },
      cut('sig', 1),
      cut('sig', 43),
      cut('msg_id', 1),
      cut('from', 1),
      cut('to', 10),
      cut('to_session', 1),
      cut('kind', 1),
      { ...wire, ts: Math.floor(Number(wire.ts) / 10) },
      ...['v', 'from', 'to', 'to_session', 'ts', 'msg_id', 'sealed', 'sig'].map(without),
      {},
    ];
    const lines = await refusedInTurn(bob, bobRoute, truncated);
    expect(new Set(lines.map((l) => l.code))).toEqual(new Set(['bad_envelope', 'bad_signature']));
    // A frame cut short is no frame: logged, and nothing to acknowledge.
    const frame = JSON.stringify({ v: 1, type: 'deliver', route: bobRoute, id: 999_999, payload: wire });
    relay.pushText(bobRoute, frame.slice(0, Math.floor(frame.length / 2)));
    await eventually(async () => (logged(bob, 'relay_bad_frame').length === 1 ? true : undefined), 15_000, 'relay_bad_frame');
    expect(relay.acknowledged(bobRoute, 999_999)).toBe(false);

    // None of it took the message's place: the genuine copy, on the same connection, is admitted once.
    expect(await inbox(bob)).toEqual([]);
    await relay.deliver(bobRoute, wire);
    await relay.deliver(bobRoute, wire);
    expect((await inbox(bob)).map((m) => m.msg_id)).toEqual([msgId]);
    // Neither a malformed envelope nor a bad signature proves a sender: logged, not listed.
    expect(await listed(bob, 'b1')).toEqual([]);
  });

  it(`refuses every one of ${FLIPS} seeded bit flips in the signed header, the sealed body and the signature (seed ${FLIP_SEED})`, async () => {
    const { alice, bob, bobRoute } = await aliceAndBob();
    relay.withhold = (s) => s.to === bobRoute;
    const { payload: wire, msgId } = await aliceSends(alice, 'flip me if you can', { task_id: 'bits', status: 'update' });
    const random = seededRandom(FLIP_SEED);
    const fields = ['from', 'to', 'to_session', 'ts', 'kind', 'msg_id', 'sealed', 'sig'] as const;
    const flips = Array.from({ length: FLIPS }, (_, i) => flipBit(wire, fields[i % fields.length]!, random));
    for (const [i, flip] of flips.entries()) expect(flip[fields[i % fields.length]!], `flip ${i} changed nothing`).not.toEqual(wire[fields[i % fields.length]!]);

    const lines = await refusedInTurn(bob, bobRoute, flips);
    // Every flip the parser lets through fails the signature, and the log names its msg_id.
    for (const [i, line] of lines.entries()) if (line.code === 'bad_signature') expect(line.msg_id).toBe(flips[i]!.msg_id);
    expect(lines.filter((l) => l.code === 'bad_signature').length).toBeGreaterThan(FLIPS / 2);

    expect(await inbox(bob)).toEqual([]);
    await relay.deliver(bobRoute, wire);
    expect((await inbox(bob)).map((m) => [m.msg_id, m.text, m.status, m.task_id])).toEqual([[msgId, 'flip me if you can', 'update', 'bits']]);
    expect(await listed(bob, 'b1')).toEqual([]);
  });

  it('refuses forged senders and rewritten recipients: a claimed key with another signature, a message moved to another identity', async () => {
    const { alice, bob, aKey, bKey, bobRoute } = await aliceAndBob();
    const carol = await pool.start('carol', 'c1', relay.url);
    const { aKey: cKey } = await pair(carol, bob, { a: 'carol', b: 'bob' });
    const carolRoute = `${cKey}#c1`;
    await relay.reader(carolRoute);
    relay.withhold = (s) => s.to === bobRoute;
    const { payload: wire, msgId } = await aliceSends(alice, 'from alice, really');
    const [carolId, mallory] = [await identityOf(carol), newIdentity()];

    const resignedBy = (who: Identity): Payload => ({ ...wire, sig: signBytes(who.signingKey, signedBytes(parseEnvelope(wire))).toString('base64url') });
    const claimingAlice = (payload: Payload): Payload => ({ ...payload, from: aKey });
    const forgeries: Payload[] = [
      // Alice's message signed again by a stranger, and by a peer of Bob's.
      resignedBy(mallory),
      resignedBy(carolId),
      // Their own messages to Bob, relabelled as Alice's.
      claimingAlice(signed(mallory, { to: bKey, to_session: 'b1', text: 'I am alice' })),
      claimingAlice(signed(carolId, { to: bKey, to_session: 'b1', text: 'I am alice too' })),
    ];
    const forged = await refusedInTurn(bob, bobRoute, forgeries);
    expect(forged.map((l) => [l.code, l.from])).toEqual(forgeries.map(() => ['bad_signature', aKey]));
    // A stranger signing as itself is a stranger: refused, and listed (its key is proven).
    const knock = signed(mallory, { to: bKey, to_session: 'b1', text: 'let me in' });
    await relay.deliver(bobRoute, knock);
    const [strangerLine] = (await refusals(bob, forgeries.length + 1)).slice(forgeries.length);
    expect(strangerLine).toMatchObject({ code: 'not_allowlisted', from: mallory.key, msg_id: knock.msg_id });

    // Alice's message for Bob delivered into Carol's queue, as it is and re-addressed.
    await relay.deliver(carolRoute, wire);
    await relay.deliver(carolRoute, { ...wire, to: cKey });
    await relay.deliver(carolRoute, { ...wire, to: cKey, to_session: 'c1' });
    const moved = await refusals(carol, 3);
    expect(moved.map((l) => [l.code, l.msg_id])).toEqual([
      ['wrong_recipient', msgId],
      ['bad_signature', msgId],
      ['bad_signature', msgId],
    ]);
    expect(await inbox(carol)).toEqual([]);
    expect(await listed(carol, 'c1')).toEqual([`wrong_recipient ${msgId}`]);

    await relay.deliver(bobRoute, wire);
    expect((await inbox(bob)).map((m) => [m.msg_id, m.text])).toEqual([[msgId, 'from alice, really']]);
    expect(await listed(bob, 'b1')).toEqual([`not_allowlisted ${String(knock.msg_id)}`]);
  });

  it('ignores a reply_to the relay wrote: the answer goes to the session the sender signed', async () => {
    const { alice, bob, aKey, bKey, bobRoute } = await aliceAndBob();
    // Alice runs a second session, so the relay has a real route of hers to redirect answers to.
    const a2 = await pool.start('alice', 'a2', relay.url);
    await relay.reader(`${aKey}#a2`);
    relay.withhold = (s) => s.to === bobRoute;
    const { payload: wire, msgId } = await aliceSends(alice, 'answer me in a1');
    // Only a changed copy arrives: a reply route and clear body fields beside the seal.
    await relay.deliver(bobRoute, { ...wire, reply_to: `${aKey}#a2`, text: 'the relay wrote this', status: 'result', task_id: 'relay' });
    expect(await inbox(bob)).toEqual([expect.objectContaining({ msg_id: msgId, text: 'answer me in a1', reply_to: `${aKey}#a1` })]);
    expect((await inbox(bob))[0]).not.toHaveProperty('status');
    expect((await inbox(bob))[0]).not.toHaveProperty('task_id');
    expect(logged(bob, 'inbound_rejected')).toEqual([]);

    // Both of Alice's sessions are live, so only the signed reply session can pick a1.
    const answer = await bob.call<{ msg_id: string; session: string }>('send_message', { to: 'alice', text: 'answered' });
    expect(answer.session).toBe('a1');
    const out = await relay.sentWhere('the answer', (s) => s.payload.msg_id === answer.msg_id);
    expect(out).toMatchObject({ to: `${aKey}#a1`, payload: { to: aKey, to_session: 'a1' } });
    await eventually(async () => ((await texts(alice)).includes('answered') ? true : undefined));
    expect(await texts(a2)).toEqual([]);

    // A clear version 3 envelope signs its reply session: rewritten, its signature fails.
    // (Admitted at all only from a peer a person marked clear.)
    const mark = await runCli(['peers', 'add', 'alice', aKey, '--clear', '--json'], userEnv({ root, configDir: bob.config, stateDir: bob.state }));
    expect(mark.code, mark.stderr).toBe(0);
    const aliceId = await identityOf(alice);
    const v3 = signed(aliceId, { to: bKey, to_session: 'b1', text: 'v3, answer me in a1', reply_to: `${aKey}#a1`, version: 3 });
    const [line] = await refusedInTurn(bob, bobRoute, [{ ...v3, reply_to: `${aKey}#a2` }]);
    expect(line).toMatchObject({ code: 'bad_signature', msg_id: v3.msg_id });
    // The same envelope as signed is admitted.
    await relay.deliver(bobRoute, v3);
    // A version 2 envelope does not sign its reply_to: rewritten to another key, it is a
    // hint the receiver treats as absent — not shown, and not where the answer goes.
    const v2 = signed(aliceId, { to: bKey, text: 'v2, answer me in a1', reply_to: `${aKey}#a1` });
    await relay.deliver(bobRoute, { ...v2, reply_to: `${newIdentity().key}#m1` });
    expect((await inbox(bob)).map((m) => [m.text, m.reply_to])).toEqual([
      ['answer me in a1', `${aKey}#a1`],
      ['v3, answer me in a1', `${aKey}#a1`],
      ['v2, answer me in a1', undefined],
    ]);
    const again = await bob.call<{ msg_id: string; session: string }>('send_message', { to: 'alice', text: 'answered again' });
    expect(again.session).toBe('a1');
    expect(await relay.sentWhere('the second answer', (s) => s.payload.msg_id === again.msg_id)).toMatchObject({ to: `${aKey}#a1` });
    expect(logged(bob, 'inbound_rejected')).toHaveLength(1);
  });

  it('routes by the peer\'s key, never by what the roster shows: a substituted key or another identity\'s session is not Bob', async () => {
    const { alice, bob, aKey, bKey, bobRoute } = await aliceAndBob();
    // Carol, a peer of Alice's too, runs a session with the id of Bob's.
    const carol = await pool.start('carol', 'b1', relay.url);
    const { bKey: cKey } = await pair(alice, carol, { a: 'alice', b: 'carol' });
    await relay.reader(`${cKey}#b1`);
    const mallory = newIdentity();
    const ts = Date.now();
    // Mallory's own announcement, correctly signed, claiming Bob's name.
    const posing = signAnnouncementV2(mallory.signingKey, { session: 'm1', ts, ...sealDetails(mallory.signingKey, 'm1', ts, { name: 'bob', cwd: '/', git_root: '', summary: 'I am bob' }, [mallory.key]) });
    // The relay hides Bob, shows his announcement under Mallory's key, and shows Mallory's
    // (and Carol's, which it has no reason to hide).
    relay.rewriteRoster = (entries) => [
      ...entries.filter((e) => (e.announcement as { key?: unknown }).key !== bKey),
      ...entries.filter((e) => (e.announcement as { key?: unknown }).key === bKey).map((e) => ({ ...e, announcement: { ...(e.announcement as object), key: mallory.key } })),
      { announcement: posing, age_ms: 0 },
    ];
    await eventually(async () => {
      const seen = await alice.call<{ identities: { key: string }[] }>('discover');
      return seen.identities.some((i) => i.key === cKey) ? true : undefined;
    }, 15_000, 'carol on the roster');

    const shown = await alice.call<{ identities: { key: string; trusted: boolean; petname?: string; sessions: { session: string; name?: string }[] }[] }>('discover');
    expect(shown.identities.map((i) => i.key)).not.toContain(bKey);
    // Mallory's key was not asked for (Alice asks for her own identity's and her peers'): neither
    // her own announcement nor Bob's under her key is shown, whatever the relay sends.
    expect(shown.identities.map((i) => i.key)).not.toContain(mallory.key);
    // Carol's session b1 is Carol's: shown under her key and petname, never as Bob.
    expect(shown.identities.find((i) => i.key === cKey)).toMatchObject({ petname: 'carol', trusted: true, sessions: [{ session: 'b1' }] });
    expect((await alice.call<{ identities: unknown[] }>('discover', { peer: 'bob' })).identities).toEqual([]);

    // With Bob nowhere on the roster, a send to "bob" finds no session rather than another key's.
    expect(await alice.fail('send_message', { to: 'bob', text: 'to whoever poses as bob' })).toMatchObject({ code: 'no_route' });
    const queued = await alice.call<{ msg_id: string; session: string }>('send_message', { to: 'bob', session: 'b1', text: 'to the key I paired' });
    const out = await relay.sentWhere('the message to bob', (s) => s.payload.msg_id === queued.msg_id);
    expect(out).toMatchObject({ to: bobRoute, payload: { to: bKey, to_session: 'b1' } });
    await eventually(async () => ((await texts(bob)).includes('to the key I paired') ? true : undefined));
    // Nothing of Alice's went to Mallory's or Carol's key.
    expect(relay.sent.filter((s) => s.payload.from === aKey && s.payload.kind === 'message').map((s) => s.to)).toEqual([bobRoute]);
  });

  it("tells nothing to a relay that passes another relay's challenge on: no route proof, no message, no announcement", async () => {
    const honest = await startRelay();
    await relay.close();
    relay = await LyingRelay.start({ forwardChallengeOf: honest.url });
    const alice = await pool.start('alice', 'a1', relay.url);
    await eventually(async () => (logged(alice, 'relay_key_refused').length > 0 ? true : undefined), 15_000, 'relay_key_refused');
    expect(logged(alice, 'relay_key_refused')[0]!.message).toContain(`does not prove the key ${honest.key}`);
    const sent = await alice.call<{ msg_id: string; state: string; relays: { connected: number } }>('send_message', { to: 'self', session: 'a2', text: 'stays home' });
    expect(sent).toMatchObject({ state: 'pending', relays: { connected: 0 } });
    expect(relay.heard.every((type) => type === 'hello')).toBe(true);
    expect(relay.heard.length).toBeGreaterThan(0);
    expect(relay.sent).toEqual([]);
    // Nor was the key it named recorded for its URL.
    const status = JSON.parse(expectSuccess(await runCli(['status', '--json'], userEnv({ root, configDir: alice.config, stateDir: alice.state }, { INTERLINK_URL: relay.url })))) as {
      relay_keys: { url: string; recorded: string | null }[];
    };
    expect(status.relay_keys).toEqual([expect.objectContaining({ url: relay.url, recorded: null })]);
  });
});


/**
 * The payload with one bit of one field flipped: a bit of the raw bytes of a base64url
 * field (keys, sealed body, signature), of the UTF-8 of a text field, or of the 53 bits of
 * `ts`.
 */
function flipBit(wire: Payload, field: string, random: () => number): Payload {
  const value = wire[field];
  if (typeof value === 'number') {
    const bit = 2 ** Math.floor(random() * 53);
    return { ...wire, [field]: Math.floor(value / bit) % 2 === 1 ? value - bit : value + bit };
  }
  const base64 = field === 'from' || field === 'to' || field === 'sealed' || field === 'sig';
  const bytes = Buffer.from(String(value), base64 ? 'base64url' : 'utf8');
  const bit = Math.floor(random() * bytes.length * 8);
  bytes[bit >> 3] = bytes[bit >> 3]! ^ (1 << (bit & 7));
  return { ...wire, [field]: bytes.toString(base64 ? 'base64url' : 'utf8') };
}
