/**
 * Pairing by people at a terminal: the real `interlink-mcp pair` in child processes, each
 * person with their own config and state roots and announced name (INTERLINK_NAME),
 * through real relay processes. Every `pair` command drains what the relays hold for
 * this identity's `cli` session before it acts, so a command that returned has handled
 * everything sent to it before it started: the tests wait on that, never on time.
 */
import { describe, expect, it } from 'vitest';
import { newMsgId } from '../../src/envelope/envelope.js';
import { signEnvelope } from '../../src/envelope/sign.js';
import { verificationCode } from '../../src/pairing/code.js';
import { eventually, startPeer, type Peer } from '../helpers/mcp.js';
import { Hand, logged, person, readPairing, requestPair, snapshot, type Listed, type Requested, pairingWorkspace } from '../helpers/pairing.js';
import { startRelay } from '../helpers/spawn-relay.js';

let root: string;
const { peers, hands } = pairingWorkspace('interlink-pair-cli-', (dir) => (root = dir));

async function hand(url: string, session?: string): Promise<Hand> {
  const h = await Hand.connect(url, session !== undefined ? { session } : {});
  hands.push(h);
  return h;
}

interface Accepted {
  fingerprint: string;
  key: string;
  petname: string;
  code: string;
  state: string;
  confirmation: string;
  sent: boolean;
}

function ok(run: { code: number | null; stdout: string; stderr: string }): string {
  expect(run.code, run.stderr).toBe(0);
  return run.stdout;
}

describe('pairing from the command line', () => {
  it('pairs two identities through a relay with the CLI only, both showing the same code', async () => {
    const relay = await startRelay();
    const alice = person(root, 'alice', relay.url);
    const bob = person(root, 'bob', relay.url);

    // Bob's cli session goes on the roster (and stays there, away, after the command).
    const empty = await bob.json<Listed>(['pair', 'list']);
    expect(empty).toEqual({ incoming: [], outgoing: [], unsent_control_messages: 0, dropped_requests: null, completed: [], closed_already_peers: [] });
    const bobId = await bob.identity();

    // Alice asks by the name Bob announces, once for people and once more as JSON (the same request).
    const human = ok(await alice.cli(['pair', 'request', 'bob']));
    const asked = await alice.json<Requested>(['pair', 'request', 'bob']);
    const aliceId = await alice.identity();
    expect(asked).toMatchObject({ to: bobId.key, fingerprint: bobId.fingerprint, session: 'cli', petname: 'bob', repeated: true, sent: true });
    expect(asked.code).toMatch(/^\d{5}-\d{5}-\d{5}-\d{5}$/);
    expect(asked.code).toBe(verificationCode(aliceId.key, bobId.key, asked.request_id));
    expect(human).toContain(`Verification code: ${asked.code}`);
    expect(human).toContain(`interlink-mcp pair accept ${aliceId.fingerprint}`);

    // Bob sees the request with the code Alice printed, and the claimed name.
    const seen = await bob.json<Listed>(['pair', 'list']);
    expect(seen.incoming).toEqual([expect.objectContaining({ fingerprint: aliceId.fingerprint, key: aliceId.key, claimed_name: 'alice', session: 'cli', code: asked.code })]);
    const listedForPeople = ok(await bob.cli(['pair', 'list']));
    expect(listedForPeople).toContain(asked.code);
    expect(listedForPeople).toContain(`interlink-mcp pair accept ${aliceId.fingerprint}`);
    expect(await bob.peers()).toEqual({});

    // Bob accepts: Alice is his peer at once; the confirmation goes to a relay.
    const accepted = ok(await bob.cli(['pair', 'accept', aliceId.fingerprint, '--petname', 'alice']));
    expect(accepted).toContain(`Verification code: ${asked.code}`);
    expect(accepted).toContain('is now a peer');
    expect(accepted).toContain('The confirmation went to a relay.');
    expect(await bob.peers()).toEqual({ alice: { key: aliceId.key } });
    // Accepting again is safe and says the same.
    expect(await bob.json<Accepted>(['pair', 'accept', aliceId.fingerprint])).toMatchObject({ key: aliceId.key, petname: 'alice', code: asked.code, state: 'accepted', confirmation: 'sent' });

    // Alice asked by a roster name: her next list shows the acceptance, held until she confirms.
    const held = await alice.json<Listed>(['pair', 'list']);
    expect(held.completed).toEqual([]);
    expect(held.outgoing).toEqual([expect.objectContaining({ key: bobId.key, state: 'accepted_confirm_needed' })]);
    expect(await alice.peers()).toEqual({});
    const confirmed = await alice.json<Record<string, unknown>>(['pair', 'confirm', bobId.fingerprint]);
    expect(confirmed).toMatchObject({ key: bobId.key, petname: 'bob', code: asked.code, state: 'confirmed' });
    expect(await alice.peers()).toEqual({ bob: { key: bobId.key } });
    expect(await bob.peers()).toEqual({ alice: { key: aliceId.key } });
    // Nothing left over on either side.
    const cleared = { incoming: [], outgoing: [], unsent_control_messages: 0, dropped_requests: null, completed: [], closed_already_peers: [] };
    expect(await alice.json<Listed>(['pair', 'list'])).toEqual(cleared);
    expect(await bob.json<Listed>(['pair', 'list'])).toEqual(cleared);
    // And a request to an existing peer is refused, with one line.
    const again = await alice.cli(['pair', 'request', 'bob']);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/already your peer bob/);
  });
});

