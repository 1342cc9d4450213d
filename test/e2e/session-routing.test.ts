/**
 * Routing through session churn, through the public surface (separate `serve` processes,
 * the MCP SDK client, real relays): a session routes from its first second; with no
 * relay answering it routes to a peer known from its own stores and the message goes out
 * when the relay is back; a session id never seen is named as such; and a message a relay
 * holds for a session that is on no roster shows as `awaiting_session` in message_status
 * and in `status`.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runCli, userEnv } from '../helpers/cli.js';
import { LyingRelay } from '../helpers/lying-relay.js';
import { eventually, pair, peerPool, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { freePort, startRelay, type RelayProcess } from '../helpers/spawn-relay.js';

let root: string;
const pool = peerPool(() => root);
const relays: RelayProcess[] = [];
const lying: LyingRelay[] = [];

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-routing-'));
});
afterEach(async () => {
  await pool.closeAll();
  await Promise.all(relays.splice(0).map((r) => r.child.kill()));
  await Promise.all(lying.splice(0).map((r) => r.close()));
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

async function relay(options: { port?: number; db?: string } = {}): Promise<RelayProcess> {
  const r = await startRelay(options);
  relays.push(r);
  return r;
}

async function stopRelay(r: RelayProcess): Promise<void> {
  relays.splice(relays.indexOf(r), 1);
  await r.child.kill();
}

interface Receipt {
  msg_id: string;
  session: string;
  state: string;
  note?: string;
}

interface Status {
  state: string;
  awaiting?: { session: string; since_at: number; note: string };
  history: { state: string; at: number }[];
}

/** Whether a roster entry's announcement is the session `session` of `key`. */
function routeOf(announcement: unknown, key: string, session: string): boolean {
  if (typeof announcement !== 'object' || announcement === null) return false;
  return 'key' in announcement && announcement.key === key && 'session' in announcement && announcement.session === session;
}

/** Whether a promise has settled, without waiting for it. */
async function settled(promise: Promise<unknown>): Promise<boolean> {
  const pending = Symbol('pending');
  return (await Promise.race([promise.then(() => true, () => true), Promise.resolve(pending)])) !== pending;
}

async function texts(p: Peer): Promise<string[]> {
  return (await p.call<{ messages: { text: string }[] }>('receive_messages')).messages.map((m) => m.text);
}

async function receives(p: Peer, text: string): Promise<void> {
  await eventually(async () => ((await texts(p)).includes(text) ? true : undefined), 20_000, `${text} received`);
}

