/**
 * Sends that can never be delivered stop, and a person or agent can drop a pending one.
 * Real relay and serve processes, the SDK client and the CLI.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { outboxPath } from '../../src/config/layout.js';
import { signEnvelope } from '../../src/envelope/sign.js';
import { loadOrCreateIdentity } from '../../src/identity/identity.js';
import { Outbox } from '../../src/outbox/outbox.js';
import { expectSuccess, runCli, userEnv } from '../helpers/cli.js';
import { newIdentity } from '../helpers/fixtures.js';
import { eventually, pair, peerPool } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { freePort, startRelay } from '../helpers/spawn-relay.js';

let root: string;
const pool = peerPool(() => root);

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-hopeless-'));
});
afterEach(async () => {
  await pool.closeAll();
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

const peer = pool.start;

interface Status {
  state: string;
  history: { state: string; reason?: string }[];
}

describe('a session hint no session could have', () => {
  it('is refused at the tool with invalid_session, and nothing is queued', async () => {
    const relay = await startRelay();
    const alice = await peer('alice', 'a1', relay.url);
    const bob = await peer('bob', 'b1', relay.url);
    await pair(alice, bob);
    for (const session of ['a/b', '../x', 'line\nbreak', 'x'.repeat(129), '..']) {
      const error = await alice.fail('send_message', { to: 'bob', text: 'hi', session });
      expect(error.code, JSON.stringify(session)).toBe('invalid_session');
    }
    expect(await alice.call('list_pending')).toEqual({ pending: [] });
  });
});

describe('a message every relay refuses for good', () => {
  it('becomes delivery_failed with the relay reason and leaves the send loop', async () => {
    const [r1, r2] = await Promise.all([startRelay(), startRelay()]);
    // An outbox left by an older version, holding a message to a route no relay accepts.
    const config = join(root, 'alice', 'config');
    const state = join(root, 'alice', 'state');
    const me = await loadOrCreateIdentity(join(config, 'id.key'));
    const bob = newIdentity();
    const outbox = await Outbox.open(outboxPath(state, me.key, 'a1'));
    const envelope = signEnvelope(me.signingKey, { to: bob.key, text: 'to nowhere', reply_to: `${me.key}#a1` });
    await outbox.add(envelope, `${bob.key}#a/b`);
    await outbox.close();

    const alice = await peer('alice', 'a1', `${r1.url},${r2.url}`);
    const status = await eventually(
      async () => {
        const s = await alice.call<Status>('message_status', { msg_id: envelope.msg_id });
        return s.state === 'delivery_failed' ? s : undefined;
      },
      15_000,
      'delivery_failed',
    );
    expect(status.history.map((h) => h.state)).toEqual(['pending', 'delivery_failed']);
    expect(status.history[1]!.reason).toMatch(/every relay refused it: bad_frame/);
    expect(await alice.call('list_pending')).toEqual({ pending: [] });
    // No longer offered: a second later the log has not grown with refusals.
    const refusals = () => alice.stderr().split('\n').filter((l) => l.includes('relay_refused_send')).length;
    const before = refusals();
    await new Promise((r) => setTimeout(r, 2_500));
    expect(refusals()).toBe(before);
  });
});

describe('dropping a pending message', () => {
  it('with cancel_pending, and with `interlink-mcp outbox drop`, records canceled and never sends it', async () => {
    // No relay answers yet: messages stay pending.
    const port = await freePort();
    const url = `ws://127.0.0.1:${port}`;
    const alice = await peer('alice', 'a1', url);
    const bob = await peer('bob', 'b1', url);
    await pair(alice, bob);
    const first = await alice.call<{ msg_id: string; state: string }>('send_message', { to: 'bob', session: 'b1', text: 'one' });
    const second = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text: 'two' });
    expect(first.state).toBe('pending');

    expect(await alice.call('cancel_pending', { msg_id: first.msg_id })).toMatchObject({ msg_id: first.msg_id, state: 'canceled' });
    expect((await alice.fail('cancel_pending', { msg_id: first.msg_id })).code).toBe('not_pending');
    expect((await alice.fail('cancel_pending', { msg_id: 'f'.repeat(32) })).code).toBe('unknown_message');

    const env = userEnv({ root: join(root, 'alice'), configDir: alice.config, stateDir: alice.state });
    expect(expectSuccess(await runCli(['outbox', 'drop', second.msg_id], env))).toContain(`Dropped ${second.msg_id}`);
    const again = await runCli(['outbox', 'drop', second.msg_id], env);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('not pending');

    // The running server sees the drop made from the terminal.
    await eventually(async () => ((await alice.call<{ pending: unknown[] }>('list_pending')).pending.length === 0 ? true : undefined), 10_000, 'nothing pending');
    for (const msgId of [first.msg_id, second.msg_id]) {
      expect((await alice.call<Status>('message_status', { msg_id: msgId })).state).toBe('canceled');
    }
    // A relay comes up: a later message arrives, the dropped ones never do.
    await startRelay({ port });
    const third = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text: 'three' });
    const inbox = await eventually(async () => {
      const fetched = await bob.call<{ messages: { msg_id: string; text: string }[] }>('receive_messages');
      return fetched.messages.some((m) => m.msg_id === third.msg_id) ? fetched : undefined;
    }, 20_000, 'the third message');
    expect(inbox.messages.map((m) => m.text)).toEqual(['three']);
  });
});
