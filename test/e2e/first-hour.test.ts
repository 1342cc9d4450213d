/**
 * A person's first hour, as the README tells it: two machines (two config and state roots),
 * one relay, pairing with the `interlink-mcp pair` commands as a person types them, then
 * agent sessions (real `serve` processes driven by the MCP SDK client) that write to each
 * other without naming a session, and to `self`. Then a one-sided revocation and how the
 * two people repair it, and a request withdrawn with `pair cancel`.
 */
import { describe, expect, it } from 'vitest';
import { eventually, resultData, startPeer, type Peer } from '../helpers/mcp.js';
import { Hand, person, type Listed, type Person, type Requested, type Run, pairingWorkspace } from '../helpers/pairing.js';
import { startRelay } from '../helpers/spawn-relay.js';

let root: string;
const { peers: agents, hands } = pairingWorkspace('interlink-first-hour-', (dir) => (root = dir));

function ok(run: Run): string {
  if (run.code !== 0) throw new Error(`exit ${run.code}: ${run.stderr}${run.stdout}`);
  return run.stdout;
}

/** An agent session on a person's machine: the same config and state roots as their CLI. */
async function agent(who: Person, session: string, relays: string): Promise<Peer> {
  const a = await startPeer({ root, name: who.name, session, relays, env: { INTERLINK_NAME: who.name } });
  agents.push(a);
  return a;
}

interface Sent {
  msg_id: string;
  session: string;
  state: string;
}
interface Received {
  messages: { sender: string; msg_id: string; text: string }[];
}

/** send_message without a session, retried while the target session is not on the roster yet. */
async function sendWhenRoutable(from: Peer, to: string, text: string): Promise<Sent> {
  return eventually(
    async () => {
      const result = await from.client.callTool({ name: 'send_message', arguments: { to, text } });
      const data = resultData(result) as unknown as Sent & { error?: { code: string } };
      if (result.isError !== true) return data;
      if (data?.error?.code === 'no_route') return undefined;
      throw new Error(`send_message failed: ${JSON.stringify(data)}`);
    },
    15_000,
    `a route from ${to}`,
  );
}

async function receivedText(a: Peer, text: string): Promise<Received['messages'][number]> {
  return eventually(async () => (await a.call<Received>('receive_messages')).messages.find((m) => m.text === text), 15_000, `"${text}"`);
}

/** The README's "Pair two machines", step by step. */
async function pairByReadme(alice: Person, bob: Person): Promise<{ aliceKey: string; bobKey: string }> {
  expect(ok(await bob.cli(['pair', 'list']))).toContain('No incoming pairing requests.');
  const asked = await alice.json<Requested>(['pair', 'request', 'bob']);
  const aliceId = await alice.identity();
  const seen = await bob.json<Listed>(['pair', 'list']);
  expect(seen.incoming).toEqual([expect.objectContaining({ fingerprint: aliceId.fingerprint, code: asked.code })]);
  expect(ok(await bob.cli(['pair', 'accept', aliceId.fingerprint, '--petname', 'alice']))).toContain('is now a peer');
  // Alice asked by name: she compares the code too, then confirms.
  expect(ok(await alice.cli(['pair', 'list']))).toContain(`accepted: compare the code with them, then run \`interlink-mcp pair confirm ${asked.fingerprint}\``);
  expect(await alice.peers()).toEqual({});
  expect(ok(await alice.cli(['pair', 'confirm', asked.fingerprint]))).toContain(`bob (fingerprint ${asked.fingerprint}) is now a peer. Verification code: ${asked.code}`);
  return { aliceKey: aliceId.key, bobKey: asked.to };
}

describe('after pairing by the README, agents reach each other', () => {
  it('a message without a session reaches the one agent session on the other side, never the pair command\'s', async () => {
    const relay = await startRelay();
    const alice = person(root, 'alice', relay.url);
    const bob = person(root, 'bob', relay.url);
    const { aliceKey, bobKey } = await pairByReadme(alice, bob);

    // Both people's `cli` sessions are still live on the roster; one agent session each.
    const a1 = await agent(alice, 'a1', relay.url);
    const b1 = await agent(bob, 'b1', relay.url);
    const question = await sendWhenRoutable(a1, 'bob', 'what is the build status?');
    expect(question.session).toBe('b1');
    expect((await receivedText(b1, 'what is the build status?')).sender).toBe(aliceKey);
    const answer = await sendWhenRoutable(b1, 'alice', 'green');
    expect(answer.session).toBe('a1');
    expect((await receivedText(a1, 'green')).sender).toBe(bobKey);

    // Naming the pair command's session is refused in words.
    const refused = await a1.fail('send_message', { to: 'bob', text: 'x', session: 'cli' });
    expect(refused.code).toBe('no_route');
    expect(refused.message).toContain('interlink-mcp pair');

    // `self` reaches the sibling agent session, not the `cli` one.
    const a2 = await agent(alice, 'a2', relay.url);
    const note = await sendWhenRoutable(a1, 'self', 'note to my sibling');
    expect(note.session).toBe('a2');
    expect((await receivedText(a2, 'note to my sibling')).sender).toBe(aliceKey);
  });

  it('with only the pair command\'s session on the roster, says no agent session is there', async () => {
    const relay = await startRelay();
    const alice = person(root, 'alice', relay.url);
    const bob = person(root, 'bob', relay.url);
    await pairByReadme(alice, bob);
    const a1 = await agent(alice, 'a1', relay.url);
    const refused = await eventually(async () => {
      const error = await a1.fail('send_message', { to: 'bob', text: 'anyone?' });
      return error.code === 'no_route' ? error : undefined;
    });
    expect(refused.message).toMatch(/no agent session of that peer/);
  });

  it('refuses `cli` as an agent session id', async () => {
    const relay = await startRelay();
    const alice = person(root, 'alice', relay.url);
    const run = await alice.cli(['serve', '--session', 'cli']);
    expect(run.code).toBe(64);
    expect(run.stderr).toMatch(/reserved/);
  });
});

