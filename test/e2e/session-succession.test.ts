/**
 * Mail for a session that ended reaches the identity's live session (DESIGN.md "When a
 * session ends"): separate `serve` processes driven by the official MCP SDK client, a
 * real relay, one state root per person, sessions that end and start with new ids.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runCli, userEnv } from '../helpers/cli.js';
import { eventually, kill9, pair, peerPool, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { startRelay, type RelayProcess } from '../helpers/spawn-relay.js';
import { owedReceipts, oweReceipt } from '../../src/agent/rejected.js';
import { rejectedPath } from '../../src/config/layout.js';

let root: string;
const pool = peerPool(() => root);
let relay: RelayProcess;

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-succession-'));
  relay = await startRelay();
});
afterEach(async () => {
  await pool.closeAll();
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

interface Message {
  msg_id: string;
  text: string;
  to_session?: string;
  receipt: { sender: string; msg_id: string };
}
interface Inbox {
  messages: Message[];
  more: boolean;
}

const unread = (p: Peer) => p.call<Inbox>('receive_messages');
const stateOf = async (p: Peer, msgId: string) => (await p.call<{ state: string }>('message_status', { msg_id: msgId })).state;

/** Waits until `p` is shown a message with this text, and returns it. */
function shown(p: Peer, text: string, timeoutMs = 20_000): Promise<Message> {
  return eventually(async () => (await unread(p)).messages.find((m) => m.text === text), timeoutMs, `${text} shown`);
}

/** alice a1 and bob bob-s1, paired; bob-s1 has written to alice, so alice's replies go to bob-s1 by default. */
async function conversationWithBobS1(): Promise<{ alice: Peer; bobS1: Peer }> {
  const alice = await pool.start('alice', 'a1', relay.url);
  const bobS1 = await pool.start('bob', 'bob-s1', relay.url);
  await pair(alice, bobS1);
  await bobS1.call('send_message', { to: 'alice', session: 'a1', text: 'can you review PR 7?' });
  const question = await shown(alice, 'can you review PR 7?');
  await alice.call('acknowledge_messages', { messages: [question.receipt] });
  return { alice, bobS1 };
}

