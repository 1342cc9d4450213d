/**
 * `interlink-mcp failed-deliveries` against the state a real Codex-mode server saved:
 * list, read, retry (exit 0 when codex takes the notice, 1 with a one-line reason when it
 * does not) and discard; usage errors exit 64, an unknown id 1. The running server sees
 * what the CLI did (the saved failure gone, host_queued on the message).
 */
import type { Failure } from '../../../src/hosts/codex/failed.js';
import { randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { callWithMeta, errorCode, reapCli, runCli, switchableCodex, type CliResult, type SwitchableCodex } from '../../helpers/codex.js';
import { eventually, pair, startPeer, type Peer } from '../../helpers/mcp.js';
import { reapAll } from '../../helpers/process.js';
import { startRelay } from '../../helpers/spawn-relay.js';

let root: string;
const peers: Peer[] = [];
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-failed-cli-'));
});
afterEach(async () => {
  await Promise.all(peers.splice(0).map((p) => p.close().catch(() => undefined)));
  await reapCli();
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

interface Status {
  history: { state: string }[];
}

const states = (s: Status) => s.history.map((h) => h.state);
const UNKNOWN_ID = 'f-0000000000000000';

/** A saved failure as the tool and the CLI's --json give it: each time with its ISO 8601 string beside it. */
type ShownFailure = Failure & { at_iso: string; expires_at_iso: string };

/** The saved failures exactly as the tool lists them. */
async function listedByTool(bob: Peer): Promise<ShownFailure[]> {
  return (await bob.call<{ failures: ShownFailure[] }>('failed_deliveries', { action: 'list' })).failures;
}

/**
 * The saved failures as the tool lists them, with the ISO strings the tool adds beside
 * each time checked and set aside, so they compare with the file.
 */
async function listed(bob: Peer): Promise<Failure[]> {
  return (await listedByTool(bob)).map(({ at_iso, expires_at_iso, ...failure }) => {
    expect([at_iso, expires_at_iso]).toEqual([new Date(failure.at).toISOString(), new Date(failure.expires_at).toISOString()]);
    return failure;
  });
}

async function statusWith(bob: Peer, msgId: string, count: number): Promise<string[]> {
  return eventually(
    async () => {
      const result = await callWithMeta(bob, 'message_status', { msg_id: msgId }, {});
      if (errorCode(result) === 'unknown_message') return undefined;
      if (result.isError) throw new Error(JSON.stringify(result.data));
      const s = states(result.data as unknown as Status);
      return s.length >= count ? s : undefined;
    },
    15_000,
    `${count} states on ${msgId}`,
  );
}

function oneLine(result: CliResult): string {
  const lines = result.stderr.split('\n').filter((l) => l !== '');
  expect(lines, result.stderr).toHaveLength(1);
  return lines[0]!;
}

/**
 * alice (Claude mode) and bob (Codex mode, codex missing): alice's message leaves one
 * saved failure on bob's thread. `cli` runs the command with bob's directories.
 */
async function savedFailure(): Promise<{ bob: Peer; thread: string; msgId: string; failure: Failure; codex: SwitchableCodex; cli: (...args: string[]) => Promise<CliResult> }> {
  const relay = await startRelay();
  const codex = await switchableCodex(root, 'missing');
  const alice = await startPeer({ root, name: 'alice', session: 'a1', relays: relay.url });
  peers.push(alice);
  const bob = await startPeer({ root, name: 'bob', session: 'unused', relays: relay.url, env: { INTERLINK_MODE: 'codex', INTERLINK_CODEX_BIN: codex.bin } });
  peers.push(bob);
  const thread = randomUUID();
  await bob.call('bind_codex_session', { thread_id: thread });
  await pair(alice, bob);
  const sent = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: thread, text: 'BODY', status: 'needs_input' });
  expect(await statusWith(bob, sent.msg_id, 2)).toEqual(['receiver_stored', 'delivery_failed']);
  const failures = await listed(bob);
  expect(failures).toHaveLength(1);
  const env = { HOME: join(root, 'bob'), INTERLINK_CONFIG_DIR: bob.config, INTERLINK_STATE_DIR: bob.state, INTERLINK_CODEX_BIN: codex.bin };
  return { bob, thread, msgId: sent.msg_id, failure: failures[0]!, codex, cli: (...args) => runCli(['failed-deliveries', ...args], env) };
}

