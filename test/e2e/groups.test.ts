/**
 * One message to several agents (issue 39): a coordinator sends a task to three
 * identities at once, each on its own state root, its own `serve` process and the official
 * MCP SDK client, through a relay process. One answers, one refuses the task, one is
 * offline and answers after it is back; the panel (message_status with the group id) is
 * read after each answer. Also: the group sent again under its idempotency key, the group's
 * cancel reaching only who is still working, the group's thread, the audience a person
 * defines on the command line, and a removed peer left out of it.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { outboxPath } from '../../src/config/layout.js';
import { Outbox } from '../../src/outbox/outbox.js';
import { runCli, userEnv } from '../helpers/cli.js';
import { eventually, kill9, pair, startPeer, type Peer } from '../helpers/mcp.js';
import { startRelay, type RelayProcess } from '../helpers/spawn-relay.js';

interface Line {
  to: string;
  outcome: string;
  msg_id?: string;
  delivery?: string;
  answer?: { msg_id: string; status: string; text?: string };
  duplicates?: { msg_id: string }[];
  latest?: { status?: string };
  error?: { code: string };
}
interface Panel {
  group_id: string;
  task_id?: string;
  counts: Record<string, number>;
  settled: boolean;
  recipients: Line[];
}
interface Inbound {
  sender: string;
  msg_id: string;
  text: string;
  task_id?: string;
  status?: string;
  in_reply_to?: string;
  group_id?: string;
  receipt: { sender: string; msg_id: string };
}
interface GroupSent {
  group_id: string;
  duplicate: boolean;
  to: string | string[];
  recipients: { to: string; msg_id?: string; state: string; error?: { code: string } }[];
}

let root: string;
let relay: RelayProcess;
const open: Peer[] = [];

async function start(name: string, session: string): Promise<Peer> {
  const p = await startPeer({ root, name, session, relays: relay.url });
  open.push(p);
  return p;
}

async function stop(p: Peer): Promise<void> {
  open.splice(open.indexOf(p), 1);
  await p.close();
}

function cliEnv(p: Peer) {
  return userEnv({ root: join(p.config, '..'), configDir: p.config, stateDir: p.state }, { INTERLINK_URL: relay.url });
}

/** The unread messages of `p` that satisfy `check`, once there are any. */
function inboxWith(p: Peer, check: (m: Inbound) => boolean, what: string): Promise<Inbound[]> {
  return eventually(async () => {
    const { messages } = await p.call<{ messages: Inbound[] }>('receive_messages', { limit: 100 });
    const found = messages.filter(check);
    return found.length > 0 ? found : undefined;
  }, 20_000, what);
}

function panel(p: Peer, group: string): Promise<Panel> {
  return p.call<Panel>('message_status', { group_id: group });
}

function panelWhere(p: Peer, group: string, check: (panel: Panel) => boolean, what: string): Promise<Panel> {
  return eventually(async () => {
    const shown = await panel(p, group);
    return check(shown) ? shown : undefined;
  }, 20_000, what);
}

const line = (shown: Panel, to: string) => shown.recipients.find((r) => r.to === to)!;

/**
 * `from` writes to `to` once, so `to` knows its session from its mail: a copy is then
 * addressed to it even while a busy relay's roster answer is late.
 */
async function hello(from: Peer, name: string, to: Peer): Promise<void> {
  await from.call('send_message', { to: 'lead', text: `${name} here` });
  await inboxWith(to, (m) => m.text === `${name} here`, `${name}'s hello`);
}

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-groups-'));
  relay = await startRelay({ db: join(root, 'relay-db') });
});

afterAll(async () => {
  await Promise.all(open.splice(0).map((p) => p.close().catch(() => undefined)));
  await relay.child.kill('SIGTERM');
  await rm(root, { recursive: true, force: true });
});