describe('pairing through two relays', () => {
  it('takes the copies each relay carries once: one request, one completion, one notice each', async () => {
    const r1 = await startRelay();
    const r2 = await startRelay();
    const urls = `${r1.url},${r2.url}`;
    const alice = person(root, 'alice', urls);
    const bob = person(root, 'bob', urls);
    ok(await bob.cli(['pair', 'list']));
    const aliceId = await alice.json<{ key: string; fingerprint: string }>(['keygen']);
    const bobId = await bob.identity();

    // Both relays take the request (each gets a copy), and both take the confirmation.
    // By key, learned from Bob directly: the acceptance completes it, with no confirm step.
    const asked = await alice.json<Requested>(['pair', 'request', bobId.key, '--petname', 'bob']);
    const info = { INTERLINK_LOG: 'info' };
    const bobList = await bob.cli(['pair', 'list', '--json'], info);
    expect((JSON.parse(ok(bobList)) as Listed).incoming).toEqual([expect.objectContaining({ key: aliceId.key, code: asked.code })]);
    expect(logged(bobList.stderr, 'pairing_notice')).toHaveLength(1);
    ok(await bob.cli(['pair', 'accept', aliceId.fingerprint]));

    // Alice's list drains both relays, so both copies of the pair_accept were handled when it returns.
    const aliceList = await alice.cli(['pair', 'list', '--json'], info);
    expect((JSON.parse(ok(aliceList)) as Listed).completed).toEqual([{ petname: 'bob', fingerprint: bobId.fingerprint, key: bobId.key }]);
    expect(logged(aliceList.stderr, 'pairing_notice')).toHaveLength(1);
    const handled = (await readPairing(alice.state, aliceId.key, 'cli')).handled;
    expect(handled.filter((h) => h.outcome === 'confirmed')).toHaveLength(1);
    expect(await alice.peers()).toEqual({ bob: { key: bobId.key } });
  });
});

