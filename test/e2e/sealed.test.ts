/**
 * What a relay sees (issue 15, sealed bodies): a relay operator who records every frame and
 * keeps the relay's `--db` files learns no body, task id, status, cancel reason, reply
 * session or pairing name — only keys, routes, times and a size class. Real serve and
 * relay processes, the SDK client, and a recording proxy in front of the relay.
 */
import { readdir, readFile } from 'node:fs/promises';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { eventually, pair, startPeer, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { RecordingRelay } from '../helpers/recording-relay.js';
import { startRelay } from '../helpers/spawn-relay.js';

let root: string;
const peers: Peer[] = [];
const recorders: RecordingRelay[] = [];

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-sealed-'));
});
afterEach(async () => {
  await Promise.all(peers.splice(0).map((p) => p.close().catch(() => undefined)));
  await Promise.all(recorders.splice(0).map((r) => r.close()));
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

interface Inbox {
  messages: { msg_id: string; text: string; task_id?: string; status?: string; reply_to?: string }[];
}

async function filesUnder(dir: string): Promise<string> {
  const names = await readdir(dir, { recursive: true, withFileTypes: true });
  const texts = await Promise.all(names.filter((n) => n.isFile()).map((n) => readFile(join(n.parentPath, n.name), 'utf8')));
  return texts.join('\n');
}

/** A relay (durable in `db` when given) behind a recording proxy, and alice and bob paired through it. */
async function pairedThroughRecorder(sessions: { alice: string; bob: string }, db?: string): Promise<{ honest: Awaited<ReturnType<typeof startRelay>>; recorder: RecordingRelay; alice: Peer; bob: Peer }> {
  const honest = await startRelay(db === undefined ? {} : { db });
  const recorder = await RecordingRelay.start(honest.url);
  recorders.push(recorder);
  const alice = await startPeer({ root, name: 'alice', session: sessions.alice, relays: recorder.url });
  const bob = await startPeer({ root, name: 'bob', session: sessions.bob, relays: recorder.url });
  peers.push(alice, bob);
  await pair(alice, bob);
  return { honest, recorder, alice, bob };
}

describe('a relay that records everything', () => {
  it('never sees a body, a task id, a status, a cancel reason or a reply session; the receiver reads them all', async () => {
    const db = join(root, 'relay-db');
    const { honest, recorder, alice, bob } = await pairedThroughRecorder({ alice: 'desk-of-alice', bob: 'bench-of-bob' }, db);

    const secrets = {
      text: 'the launch code is swordfish-7731',
      task: 'task-quarterly-numbers',
      reason: 'abandon the merger talks',
    };
    const sent = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'bench-of-bob', text: secrets.text, task_id: secrets.task, status: 'needs_input' });
    await alice.call('cancel_task', { to: 'bob', session: 'bench-of-bob', task_id: secrets.task, reason: secrets.reason });
    const inbox = await eventually(async () => {
      const got = await bob.call<Inbox>('receive_messages');
      return got.messages.length >= 2 ? got : undefined;
    });
    expect(inbox.messages[0]).toMatchObject({ msg_id: sent.msg_id, text: secrets.text, task_id: secrets.task, status: 'needs_input' });
    expect(inbox.messages.map((m) => m.text)).toContain(secrets.reason);
    // Bob answers alice's session: the reply session came out of the seal.
    await bob.call('send_message', { to: 'alice', text: 'answer: only for alice' });
    await eventually(async () => ((await alice.call<Inbox>('receive_messages')).messages.some((m) => m.text === 'answer: only for alice') ? true : undefined));

    const seen = recorder.all();
    expect(seen).toContain('"type":"deliver"');
    expect(seen).toContain(sent.msg_id);
    for (const secret of [secrets.text, 'swordfish', secrets.task, 'quarterly', secrets.reason, 'merger', 'needs_input', 'answer: only for alice']) {
      expect(seen, secret).not.toContain(secret);
    }
    // The reply session appears only as a route the sender itself authenticates, never inside a payload.
    for (const frame of recorder.frames.filter((f) => f.includes('"payload"'))) {
      const payload = (JSON.parse(frame) as { payload: Record<string, unknown> }).payload;
      expect(Object.keys(payload).sort()).toEqual(['from', 'kind', 'msg_id', 'sealed', 'sig', 'to', 'to_session', 'ts', 'v']);
      expect(payload.v).toBe(4);
    }
    // Nor does the relay's store hold them once stopped.
    await honest.child.kill('SIGTERM');
    const stored = await filesUnder(db);
    for (const secret of [secrets.text, secrets.task, secrets.reason, 'answer: only for alice']) expect(stored, secret).not.toContain(secret);
  });

  it("shows a session's name, cwd, git root and summary only to peers; a stranger and the relay see a key and a session", async () => {
    const honest = await startRelay();
    const recorder = await RecordingRelay.start(honest.url);
    recorders.push(recorder);
    const named = { INTERLINK_NAME: 'alice-codename-orchid' };
    const alice = await startPeer({ root, name: 'alice', session: 'a1', relays: recorder.url, env: named });
    const bob = await startPeer({ root, name: 'bob', session: 'b1', relays: recorder.url });
    const eve = await startPeer({ root, name: 'eve', session: 'e1', relays: recorder.url });
    peers.push(alice, bob, eve);
    const { aKey } = await pair(alice, bob);
    await alice.call('set_summary', { summary: 'summary-marker: migrating the ledger' });

    interface Discovered {
      identities: { key: string; sessions: { session: string; name?: string; cwd?: string; git_root?: string; summary?: string }[] }[];
    }
    const aliceAs = async (who: Peer) => (await who.call<Discovered>('discover')).identities.find((i) => i.key === aKey)?.sessions.find((x) => x.session === 'a1');
    // Bob, a peer, reads it all (once alice's announcement names him as a reader).
    const seenByBob = await eventually(async () => {
      const s = await aliceAs(bob);
      return s?.summary === 'summary-marker: migrating the ledger' ? s : undefined;
    });
    expect(seenByBob).toMatchObject({ name: 'alice-codename-orchid' });
    expect(seenByBob.cwd).toBeDefined();
    // Eve, a stranger, is not shown alice at all: a session asks the relays only for its own identity and its peers.
    expect(await aliceAs(eve)).toBeUndefined();
    // Pairing by name still finds alice: eve asks for the name she was told (the relay sees its bucket, never the name).
    const asked = await eve.call<{ to: string; session: string }>('request_pair', { target: 'alice-codename-orchid' });
    expect(asked).toMatchObject({ to: aKey, session: 'a1' });
    // Nothing of it crossed the relay in clear.
    const seen = recorder.all();
    for (const secret of ['alice-codename-orchid', 'summary-marker', 'migrating the ledger', process.cwd()]) expect(seen, secret).not.toContain(secret);
  });

  it('tells message sizes only to within a size class', async () => {
    const { recorder, alice, bob } = await pairedThroughRecorder({ alice: 'a', bob: 'b' });
    const texts = ['y', 'yes', 'yes, go ahead', 'yes, go ahead and merge it once the checks are green'];
    for (const text of texts) await alice.call('send_message', { to: 'bob', session: 'b', text });
    await eventually(async () => ((await bob.call<Inbox>('receive_messages')).messages.length === texts.length ? true : undefined));
    const sizes = recorder.frames
      .filter((f) => f.includes('"type":"send"'))
      .map((f) => ((JSON.parse(f) as { payload: { sealed: string } }).payload.sealed.length));
    expect(sizes).toHaveLength(texts.length);
    expect(new Set(sizes).size).toBe(1);
  });
});