describe('a task sent to an audience', () => {
  it('reaches each member once, and the panel follows each answer, a refusal, an offline member and a cancel', async () => {
    const lead = await start('lead', 'l1');
    const bob = await start('bob', 'b1');
    const carol = await start('carol', 'c1');
    let dave = await start('dave', 'd1');
    await pair(lead, bob, { a: 'lead', b: 'bob' });
    await pair(lead, carol, { a: 'lead', b: 'carol' });
    await pair(lead, dave, { a: 'lead', b: 'dave' });

    // A person defines the audience on the command line; the agent reads it.
    const added = await runCli(['audience', 'add', 'reviewers', 'bob', 'carol', 'dave', '--json'], cliEnv(lead));
    expect(added.code, added.stderr).toBe(0);
    expect((await lead.call<{ audiences: { name: string; members: string[] }[] }>('list_audiences')).audiences).toEqual([{ name: 'reviewers', members: ['bob', 'carol', 'dave'] }]);

    // Dave says hello, so the lead knows his session from his mail, and then his server
    // dies: his copy is addressed to that session and waits on the relay.
    for (const [p, name] of [[bob, 'bob'], [carol, 'carol'], [dave, 'dave']] as const) await hello(p, name, lead);
    kill9(dave);
    open.splice(open.indexOf(dave), 1);

    const sent = await lead.call<GroupSent>('send_message', { to: 'reviewers', text: 'review PR 42', task_id: 'pr-42', idempotency_key: 'review-42' });
    expect(sent.to).toBe('reviewers');
    expect(sent.duplicate).toBe(false);
    expect(sent.recipients.map((r) => r.to).sort()).toEqual(['bob', 'carol', 'dave']);
    const copyOf = (to: string) => sent.recipients.find((r) => r.to === to)!.msg_id!;
    expect(new Set(sent.recipients.map((r) => r.msg_id)).size).toBe(3);

    const first = await panel(lead, sent.group_id);
    expect(first.task_id).toBe('pr-42');
    expect(first.counts, JSON.stringify(first)).toMatchObject({ waiting: 3 });
    expect(first.settled).toBe(false);

    // Each live recipient holds exactly one copy, its own, naming the shared group.
    const [atBob] = await inboxWith(bob, (m) => m.task_id === 'pr-42', 'bob gets the task');
    const [atCarol] = await inboxWith(carol, (m) => m.task_id === 'pr-42', 'carol gets the task');
    expect(atBob!.group_id).toBe(sent.group_id);
    expect(atCarol!.group_id).toBe(sent.group_id);
    expect(atBob!.msg_id).toBe(copyOf('bob'));
    expect(atCarol!.msg_id).toBe(copyOf('carol'));

    // The same call again (a retry after a lost answer): the same group, nothing sent twice.
    const again = await lead.call<GroupSent>('send_message', { to: 'reviewers', text: 'review PR 42', task_id: 'pr-42', idempotency_key: 'review-42' });
    expect(again.duplicate).toBe(true);
    expect(again.group_id).toBe(sent.group_id);
    expect(again.recipients.map((r) => r.msg_id).sort()).toEqual(sent.recipients.map((r) => r.msg_id).sort());
    expect((await lead.fail('send_message', { to: 'reviewers', text: 'something else', idempotency_key: 'review-42' })).code).toBe('idempotency_conflict');

    // Bob answers: one result.
    await bob.call('send_message', { to: 'lead', text: 'looks good', task_id: 'pr-42', status: 'result', in_reply_to: atBob!.msg_id });
    let shown = await panelWhere(lead, sent.group_id, (p) => p.counts.result === 1, 'bob answered');
    expect(line(shown, 'bob').answer).toMatchObject({ status: 'result', text: 'looks good' });
    expect(shown.counts.waiting).toBe(2);

    // Carol asks a question, then refuses the task.
    await carol.call('send_message', { to: 'lead', text: 'which branch?', task_id: 'pr-42', status: 'needs_input', in_reply_to: atCarol!.msg_id });
    shown = await panelWhere(lead, sent.group_id, (p) => p.counts.needs_input === 1, 'carol asked');
    expect(line(shown, 'carol').outcome).toBe('needs_input');
    await carol.call('send_message', { to: 'lead', text: 'I will not review my own code', task_id: 'pr-42', status: 'failed', in_reply_to: atCarol!.msg_id });
    shown = await panelWhere(lead, sent.group_id, (p) => p.counts.failed === 1, 'carol refused');
    expect(line(shown, 'carol').answer?.status).toBe('failed');
    expect(line(shown, 'carol').latest).toBeUndefined();
    // Dave, offline, holds up nobody: his line still waits, his copy accepted by the relay.
    expect(line(shown, 'dave').outcome).toBe('waiting');
    expect(['bus_accepted', 'awaiting_session']).toContain(line(shown, 'dave').delivery);

    // A second answer from bob is shown as a duplicate, not counted.
    await bob.call('send_message', { to: 'lead', text: 'also: fix the typo', task_id: 'pr-42', status: 'result', in_reply_to: atBob!.msg_id });
    shown = await panelWhere(lead, sent.group_id, (p) => line(p, 'bob').duplicates?.length === 1, 'bob answered twice');
    expect(shown.counts.result).toBe(1);
    expect(line(shown, 'bob').answer?.text).toBe('looks good');

    // Dave is back (a new server, the same session): his copy arrives; the lead cancels the
    // group, which reaches only dave (the others answered).
    dave = await start('dave', 'd1');
    const [atDave] = await inboxWith(dave, (m) => m.task_id === 'pr-42' && m.status === undefined, 'dave gets the task after his restart');
    expect(atDave!.group_id).toBe(sent.group_id);
    const canceled = await lead.call<{ canceled: { to: string; msg_id: string }[]; left_alone: { to: string; outcome: string }[] }>('cancel_task', { group_id: sent.group_id, reason: 'merged already' });
    expect(canceled.canceled.map((c) => c.to)).toEqual(['dave']);
    expect(canceled.left_alone.map((l) => l.to).sort()).toEqual(['bob', 'carol']);
    const [cancel] = await inboxWith(dave, (m) => m.status === 'canceled', 'dave gets the cancel');
    expect(cancel).toMatchObject({ group_id: sent.group_id, in_reply_to: atDave!.msg_id, task_id: 'pr-42', text: 'merged already' });
    await dave.call('send_message', { to: 'lead', text: 'stopped', task_id: 'pr-42', status: 'canceled', in_reply_to: atDave!.msg_id });
    shown = await panelWhere(lead, sent.group_id, (p) => p.settled, 'every recipient answered');
    expect(shown.counts).toMatchObject({ result: 1, failed: 1, canceled: 1, waiting: 0, needs_input: 0 });

    // The thread: three copies, the cancel, and the five replies, oldest first.
    const thread = await lead.call<{ messages: { direction: string; text: string }[] }>('conversation_history', { group_id: sent.group_id, limit: 100 });
    expect(thread.messages.filter((m) => m.direction === 'outbound').map((m) => m.text)).toEqual(['review PR 42', 'review PR 42', 'review PR 42', 'merged already']);
    expect(thread.messages.filter((m) => m.direction === 'inbound')).toHaveLength(5);
    // What a person reads: `inbox --sent` marks each copy and the cancel with the group.
    const listedSent = await runCli(['inbox', '--sent', '--json'], cliEnv(lead));
    expect(listedSent.code, listedSent.stderr).toBe(0);
    const rows = (JSON.parse(listedSent.stdout) as { sent: { group_id?: string }[] }).sent;
    expect(rows.filter((r) => r.group_id === sent.group_id)).toHaveLength(4);
    const listedText = await runCli(['inbox', '--sent'], cliEnv(lead));
    expect(listedText.stdout).toContain(`(group ${sent.group_id})`);

    // A person removes carol as a peer: the audience loses her, and the next send reaches two.
    const removed = await runCli(['peers', 'remove', 'carol'], cliEnv(lead));
    expect(removed.code, removed.stderr).toBe(0);
    const listed = await runCli(['audience', 'list', '--json'], cliEnv(lead));
    expect(JSON.parse(listed.stdout)).toMatchObject({ audiences: [{ name: 'reviewers', members: ['bob', 'dave'] }] });
    const next = await lead.call<GroupSent>('send_message', { to: 'reviewers', text: 'one more thing' });
    expect(next.recipients.map((r) => r.to).sort()).toEqual(['bob', 'dave']);
    await stop(carol);
  }, 120_000);

  it('sends to a list, reports a peer no copy could be addressed to, shows a recipient whose gate refused its copy, and refuses what a group cannot take', async () => {
    const lead = await start('lead2', 'm1');
    const erin = await start('erin', 'e1');
    await pair(lead, erin, { a: 'lead', b: 'erin' });
    // A peer whose sessions were never seen anywhere: no copy can name a session.
    const ghost = await startPeer({ root, name: 'ghost', session: 'g1', relays: 'ws://127.0.0.1:9' });
    const ghostKey = (await ghost.call<{ identity: string }>('get_my_session_id')).identity;
    await ghost.close();
    await lead.call('add_peer', { petname: 'ghost', key: ghostKey });

    await hello(erin, 'erin', lead);
    const sent = await lead.call<GroupSent>('send_message', { to: ['erin', 'ghost', 'erin'], text: 'status?' });
    expect(sent.recipients.map((r) => [r.to, r.state, r.error?.code])).toEqual([
      ['erin', 'pending', undefined],
      ['ghost', 'not_sent', 'no_route'],
    ]);
    const shown = await panel(lead, sent.group_id);
    expect(line(shown, 'ghost').outcome).toBe('not_sent');
    expect(shown.counts.not_sent).toBe(1);
    await inboxWith(erin, (m) => m.group_id === sent.group_id, 'erin gets her copy');

    // A recipient whose gate refuses its copy: the lead marked frank `clear` by mistake, so
    // frank gets a clear copy and refuses it (`unsealed`); his signed receipt says so, and
    // the panel shows him refused while erin's answer still counts.
    const frank = await start('frank', 'f1');
    const frankKey = (await frank.call<{ identity: string }>('get_my_session_id')).identity;
    const leadKey = (await lead.call<{ identity: string }>('get_my_session_id')).identity;
    await frank.call('add_peer', { petname: 'lead', key: leadKey });
    const marked = await runCli(['peers', 'add', 'frank', frankKey, '--clear'], cliEnv(lead));
    expect(marked.code, marked.stderr).toBe(0);
    await hello(frank, 'frank', lead);
    const asked = await lead.call<GroupSent>('send_message', { to: ['erin', 'frank'], text: 'ship it?', task_id: 'ship' });
    const [toErin] = await inboxWith(erin, (m) => m.task_id === 'ship', 'erin gets the question');
    await erin.call('send_message', { to: 'lead', text: 'yes', task_id: 'ship', status: 'result', in_reply_to: toErin!.msg_id });
    const refused = await panelWhere(lead, asked.group_id, (p) => p.counts.refused === 1 && p.counts.result === 1, 'frank refused, erin answered');
    expect(line(refused, 'frank').delivery).toBe('receiver_refused');
    expect(refused.settled).toBe(true);

    // Calls are signed in the order they came, whatever `to` names: a list (whose petnames
    // take longer to look up) and a single petname, alternating, all at once.
    const calls = Array.from({ length: 12 }, (_, i) => lead.call('send_message', { to: i % 2 === 0 ? ['erin'] : 'erin', text: `order ${i}` }));
    await Promise.all(calls);
    const ordered = await eventually(async () => {
      const { messages } = await erin.call<{ messages: Inbound[] }>('receive_messages', { limit: 100 });
      const got = messages.filter((m) => m.text.startsWith('order '));
      return got.length === 12 ? got : undefined;
    }, 20_000, 'erin gets the twelve');
    expect(ordered.map((m) => m.text)).toEqual(Array.from({ length: 12 }, (_, i) => `order ${i}`));

    expect((await lead.fail('send_message', { to: ['erin', 'self'], text: 'x' })).code).toBe('bad_recipients');
    expect((await lead.fail('send_message', { to: ['erin'], session: 'e1', text: 'x' })).code).toBe('bad_recipients');
    expect((await lead.fail('send_message', { to: ['erin', 'nobody'], text: 'x' })).code).toBe('unknown_peer');
    expect((await lead.fail('send_message', { to: Array.from({ length: 33 }, (_, i) => `p${i}`), text: 'x' })).code).toBe('bad_arguments');
    expect((await lead.fail('message_status', { group_id: '0'.repeat(32) })).code).toBe('unknown_group');
    expect((await lead.fail('message_status', {})).code).toBe('bad_arguments');
    expect((await lead.fail('cancel_task', { group_id: sent.group_id, to: 'erin' })).code).toBe('bad_arguments');
  }, 60_000);

  for (const point of ['outbox.append.before_sync', 'outbox.append.after_sync']) {
    it(`keeps a group whole when the sender is killed at ${point}, and sends every copy after its restart`, async () => {
      const name = point.endsWith('before_sync') ? 'crash-a' : 'crash-b';
      const lead = await startPeer({ root, name, session: 's1', relays: relay.url, env: { INTERLINK_CRASH_AT: point } });
      open.push(lead);
      const gina = await start(`${name}-gina`, 'g1');
      const hal = await start(`${name}-hal`, 'h1');
      const { aKey: leadKey } = await pair(lead, gina, { a: 'lead', b: 'gina' });
      await pair(lead, hal, { a: 'lead', b: 'hal' });
      // Each says hello, so the lead knows their sessions from their mail (no roster needed).
      for (const [p, who] of [[gina, 'gina'], [hal, 'hal']] as const) await hello(p, who, lead);
      // The group's commit is the outbox's first: the server dies inside it.
      await expect(lead.call('send_message', { to: ['gina', 'hal'], text: 'deploy', task_id: 'deploy' })).rejects.toThrow();
      await eventually(async () => (lead.pid() === null || !isAlive(lead.pid()!) ? true : undefined), 10_000, 'the killed server gone');
      open.splice(open.indexOf(lead), 1);
      // On disk: both copies under one group, in one journal entry (SIGKILL keeps what was
      // written, synced or not; only a power cut could lose the unsynced entry, and then
      // both copies with it).
      const outbox = await Outbox.open(outboxPath(join(root, name, 'state'), leadKey, 's1'), { readOnly: true });
      const copies = (await outbox.all()).filter((r) => r.group !== undefined);
      await outbox.close();
      expect(copies).toHaveLength(2);
      expect(copies[1]!.group!.id).toBe(copies[0]!.group!.id);
      const again = await start(name, 's1');
      const [atGina] = await inboxWith(gina, (m) => m.task_id === 'deploy', 'gina gets her copy after the restart');
      const [atHal] = await inboxWith(hal, (m) => m.task_id === 'deploy', 'hal gets his copy after the restart');
      expect(atGina!.group_id).toBe(copies[0]!.group!.id);
      expect(atHal!.group_id).toBe(copies[0]!.group!.id);
      const shown = await panel(again, copies[0]!.group!.id);
      expect(shown.recipients.map((r) => r.to).sort()).toEqual(['gina', 'hal']);
    }, 90_000);
  }
});

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