describe('a one-sided revocation can be repaired', () => {
  it('bob removed alice; he asks again, alice (still trusting him) accepts, and both are peers again', async () => {
    const relay = await startRelay();
    const alice = person(root, 'alice', relay.url);
    const bob = person(root, 'bob', relay.url);
    const { aliceKey } = await pairByReadme(alice, bob);
    const aliceId = await alice.identity();
    const bobId = await bob.identity();

    ok(await bob.cli(['peers', 'remove', 'alice']));
    expect(await bob.peers()).toEqual({});
    const asked = await bob.json<Requested>(['pair', 'request', 'alice']);
    expect(asked.to).toBe(aliceKey);

    // Alice's side admits it as a request from a peer, for a person to decide.
    const listed = ok(await alice.cli(['pair', 'list']));
    expect(listed).toContain(bobId.fingerprint);
    expect(listed).toContain('already your peer bob');
    expect(ok(await alice.cli(['pair', 'accept', bobId.fingerprint]))).toContain(`bob (fingerprint ${bobId.fingerprint}) was already your peer`);
    expect(await alice.peers()).toEqual({ bob: { key: bobId.key } });

    // Bob asked by name: his next list shows the acceptance, and he confirms.
    const done = await bob.json<Listed>(['pair', 'list']);
    expect(done.outgoing).toEqual([expect.objectContaining({ key: aliceKey, state: 'accepted_confirm_needed' })]);
    ok(await bob.cli(['pair', 'confirm', aliceId.fingerprint]));
    expect(await bob.peers()).toEqual({ alice: { key: aliceKey } });
    expect((await bob.json<Listed>(['pair', 'list'])).outgoing).toEqual([]);
  });

  it('a request made moot by adding the peer by hand is closed once, not reported as accepted', async () => {
    const relay = await startRelay();
    const alice = person(root, 'alice', relay.url);
    const bob = person(root, 'bob', relay.url);
    const { aliceKey } = await pairByReadme(alice, bob);
    const aliceId = await alice.identity();

    ok(await bob.cli(['peers', 'remove', 'alice']));
    await bob.json<Requested>(['pair', 'request', 'alice']);
    ok(await bob.cli(['peers', 'add', 'alice', aliceKey]));
    const first = ok(await bob.cli(['pair', 'list']));
    expect(first).toContain(`alice (fingerprint ${aliceId.fingerprint}) is already your peer (peers.json); your open request to it is closed.`);
    expect(first).not.toContain('accepted your request');
    const second = await bob.json<Listed>(['pair', 'list']);
    expect(second).toMatchObject({ outgoing: [], completed: [], closed_already_peers: [] });
  });
});

describe('pair cancel', () => {
  it('withdraws an open request; a late acceptance changes nothing', async () => {
    const relay = await startRelay();
    const alice = person(root, 'alice', relay.url);
    const carol = await Hand.connect(relay.url);
    hands.push(carol);
    await carol.announce('carol');
    await carol.listen();
    const asked = await alice.json<Requested>(['pair', 'request', 'carol']);
    const request = await carol.received('the request', (e) => e.kind === 'pair_request');

    const canceled = ok(await alice.cli(['pair', 'cancel', carol.fingerprint]));
    expect(canceled).toContain(`Withdrew your request to carol (${carol.fingerprint})`);
    expect((await alice.json<Listed>(['pair', 'list'])).outgoing).toEqual([]);

    // Carol accepts anyway: alice's side refuses it, and carol is not a peer.
    const aliceId = await alice.identity();
    await carol.send(`${aliceId.key}#cli`, carol.sign(aliceId.key, { kind: 'pair_accept', text: 'carol', in_reply_to: request.msg_id }));
    const after = await alice.json<Listed>(['pair', 'list']);
    expect(after.completed).toEqual([]);
    expect(await alice.peers()).toEqual({});
    expect(asked.fingerprint).toBe(carol.fingerprint);

    const again = await alice.cli(['pair', 'cancel', carol.fingerprint]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/no open pairing request of yours/);
  });
});
