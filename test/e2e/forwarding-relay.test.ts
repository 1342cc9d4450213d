/**
 * One honest relay and one that forwards to it, both in a session's INTERLINK_URL (issue
 * 13, point 4): the forwarder cannot read or acknowledge the session's queue on the honest
 * relay, and messages on the honest relay still arrive. Real relay and serve processes,
 * the SDK client and the CLI; the forwarder is test/helpers/forwarding-relay.ts.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { expectSuccess, runCli, userEnv } from '../helpers/cli.js';
import { ForwardingRelay, type ForwardingMode } from '../helpers/forwarding-relay.js';
import { eventually, pair, peerPool, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { startRelay, type RelayProcess } from '../helpers/spawn-relay.js';

let root: string;
const pool = peerPool(() => root);
const forwarders: ForwardingRelay[] = [];

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-forwarding-'));
});
afterEach(async () => {
  await pool.closeAll();
  await Promise.all(forwarders.splice(0).map((f) => f.close()));
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

async function setUp(mode: ForwardingMode): Promise<{ honest: RelayProcess; forwarder: ForwardingRelay }> {
  const honest = await startRelay({ db: join(root, 'honest-db') });
  const forwarder = await ForwardingRelay.start(honest.url, mode);
  forwarders.push(forwarder);
  return { honest, forwarder };
}

/** Bob (on the honest relay only) writes to alice; it must reach her through the honest relay. */
async function bobWritesToAlice(alice: Peer, honest: RelayProcess, text: string): Promise<void> {
  const bob = await pool.start('bob', 'b1', honest.url);
  await pair(alice, bob);
  await bob.call('send_message', { to: 'alice', session: 'a1', text });
  await eventually(async () => {
    const fetched = await alice.call<{ messages: { text: string }[] }>('receive_messages');
    return fetched.messages.some((m) => m.text === text) ? true : undefined;
  }, 20_000, 'the message through the honest relay');
}

function nothingRead(forwarder: ForwardingRelay): void {
  expect(forwarder.frames('auth_ok')).toEqual([]);
  expect(forwarder.stolen).toEqual([]);
}

describe('a forwarding relay in the list', () => {
  it('that presents its own key: the proofs it gets name its key, and the honest relay refuses them', async () => {
    const { honest, forwarder } = await setUp('own-key');
    const alice = await pool.start('alice', 'a1', `${honest.url},${forwarder.url}`);
    const refusal = await eventually(async () => forwarder.frames('refused')[0], 20_000, "the honest relay's refusal of a forwarded proof");
    expect(refusal).toMatchObject({ code: 'auth_failed' });
    expect(JSON.stringify(refusal)).toContain('made for another relay');
    await bobWritesToAlice(alice, honest, 'through the honest relay');
    nothingRead(forwarder);
  });

  it("that presents the honest relay's key pinned for the honest URL: refused, loudly, and shown by status", async () => {
    const { honest, forwarder } = await setUp('honest-key');
    const alice = await pool.start('alice', 'a1', `${honest.url}#key=${honest.key},${forwarder.url}`);
    await eventually(async () => (alice.stderr().includes('relay_key_refused') ? true : undefined), 20_000, 'relay_key_refused');
    expect(alice.stderr()).toContain(`relay ${forwarder.url} answers with the key of ${honest.url}`);
    await bobWritesToAlice(alice, honest, 'pinned');
    nothingRead(forwarder);

    const env = userEnv({ root: join(root, 'alice'), configDir: alice.config, stateDir: alice.state }, { INTERLINK_URL: `${honest.url}#key=${honest.key},${forwarder.url}` });
    const status = JSON.parse(expectSuccess(await runCli(['status', '--json'], env))) as { relay_keys: { url: string; pinned: string | null; refused: { message: string } | null }[] };
    expect(status.relay_keys[0]).toEqual({ url: honest.url, pinned: honest.key, recorded: null, refused: null });
    expect(status.relay_keys[1]!.refused?.message).toContain(`answers with the key of ${honest.url}`);
  });

  it("that presents the honest relay's key recorded on first use: refused when it joins the list", async () => {
    const { honest, forwarder } = await setUp('honest-key');
    const first = await pool.start('alice', 'a1', honest.url);
    const env = userEnv({ root: join(root, 'alice'), configDir: first.config, stateDir: first.state }, { INTERLINK_URL: honest.url });
    await eventually(async () => {
      const status = JSON.parse(expectSuccess(await runCli(['status', '--json'], env))) as { relay_keys: { recorded: string | null }[] };
      return status.relay_keys[0]!.recorded === honest.key ? true : undefined;
    }, 20_000, 'the honest key recorded');
    await pool.stop(first);

    const alice = await pool.start('alice', 'a1', `${honest.url},${forwarder.url}`);
    await eventually(async () => (alice.stderr().includes('relay_key_refused') ? true : undefined), 20_000, 'relay_key_refused');
    await bobWritesToAlice(alice, honest, 'recorded');
    nothingRead(forwarder);
  });
});