describe('routing through session churn', () => {
  it('routes a send made the moment two sessions start to the live session', async () => {
    const r = await relay();
    const a1 = await pool.start('alice', 'alice-s1', r.url);
    const b1 = await pool.start('bob', 'bob-s1', r.url);
    await pair(a1, b1);
    await Promise.all([pool.stop(a1), pool.stop(b1)]);
    // New sessions of both (new windows): nothing in their stores, and Bob sends the moment both are up.
    const [alice, bob] = await Promise.all([pool.start('alice', 'alice-s2', r.url), pool.start('bob', 'bob-s2', r.url)]);
    const receipt = await bob.call<Receipt>('send_message', { to: 'alice', text: 'first second' });
    expect(receipt.session).toBe('alice-s2');
    await receives(alice, 'first second');
  });

  it('decides only after the roster that answered without the peer is asked again, in the first seconds', async () => {
    // A relay whose roster does not show Alice's new session until Bob's send has asked
    // for it once: the answer a session gets before its peer announced.
    const r = await LyingRelay.start();
    lying.push(r);
    const a1 = await pool.start('alice', 'alice-s1', r.url);
    const b1 = await pool.start('bob', 'bob-s1', r.url);
    const { aKey } = await pair(a1, b1);
    await Promise.all([pool.stop(a1), pool.stop(b1)]);
    let shown = false;
    let asked = 0;
    r.rewriteRoster = (entries) => {
      asked++;
      // This relay keeps sessions that said goodbye: alice-s1 never shows, alice-s2 once shown.
      return entries.filter((e) => !routeOf(e.announcement, aKey, 'alice-s1') && (shown || !routeOf(e.announcement, aKey, 'alice-s2')));
    };
    const [alice, bob] = await Promise.all([pool.start('alice', 'alice-s2', r.url), pool.start('bob', 'bob-s2', r.url)]);
    const before = asked;
    const sending = bob.call<Receipt>('send_message', { to: 'alice', text: 'after asking again' });
    // The send's first roster answer went out without Alice (or the send already ended).
    await eventually(async () => (asked > before || (await settled(sending)) ? true : undefined));
    shown = true;
    expect((await sending).session).toBe('alice-s2');
    await receives(alice, 'after asking again');
  });

  /**
   * Bob wrote to alice-s1; then the relay stops and alice's server restarts as `session`.
   * Her send to bob, made while no relay answers, is queued for bob-s1 and read once the
   * relay is back.
   */
  async function sendWhileRelayDown(session: string): Promise<Receipt> {
    const port = await freePort();
    const db = join(root, 'relay-db');
    const r = await relay({ port, db });
    const alice = await pool.start('alice', 'alice-s1', r.url);
    const bob = await pool.start('bob', 'bob-s1', r.url);
    await pair(alice, bob);
    await bob.call('send_message', { to: 'alice', text: 'minutes earlier' });
    await receives(alice, 'minutes earlier');
    await stopRelay(r);
    await pool.stop(alice);
    const restarted = await pool.start('alice', session, r.url);
    const receipt = await restarted.call<Receipt>('send_message', { to: 'bob', text: 'while the relay was down' });
    expect(receipt).toMatchObject({ state: 'pending', session: 'bob-s1' });
    await relay({ port, db });
    await receives(bob, 'while the relay was down');
    return receipt;
  }

  it('queues a send to a peer known from the stores while no relay answers, and delivers it when the relay is back', async () => {
    // Alice's server restarts under the same id: her sticky table must come from her stores.
    expect((await sendWhileRelayDown('alice-s1')).note).toMatch(/no relay answers/);
  });

  it('routes, while no relay answers, a session started under a new id to a peer its ended session talked to', async () => {
    // A new Claude window: a new session id, which learns bob's session from alice-s1's stores once it takes them.
    await sendWhileRelayDown('alice-s2');
  });

  it('refuses, saying no relay answers, a send to a peer it knows nothing of while none answers', async () => {
    const port = await freePort();
    const r = await relay({ port });
    const alice = await pool.start('alice', 'alice-s1', r.url);
    const bob = await pool.start('bob', 'bob-s1', r.url);
    await pair(alice, bob);
    await stopRelay(r);
    await pool.stop(alice);
    const restarted = await pool.start('alice', 'alice-s1', r.url);
    const error = await restarted.fail('send_message', { to: 'bob', text: 'to whom?' });
    expect(error.code).toBe('no_route');
    expect(error.message).toMatch(/no relay answers/);
  });

  it('says when a session id was never seen, and not when it is on a roster', async () => {
    const r = await relay();
    const alice = await pool.start('alice', 'alice-s1', r.url);
    const bob = await pool.start('bob', 'bob-s1', r.url);
    await pair(alice, bob);
    const typo = await alice.call<Receipt>('send_message', { to: 'bob', session: 'bob-sl', text: 'to a typo' });
    expect(typo.session).toBe('bob-sl');
    expect(typo.note).toMatch(/session bob-sl of bob was never seen/);
    const known = await alice.call<Receipt>('send_message', { to: 'bob', session: 'bob-s1', text: 'to bob' });
    expect(known.note).toBeUndefined();
  });

  it('shows a message held for a session on no roster as awaiting_session, in message_status and status, until the session reads it', async () => {
    const r = await relay();
    const alice = await pool.start('alice', 'alice-s1', r.url);
    const bob = await pool.start('bob', 'bob-s1', r.url);
    await pair(alice, bob);
    await bob.call('send_message', { to: 'alice', text: 'from bob-s1' });
    await receives(alice, 'from bob-s1');
    // Bob's session ends (a goodbye): it leaves the rosters.
    await pool.stop(bob);
    const receipt = await alice.call<Receipt>('send_message', { to: 'bob', text: 'after bob left' });
    expect(receipt.session).toBe('bob-s1');
    expect(receipt.note).toMatch(/on no relay roster/);
    const status = await eventually(async () => {
      const s = await alice.call<Status>('message_status', { msg_id: receipt.msg_id });
      return s.state === 'awaiting_session' ? s : undefined;
    });
    const accepted = status.history.find((h) => h.state === 'bus_accepted')!.at;
    expect(status.awaiting).toMatchObject({ session: 'bob-s1' });
    expect(status.awaiting!.since_at).toBeGreaterThanOrEqual(accepted);
    expect(status.awaiting!.note).toMatch(/live session of the recipient's identity takes it/);
    // A view, not a recorded state: the history holds only what happened.
    expect(status.history.map((h) => h.state)).not.toContain('awaiting_session');

    const env = userEnv({ root, configDir: alice.config, stateDir: alice.state }, { INTERLINK_URL: r.url });
    const run = await runCli(['status', '--json'], env);
    expect(run.code, run.stderr).toBe(0);
    const sessions = (JSON.parse(run.stdout) as { sessions: { session: string; awaiting_session: number; awaiting_since: string | null }[] }).sessions;
    expect(sessions.find((s) => s.session === 'alice-s1')).toMatchObject({ awaiting_session: 1, awaiting_since: expect.any(String) });
    const text = await runCli(['status'], env);
    expect(text.stdout).toMatch(/1 sent waiting on a relay for a session on no roster since \d{4}-\d\d-\d\dT/);

    // Bob's session comes back and reads it: the receiver's report replaces the view.
    const back = await pool.start('bob', 'bob-s1', r.url);
    await receives(back, 'after bob left');
    await eventually(async () => {
      const s = await alice.call<Status>('message_status', { msg_id: receipt.msg_id });
      return s.state === 'receiver_stored' ? s : undefined;
    });
  });
});