describe('replays and answers nobody asked for', () => {
  it('a replayed pair_request changes nothing, after it was rejected or accepted', async () => {
    const relay = await startRelay();
    const bob = person(root, 'bob', relay.url);
    const bobId = (await bob.json<{ key: string }>(['keygen'])).key;
    const bobCli = `${bobId}#cli`;

    // A stranger knocks; Bob rejects.
    const sam = await hand(relay.url, 's1');
    const knock = sam.sign(bobId, { kind: 'pair_request', text: 'sam' });
    await sam.send(bobCli, knock);
    const first = await bob.json<Listed>(['pair', 'list']);
    expect(first.incoming).toEqual([expect.objectContaining({ key: sam.key, code: verificationCode(sam.key, bobId, knock.msg_id) })]);
    ok(await bob.cli(['pair', 'reject', sam.fingerprint]));
    const peersAfterReject = await snapshot(bob.peersFile);

    // The very same signed envelope again, and a fresh knock from someone else behind it:
    // the fresh one shows the deliveries were handled; the replay left no request.
    await sam.send(bobCli, knock);
    const tess = await hand(relay.url, 't1');
    const marker = tess.sign(bobId, { kind: 'pair_request', text: 'tess' });
    await tess.send(bobCli, marker);
    const afterReplay = await bob.json<Listed>(['pair', 'list']);
    expect(afterReplay.incoming.map((i) => i.key)).toEqual([tess.key]);
    expect(await snapshot(bob.peersFile)).toBe(peersAfterReject);

    // Bob accepts Tess, then removes her again (a person may): her old request, replayed,
    // is remembered as handled and does not come back as a new request.
    ok(await bob.cli(['pair', 'accept', tess.fingerprint, '--petname', 'tess']));
    expect(await bob.peers()).toEqual({ tess: { key: tess.key } });
    await tess.send(bobCli, marker); // while she is a peer: a replay of a request already handled stays out
    const whilePeer = await bob.json<Listed>(['pair', 'list']);
    expect(whilePeer.incoming).toEqual([]);
    expect(await bob.peers()).toEqual({ tess: { key: tess.key } });
    ok(await bob.cli(['peers', 'remove', 'tess']));
    const peersAfterRemove = await snapshot(bob.peersFile);
    await tess.send(bobCli, marker);
    const uma = await hand(relay.url, 'u1');
    const umaKnock = uma.sign(bobId, { kind: 'pair_request', text: 'uma' });
    await uma.send(bobCli, umaKnock);
    const afterAcceptedReplay = await bob.json<Listed>(['pair', 'list']);
    expect(afterAcceptedReplay.incoming.map((i) => i.key)).toEqual([uma.key]);
    expect(await snapshot(bob.peersFile)).toBe(peersAfterRemove);
  });

  it('an unsolicited pair_accept, or one answering another request, changes nothing', async () => {
    const relay = await startRelay();
    const bob = person(root, 'bob', relay.url);
    const bobId = (await bob.json<{ key: string }>(['keygen'])).key;
    const bobCli = `${bobId}#cli`;

    // Bob has one open request: to Wendy, who announces herself and reads her route by hand.
    const wendy = await hand(relay.url, 'w1');
    await wendy.announce('wendy');
    await wendy.listen();
    const asked = await bob.json<Requested>(['pair', 'request', wendy.key, '--petname', 'wendy']);
    expect(asked).toMatchObject({ to: wendy.key, session: 'w1', petname: 'wendy', sent: true });
    const request = await wendy.received('the pair_request', (e) => e.kind === 'pair_request');
    expect(request.msg_id).toBe(asked.request_id);
    const peersBefore = await snapshot(bob.peersFile);

    // Ursula accepts a request nobody made; Wendy answers a request id Bob never sent.
    const ursula = await hand(relay.url, 'u1');
    await ursula.send(bobCli, ursula.sign(bobId, { kind: 'pair_accept', text: 'ursula' }));
    await ursula.send(bobCli, ursula.sign(bobId, { kind: 'pair_accept', text: 'ursula', in_reply_to: asked.request_id }));
    await wendy.send(bobCli, wendy.sign(bobId, { kind: 'pair_accept', text: 'wendy', in_reply_to: newMsgId() }));
    // A fresh knock behind them shows they were all handled.
    const tess = await hand(relay.url, 't1');
    await tess.send(bobCli, tess.sign(bobId, { kind: 'pair_request', text: 'tess' }));
    const after = await bob.json<Listed>(['pair', 'list']);
    expect(after.incoming.map((i) => i.key)).toEqual([tess.key]);
    expect(after.completed).toEqual([]);
    expect(after.outgoing).toEqual([expect.objectContaining({ key: wendy.key, state: 'sent', code: asked.code })]);
    expect(await snapshot(bob.peersFile)).toBe(peersBefore);

    // The real answer completes it (so the refusals above were not for want of a route).
    const answer = wendy.sign(bobId, { kind: 'pair_accept', text: 'wendy', in_reply_to: asked.request_id });
    await wendy.send(bobCli, answer);
    const done = await bob.json<Listed>(['pair', 'list']);
    expect(done.completed).toEqual([expect.objectContaining({ petname: 'wendy', key: wendy.key })]);
    expect(await bob.peers()).toEqual({ wendy: { key: wendy.key } });
    // The same pair_accept replayed after she left the peers again adds nothing back.
    ok(await bob.cli(['peers', 'remove', 'wendy']));
    await wendy.send(bobCli, answer);
    await tess.send(bobCli, tess.sign(bobId, { kind: 'pair_request', text: 'tess again' }));
    const replayed = await bob.json<Listed>(['pair', 'list']);
    expect(replayed.incoming).toEqual([expect.objectContaining({ key: tess.key, claimed_name: 'tess again' })]);
    expect(replayed.completed).toEqual([]);
    expect(await bob.peers()).toEqual({});
  });
});