describe('mail for an ended session', () => {
  it('reaches the next session of the identity, marked with the session it was signed for, and the sender sees it stored and acknowledged', async () => {
    const { alice, bobS1 } = await conversationWithBobS1();
    await pool.stop(bobS1);
    const reply = await alice.call<{ msg_id: string; session: string }>('send_message', { to: 'bob', text: 'reviewed: two comments' });
    expect(reply.session).toBe('bob-s1');
    // Accepted by the relay while bob-s1 is on no roster.
    await eventually(async () => ((await stateOf(alice, reply.msg_id)) === 'awaiting_session' ? true : undefined), 15_000, 'accepted by the relay');

    const bobS2 = await pool.start('bob', 'bob-s2', relay.url);
    const taken = await shown(bobS2, 'reviewed: two comments');
    expect(taken).toMatchObject({ msg_id: reply.msg_id, to_session: 'bob-s1' });
    await eventually(async () => ((await stateOf(alice, reply.msg_id)) === 'receiver_stored' ? true : undefined), 20_000, 'receiver_stored at alice');

    // bob-s2's host is woken for it: a notice in its own inbox that points at bob-s1's mailbox.
    const inbox = await eventually(async () => {
      const text = await readFile(join(bobS2.state, 'inbox', 'bob-s2.jsonl'), 'utf8').catch(() => '');
      return text.includes('"session":"bob-s1"') ? text : undefined;
    }, 15_000, 'a notice in bob-s2 inbox');
    expect(inbox).toContain('unread Interlink message');

    // What a person reads: `status` says bob-s1 ended and whose its mail is, and `inbox --unread` lists the reply under bob-s1.
    const env = userEnv({ root: join(root, 'bob'), configDir: bobS2.config, stateDir: bobS2.state }, { INTERLINK_URL: relay.url });
    const status = await runCli(['status'], env);
    expect(status.stdout).toMatch(/session {6}bob-s1 \(ended [0-9T:.-]+Z; its mail goes to bob-s2\): 1 unread/);
    expect(status.stdout).toMatch(/session {6}bob-s2 \(live, claude\)/);
    expect((await runCli(['inbox', '--unread'], env)).stdout).toContain('bob-s1  alice');

    expect(await bobS2.call('acknowledge_messages', { messages: [taken.receipt] })).toEqual({ acknowledged: 1, already_acknowledged: 0, unknown: 0 });
    expect((await unread(bobS2)).messages).toEqual([]);
    await eventually(async () => ((await stateOf(alice, reply.msg_id)) === 'receiver_acknowledged' ? true : undefined), 20_000, 'receiver_acknowledged at alice');
  });

  it('is taken from the mailbox of a session killed with unread mail, and handed back when that session runs again', async () => {
    const { alice, bobS1 } = await conversationWithBobS1();
    const first = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'bob-s1', text: 'first, stored before the crash' });
    await shown(bobS1, 'first, stored before the crash');
    kill9(bobS1);
    const bobS2 = await pool.start('bob', 'bob-s2', relay.url);
    expect(await shown(bobS2, 'first, stored before the crash')).toMatchObject({ msg_id: first.msg_id, to_session: 'bob-s1' });
    // The killed session's last announcement no longer shows it live: bob-s2 said goodbye for it.
    await eventually(async () => {
      const found = await alice.call<{ identities: { sessions: { session: string }[] }[] }>('discover', { peer: 'bob' });
      const sessions = found.identities.flatMap((i) => i.sessions.map((s) => s.session));
      return sessions.includes('bob-s2') && !sessions.includes('bob-s1') ? true : undefined;
    }, 15_000, 'bob-s1 off the roster');

    // bob-s1 comes back: its mail is its own again, and bob-s2 stops showing it.
    const back = await pool.start('bob', 'bob-s1', relay.url);
    await eventually(async () => ((await unread(bobS2)).messages.length === 0 ? true : undefined), 20_000, 'bob-s2 lets go of bob-s1');
    const mine = await shown(back, 'first, stored before the crash');
    expect(mine.to_session).toBeUndefined();
    const second = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'bob-s1', text: 'second, to the session that came back' });
    expect((await shown(back, 'second, to the session that came back')).msg_id).toBe(second.msg_id);
    expect((await unread(bobS2)).messages).toEqual([]);
  });

  it("sends the refusal receipts an ended session still owed: its heir owes them and a relay takes them", async () => {
    const { alice, bobS1 } = await conversationWithBobS1();
    const bobKey = (await bobS1.call<{ identity: string }>('get_my_session_id')).identity;
    const aliceKey = (await alice.call<{ identity: string }>('get_my_session_id')).identity;
    await pool.stop(bobS1);
    // bob-s1 ended owing alice a receipt (a refusal whose receipt no relay took before it stopped).
    const endedFile = rejectedPath(bobS1.state, bobKey, 'bob-s1');
    await oweReceipt(endedFile, { to: aliceKey, session: 'a1', msg_id: 'f'.repeat(32), code: 'stale', at: Date.now() });
    const bobS2 = await pool.start('bob', 'bob-s2', relay.url);
    await eventually(async () => ((await owedReceipts(endedFile)).length === 0 ? true : undefined), 20_000, 'taken over from bob-s1');
    await eventually(async () => ((await owedReceipts(rejectedPath(bobS2.state, bobKey, 'bob-s2'))).length === 0 ? true : undefined), 20_000, 'sent by bob-s2');
  });

  it('goes to the live session that started last when several run', async () => {
    const { alice, bobS1 } = await conversationWithBobS1();
    await pool.stop(bobS1);
    const older = await pool.start('bob', 'bob-s2', relay.url);
    const newer = await pool.start('bob', 'bob-s3', relay.url);
    const reply = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'bob-s1', text: 'for whoever carries on' });
    expect((await shown(newer, 'for whoever carries on')).msg_id).toBe(reply.msg_id);
    expect((await unread(older)).messages).toEqual([]);
    // The heir ends: the session still running takes both ended sessions' mail.
    await pool.stop(newer);
    expect((await shown(older, 'for whoever carries on')).to_session).toBe('bob-s1');
  });
});