describe('interlink-mcp failed-deliveries', () => {
  it('lists, reads and retries a saved failure; a failed retry exits 1 with one line and keeps it', async () => {
    const { bob, thread, msgId, failure, codex, cli } = await savedFailure();
    expect(failure).toMatchObject({ kind: 'notice', thread, outcome: 'delivery_failed', attempts: 1, retries: 0 });

    // The CLI's JSON is the tool's, ISO times included.
    const shown = await listedByTool(bob);
    expect(shown).toEqual([{ ...failure, at_iso: new Date(failure.at).toISOString(), expires_at_iso: new Date(failure.expires_at).toISOString() }]);
    const list = await cli('list', '--json');
    expect(list.code, list.stderr).toBe(0);
    expect((JSON.parse(list.stdout) as { failures: ShownFailure[] }).failures).toEqual(shown);
    const ofThread = await cli('list', '--session', thread, '--json');
    expect((JSON.parse(ofThread.stdout) as { failures: ShownFailure[] }).failures).toEqual(shown);
    const ofOther = await cli('list', '--session', randomUUID(), '--json');
    expect((JSON.parse(ofOther.stdout) as { failures: Failure[] }).failures).toEqual([]);
    const human = await cli('list');
    expect(human.code).toBe(0);
    expect(human.stdout).toContain(failure.id);
    expect(human.stdout).toContain(`thread ${thread}`);

    const read = await cli('read', failure.id);
    expect(read.code, read.stderr).toBe(0);
    expect(read.stdout).toContain(failure.message);
    expect(read.stdout).not.toContain('BODY');
    const readJson = await cli('read', failure.id, '--json');
    expect((JSON.parse(readJson.stdout) as { failure: ShownFailure }).failure).toEqual(shown[0]);

    // Codex refuses three times: exit 1, one line, and the failure stays (with the retry counted).
    await codex.set('fail');
    const refused = await cli('retry', failure.id);
    expect(refused.code).toBe(1);
    const line = oneLine(refused);
    expect(line).toContain('delivery_failed');
    expect(line).toContain(failure.id);
    expect(codex.calls()).toHaveLength(3);
    expect(await listed(bob)).toEqual([expect.objectContaining({ id: failure.id, outcome: 'delivery_failed', retries: 1, attempts: 4 })]);

    // Codex takes it: exit 0, the failure is gone, and the running server sees host_queued.
    await codex.set('ok');
    const queued = await cli('retry', failure.id);
    expect(queued.code, queued.stderr).toBe(0);
    expect(queued.stdout).toContain(failure.notification_id);
    expect(codex.calls().map((c) => c.argv)).toEqual(Array.from({ length: 4 }, () => ['queue', '--thread', thread, '--message', failure.message]));
    expect(await listed(bob)).toEqual([]);
    expect(JSON.parse((await cli('list', '--json')).stdout)).toMatchObject({ failures: [] });
    expect(await statusWith(bob, msgId, 3)).toEqual(['receiver_stored', 'delivery_failed', 'host_queued']);

    const gone = await cli('retry', failure.id);
    expect(gone.code).toBe(1);
    expect(oneLine(gone)).toContain('no saved failure');
  });

  it('discards a saved failure but never the message; usage errors exit 64, unknown ids 1', async () => {
    const { bob, msgId, failure, cli } = await savedFailure();

    for (const args of [['discard', UNKNOWN_ID], ['read', UNKNOWN_ID], ['retry', UNKNOWN_ID]]) {
      const result = await cli(...args);
      expect(result.code, args.join(' ')).toBe(1);
      expect(oneLine(result)).toContain(`no saved failure ${UNKNOWN_ID}`);
    }
    for (const args of [['explode'], [], ['read'], ['discard', failure.id, 'extra'], ['list', '--bogus']]) {
      const result = await cli(...args);
      expect(result.code, `${args.join(' ')}: ${result.stderr}`).toBe(64);
    }
    expect(await listed(bob)).toEqual([failure]);

    const discarded = await cli('discard', failure.id);
    expect(discarded.code, discarded.stderr).toBe(0);
    expect(discarded.stdout).toContain(`discarded ${failure.id}`);
    expect(await listed(bob)).toEqual([]);
    expect((await cli('discard', failure.id)).code).toBe(1);

    // The message is still unread, with nothing recorded by the discard.
    const inbox = await bob.call<{ messages: { msg_id: string }[] }>('receive_messages');
    expect(inbox.messages.map((m) => m.msg_id)).toEqual([msgId]);
    expect(states(await bob.call<Status>('message_status', { msg_id: msgId }))).toEqual(['receiver_stored', 'delivery_failed']);
  });

  it('a retry queues a notice that is no longer current without recording it on any message', async () => {
    const { bob, msgId, failure, codex, cli } = await savedFailure();
    // The agent read the message anyway: the reservation ended, the failure is still saved.
    const inbox = await bob.call<{ messages: { msg_id: string; receipt: { sender: string; msg_id: string } }[] }>('receive_messages');
    await bob.call('acknowledge_messages', { messages: [inbox.messages[0]!.receipt] });
    expect(await statusWith(bob, msgId, 3)).toEqual(['receiver_stored', 'delivery_failed', 'receiver_acknowledged']);

    await codex.set('ok');
    const queued = await cli('retry', failure.id, '--json');
    expect(queued.code, queued.stderr).toBe(0);
    expect(JSON.parse(queued.stdout)).toMatchObject({ id: failure.id, outcome: 'host_queued', still_saved: false });
    expect(codex.calls()).toHaveLength(1);
    expect(await listed(bob)).toEqual([]);
    expect(states(await bob.call<Status>('message_status', { msg_id: msgId }))).toEqual(['receiver_stored', 'delivery_failed', 'receiver_acknowledged']);
  });

  it('answers usage errors before looking for an identity', async () => {
    const env = { HOME: root, INTERLINK_CONFIG_DIR: join(root, 'no-config'), INTERLINK_STATE_DIR: join(root, 'no-state') };
    await mkdir(env.INTERLINK_CONFIG_DIR);
    expect((await runCli(['failed-deliveries', 'explode'], env)).code).toBe(64);
    expect((await runCli(['failed-deliveries'], env)).code).toBe(64);
    expect((await runCli(['failed-deliveries', 'read'], env)).code).toBe(64);
    expect((await runCli(['failed-deliveries', 'list', 'extra'], env)).code).toBe(64);
    // A real action without an identity is a failure, not a usage error.
    const list = await runCli(['failed-deliveries', 'list'], env);
    expect(list.code).toBe(1);
    expect(oneLine(list)).toMatch(/key|identity/i);
  });
});