describe('a key substituted on the way', () => {
  /*
   * A relay that rewrites the roster, modelled with two relays and a third identity.
   * Alice uses R2 only; Bob uses R1 only; Mallory uses both and announces Bob's name.
   * On R2 (the relay Alice trusts to show her the roster) "bob" is Mallory's key, so:
   *   1. Alice asks "bob" to pair: the request goes to Mallory. Alice's code is over
   *      (Alice's key, Mallory's key, Alice's request id).
   *   2. Mallory, in the middle, asks the real Bob to pair, by Bob's key on R1, claiming
   *      to be "alice". Bob's code is over (Mallory's key, Bob's key, Mallory's request id).
   * Bob's list shows Mallory's fingerprint, not Alice's, and a code different from the one
   * Alice reads out: when the two people compare codes, the substitution shows.
   */
  it('makes the codes differ when a relay shows the attacker under the name asked for', async () => {
    const r1 = await startRelay();
    const r2 = await startRelay();
    const alice = person(root, 'alice', r2.url);
    const bob = person(root, 'bob', r1.url);
    const mallory = person(root, 'mallory', `${r1.url},${r2.url}`, 'bob');

    ok(await bob.cli(['pair', 'list']));
    ok(await mallory.cli(['pair', 'list']));
    const [aliceId, bobId, malloryId] = await Promise.all([alice.json<{ key: string; fingerprint: string }>(['keygen']), bob.identity(), mallory.identity()]);

    const asked = await alice.json<Requested>(['pair', 'request', 'bob']);
    expect(asked.to).toBe(malloryId.key); // R2 only knows Mallory as "bob"
    expect(asked.fingerprint).toBe(malloryId.fingerprint);

    const intercepted = await mallory.json<Listed>(['pair', 'list']);
    expect(intercepted.incoming).toEqual([expect.objectContaining({ key: aliceId.key, code: asked.code })]);
    const relayed = await mallory.json<Requested>(['pair', 'request', bobId.key], { INTERLINK_NAME: 'alice' });
    expect(relayed).toMatchObject({ to: bobId.key, session: 'cli', sent: true });

    const bobSees = await bob.json<Listed>(['pair', 'list']);
    expect(bobSees.incoming).toHaveLength(1);
    const shown = bobSees.incoming[0]!;
    expect(shown.claimed_name).toBe('alice');
    expect(shown.fingerprint).toBe(malloryId.fingerprint);
    expect(shown.fingerprint).not.toBe(aliceId.fingerprint);
    expect(shown.code).toBe(relayed.code);
    expect(shown.code).not.toBe(asked.code);

    // Even forwarding Alice's own request id (a newer request, so it replaces her first)
    // does not help Mallory: the code binds both keys, and hers is not Alice's.
    const r1Hand = await hand(r1.url);
    const forged = signEnvelope(malloryId.signingKey, { to: bobId.key, to_session: 'cli', kind: 'pair_request', text: 'alice', msg_id: asked.request_id, reply_to: `${malloryId.key}#cli` });
    await r1Hand.send(`${bobId.key}#cli`, forged);
    const forwarded = await bob.json<Listed>(['pair', 'list']);
    expect(forwarded.incoming).toEqual([expect.objectContaining({ fingerprint: malloryId.fingerprint, claimed_name: 'alice' })]);
    expect(forwarded.incoming[0]!.code).toBe(verificationCode(malloryId.key, bobId.key, asked.request_id));
    expect(forwarded.incoming[0]!.code).not.toBe(asked.code);
    expect(await bob.peers()).toEqual({});
  });
});

