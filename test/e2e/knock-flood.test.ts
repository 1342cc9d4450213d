/**
 * Keys are free and routes are on the roster, so a stranger can knock with hundreds of
 * throwaway keys. Each knock must not be a host wake (a Claude notice, or a `codex queue`
 * run and a model turn): 300 knocks wake a host at most 3 times, in Claude mode and in
 * Codex mode (a `codex` stand-in that counts its runs). Real relay and serve processes.
 */
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { wireOf } from '../../src/envelope/envelope.js';
import { signEnvelope } from '../../src/envelope/sign.js';
import { switchableCodex } from '../helpers/codex.js';
import { newIdentity } from '../helpers/fixtures.js';
import { eventually, startPeer, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { TestClient } from '../helpers/relay-test-client.js';
import { startRelay } from '../helpers/spawn-relay.js';

const KNOCKS = 300;
const MOST_WAKES = 3;

let root: string;
const peers: Peer[] = [];
const clients: TestClient[] = [];

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-knocks-'));
});
afterEach(async () => {
  await Promise.all(peers.splice(0).map((p) => p.close().catch(() => undefined)));
  await Promise.all(clients.splice(0).map((c) => c.close().catch(() => undefined)));
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

/** KNOCKS pairing requests, each from a new key, to `route`; resolves with the last one's fingerprint. */
async function flood(url: string, me: string, route: string): Promise<string> {
  const client = await TestClient.connect(url, { autoAck: true });
  clients.push(client);
  let last = '';
  for (let i = 0; i < KNOCKS; i++) {
    const stranger = newIdentity();
    const session = route.slice(route.indexOf('#') + 1);
    const knock = wireOf(signEnvelope(stranger.signingKey, { to: me, to_session: session, kind: 'pair_request', text: `knock ${i}`, reply_to: `${stranger.key}#k` }));
    const reply = await client.send(route, knock as unknown as Record<string, unknown>);
    if (reply.type !== 'accepted') throw new Error(`relay refused knock ${i}: ${JSON.stringify(reply)}`);
    last = stranger.fingerprint;
  }
  return last;
}

/** Every knock was handled once the last one is in the pairing store (a relay delivers a route in order). */
async function handled(bob: Peer, lastFingerprint: string): Promise<void> {
  await eventually(
    async () => ((await bob.call<{ incoming: { fingerprint: string }[] }>('list_pair_requests')).incoming.some((i) => i.fingerprint === lastFingerprint) ? true : undefined),
    60_000,
    'the last knock',
  );
}

describe(`${KNOCKS} knocks from throwaway keys`, () => {
  it(`wake a Claude session at most ${MOST_WAKES} times`, async () => {
    const relay = await startRelay();
    const bob = await startPeer({ root, name: 'bob', session: 'b1', relays: relay.url });
    peers.push(bob);
    const me = (await bob.call<{ identity: string }>('get_my_session_id')).identity;
    await handled(bob, await flood(relay.url, me, `${me}#b1`));
    const inbox = await readFile(join(bob.state, 'inbox', 'b1.jsonl'), 'utf8');
    const notices = inbox.split('\n').filter((line) => line !== '');
    expect(notices.length).toBeGreaterThanOrEqual(1);
    expect(notices.length).toBeLessThanOrEqual(MOST_WAKES);
    // The open requests stay bounded, and a person sees them all in the list.
    expect((await bob.call<{ incoming: unknown[] }>('list_pair_requests')).incoming).toHaveLength(64);
  });

  it(`run codex queue at most ${MOST_WAKES} times in Codex mode`, async () => {
    const relay = await startRelay();
    const codex = await switchableCodex(root, 'ok');
    const bob = await startPeer({ root, name: 'bob', session: 'ignored', relays: relay.url, env: { INTERLINK_MODE: 'codex', INTERLINK_CODEX_BIN: codex.bin } });
    peers.push(bob);
    const thread = randomUUID();
    await bob.call('bind_codex_session', { thread_id: thread });
    const me = (await bob.call<{ identity: string }>('get_my_session_id')).identity;
    await handled(bob, await flood(relay.url, me, `${me}#${thread}`));
    await eventually(async () => (codex.calls().length >= 1 ? true : undefined), 15_000, 'the first codex queue run');
    expect(codex.calls().length).toBeLessThanOrEqual(MOST_WAKES);
  });
});