describe('removing a peer', () => {
  it('takes effect in a running server at once: the next message from that peer is not stored', async () => {
    const relay = await startRelay();
    const alice = await startPeer({ root, name: 'alice', session: 'a1', relays: relay.url, env: { INTERLINK_NAME: 'alice' } });
    const bob = await startPeer({ root, name: 'bob', session: 'b1', relays: relay.url, env: { INTERLINK_NAME: 'bob' } });
    peers.push(alice, bob);

    // Paired the people's way, through the tools.
    const asked = await requestPair<Requested>(alice, { target: 'bob' });
    const aliceId = await alice.call<{ identity: string; fingerprint: string }>('get_my_session_id');
    await eventually(async () => ((await bob.call<Listed>('list_pair_requests')).incoming.length === 1 ? true : undefined), 15_000, 'the request');
    await bob.call('accept_pair', { fingerprint: aliceId.fingerprint, petname: 'alice' });
    await eventually(async () => ((await alice.call<Listed>('list_pair_requests')).outgoing[0]?.state === 'accepted_confirm_needed' ? true : undefined), 15_000, 'the acceptance');
    await alice.call('confirm_pair', { fingerprint: asked.fingerprint });
    expect((await alice.call<{ peers: unknown[] }>('list_peers')).peers).toHaveLength(1);
    expect(asked.petname).toBe('bob');

    type Inbox = { messages: { msg_id: string; peer?: string }[] };
    const first = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', text: 'first' });
    await eventually(async () => ((await bob.call<Inbox>('receive_messages')).messages.some((m) => m.msg_id === first.msg_id) ? true : undefined), 15_000, 'the first message');

    // A person removes Alice with the CLI; Bob's server keeps running.
    const bobAtTerminal = person(root, 'bob', relay.url);
    expect(ok(await bobAtTerminal.cli(['peers', 'remove', 'alice']))).toBe('removed alice\n');
    const bobPid = bob.pid();

    const second = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', text: 'after removal' });
    const rejected = await eventually(async () => logged(bob.stderr(), 'inbound_rejected', second.msg_id)[0], 15_000, 'the rejection');
    expect(rejected).toMatchObject({ code: 'not_allowlisted', from: aliceId.identity });
    expect((await bob.call<Inbox>('receive_messages')).messages.map((m) => m.msg_id)).toEqual([first.msg_id]);
    expect((await bob.fail('message_status', { msg_id: second.msg_id })).code).toBe('unknown_message');
    expect(bob.pid()).toBe(bobPid);
  });
});
