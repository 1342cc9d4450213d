/**
 * The real Codex CLI (pinned by scripts/host/install-clis.sh), offline against the
 * scripted fake Responses API, with Interlink set up from the files in codex/: the local
 * app-server daemon owns a thread, as it does for Codex's own sessions; the trusted hooks
 * bind the thread's Interlink server; a paired peer's message makes the server run the
 * real `codex queue` for that thread; the daemon starts a turn nobody typed, in which the
 * model (the fake) calls receive_messages and then acknowledge_messages, and the mailbox
 * records the acknowledgement.
 *
 * The failure paths put a `codex` stand-in in front of the real one (INTERLINK_CODEX_BIN):
 * it fails twice and then runs the real CLI (three attempts, 2 s apart), or hangs past
 * the 30 s timeout (delivery_unknown, saved), after which `interlink-mcp
 * failed-deliveries retry` hands the saved notice to the real CLI.
 *
 * Runs under `npm run test:host` only (INTERLINK_HOST_TESTS); everything it starts talks
 * to 127.0.0.1, and under scripts/host/isolated.sh it has no other network at all.
 */
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { mailboxPath } from '../../src/config/layout.js';
import type { StoredRecord } from '../../src/mailbox/format.js';
import { Mailbox } from '../../src/mailbox/mailbox.js';
import { fakeCodex, type FakeCodex } from '../helpers/fake-codex.js';
import { eventually, startPeer, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { freePort, startRelay, type RelayProcess } from '../helpers/spawn-relay.js';
import {
  CODEX,
  CODEX_VERSION,
  codexCli,
  execOnDaemon,
  lastUserInput,
  listHooks,
  readResponsesLog,
  startFakeOpenAi,
  trustHooks,
  turnMetadata,
  writeCodexHome,
  type ResponsesRequest,
} from './codex-setup.js';
import { RUN_MARKER, processesWithEnv, reapMarked, reapWithEnv } from './processes.js';
import { createIdentity, createProject, installInterlink, interlink, pair, type FakeApi, type Identity, type InstalledInterlink } from './setup.js';

const enabled = process.env.INTERLINK_HOST_TESTS === '1';
const RETRY_GAP_MS = 1_900; // the executor waits 2 s between attempts; allow for clock granularity

const sessionResultSchema = z.looseObject({ session_id: z.string(), identity: z.string() });
const failureSchema = z.looseObject({ id: z.string(), thread: z.string(), notification_id: z.string(), message: z.string(), outcome: z.string(), reason: z.string() });
const failuresSchema = z.object({ failures: z.array(failureSchema), note: z.string() });
const retrySchema = z.looseObject({ id: z.string(), outcome: z.string(), still_saved: z.boolean() });

describe.runIf(enabled)(`Codex ${CODEX_VERSION} with Interlink from codex/`, () => {
  const run = randomUUID();
  let root: string;
  let project: string;
  let codexHome: string;
  let env: Record<string, string>;
  let relay: RelayProcess;
  let api: FakeApi;
  let bob: Identity; // the Codex side
  let alice: Identity;
  let alicePeer: Peer | undefined;
  let standIn: FakeCodex;
  let control: string;
  let thread: string;
  let firstTurn: ExecEventList;
  let installed: InstalledInterlink;

  type ExecEventList = Awaited<ReturnType<typeof execOnDaemon>>;

  beforeAll(async () => {
    if (!existsSync(CODEX)) throw new Error(`no Codex at ${CODEX}: run scripts/host/install-clis.sh first`);
    root = await mkdtemp(join(tmpdir(), 'interlink-codex-'));
    project = join(root, 'project');
    const home = join(root, 'home');
    codexHome = join(home, '.codex');
    await mkdir(home, { recursive: true });

    installed = await installInterlink(root);
    relay = await startRelay();
    api = await startFakeOpenAi(join(root, 'responses.jsonl'));
    bob = await createIdentity(root, 'bob');
    alice = await createIdentity(root, 'alice');
    await pair(bob, alice);
    control = join(root, 'codex-control.json');
    await setStandIn({ mode: 'real' });
    standIn = await fakeCodex(root, { control });

    const deadProxy = `http://127.0.0.1:${await freePort()}`;
    env = {
      PATH: `${installed.bin}:${dirname(CODEX)}:${dirname(process.execPath)}:${process.env.PATH ?? ''}`,
      HOME: home,
      CODEX_HOME: codexHome,
      TERM: 'dumb',
      FAKE_OPENAI_KEY: 'host-test-key',
      HTTPS_PROXY: deadProxy,
      HTTP_PROXY: deadProxy,
      NO_PROXY: '127.0.0.1,localhost',
      npm_config_offline: 'true',
      npm_config_update_notifier: 'false',
      INTERLINK_CONFIG_DIR: bob.config,
      INTERLINK_STATE_DIR: bob.state,
      INTERLINK_URL: relay.url,
      INTERLINK_CODEX_BIN: standIn.bin,
      INTERLINK_LOG: 'warn',
      [RUN_MARKER]: run,
    };
    await createProject(project, env, installed);
    await writeCodexHome(codexHome, api, project);
    await trustHooks(codexHome, await listHooks(env, project));
    await codexCli(env, project, ['app-server', 'daemon', 'start']);

    firstTurn = await execOnDaemon(env, project, 'CALL_TOOL:get_my_session_id');
    const started = firstTurn.find((e) => e.type === 'thread.started');
    if (started?.thread_id === undefined) throw new Error(`no thread.started in ${JSON.stringify(firstTurn)}`);
    thread = started.thread_id;
  });

  afterAll(async () => {
    await alicePeer?.close().catch(() => undefined);
    if (env !== undefined) await codexCli(env, project, ['app-server', 'daemon', 'stop'], 30_000).catch(() => undefined);
    await reapMarked(run);
    if (bob !== undefined) await reapWithEnv(`INTERLINK_STATE_DIR=${bob.state}`);
    await reapAll();
    // INTERLINK_HOST_KEEP=1 keeps the run's files (API log, state, Codex's home).
    if (root !== undefined && process.env.INTERLINK_HOST_KEEP !== '1') await rm(root, { recursive: true, force: true });
    else if (root !== undefined) console.log(`host test files kept in ${root}`);
  });

  async function setStandIn(value: { mode: 'real' | 'hang' } | { mode: 'fail-then-real'; failures: number }): Promise<void> {
    await rm(`${control}.count`, { force: true });
    await writeFile(control, JSON.stringify({ real: CODEX, ...value }));
  }

  it('hooks trusted from codex/hooks.json: one for each lifecycle event', async () => {
    const hooks = await listHooks(env, project);
    expect(hooks.map((h) => h.key.split(':').slice(-3, -2)[0]).sort()).toEqual(['pre_tool_use', 'session_start', 'stop', 'user_prompt_submit']);
    for (const hook of hooks) expect(hook).toMatchObject({ handlerType: 'mcpTool', server: 'interlink', tool: 'bind_codex_session', trustStatus: 'trusted' });
  });

  it('binds the Interlink server to the thread through the hooks, before the model uses it', async () => {
    const call = firstTurn.find((e) => e.type === 'item.completed' && e.item?.type === 'mcp_tool_call');
    const result = z.looseObject({ result: z.looseObject({ content: z.array(z.looseObject({ text: z.string() })) }) }).parse(call?.item);
    const session = sessionResultSchema.parse(JSON.parse(result.result.content[0]!.text));
    expect(session).toEqual(expect.objectContaining({ session_id: thread, identity: bob.key }));

    // Codex starts MCP servers with only a few variables of its own (not the run marker);
    // INTERLINK_STATE_DIR reaches them through codex/config.toml's env_vars.
    const servers = (await processesWithEnv(`INTERLINK_STATE_DIR=${bob.state}`)).filter((p) => p.argv.includes(installed.entry) && p.argv.includes('serve'));
    expect(servers).toHaveLength(1);
    for (const server of servers) {
      expect(server.argv).toContain('--codex');
      expect(server.env).toMatchObject({ INTERLINK_MODE: 'codex', INTERLINK_STATE_DIR: bob.state, CODEX_HOME: codexHome, NODE_OPTIONS: '--max-semi-space-size=1' });
      expect(server.cwd).toBe(project);
    }
  });

  it('wakes the idle thread with the real codex queue; the model receives and acknowledges', async () => {
    alicePeer = await startPeer({ root, name: 'alice', session: 'a1', relays: relay.url });
    const runsBefore = standIn.calls().length;
    const { msgId, receive } = await sendAndExpectWake('please review PR 7 (codex host test)');

    const runs = standIn.calls().slice(runsBefore);
    expect(runs).toHaveLength(1);
    expect(runs[0]!.argv.slice(0, 4)).toEqual(['queue', '--thread', thread, '--message']);
    expect(runs[0]!.argv[4]).toBe(lastUserInput(receive));
    const record = await bobRecord(msgId);
    expect(states(record)).toEqual(expect.arrayContaining(['receiver_stored', 'host_queued', 'receiver_acknowledged']));
  });

  it('retries a failing codex queue 2 s apart and delivers on the third attempt', async () => {
    await setStandIn({ mode: 'fail-then-real', failures: 2 });
    const runsBefore = standIn.calls().length;
    const { msgId } = await sendAndExpectWake('second message: fails twice first');

    const runs = standIn.calls().slice(runsBefore);
    expect(runs).toHaveLength(3);
    expect(runs[1]!.t - runs[0]!.t).toBeGreaterThanOrEqual(RETRY_GAP_MS);
    expect(runs[2]!.t - runs[1]!.t).toBeGreaterThanOrEqual(RETRY_GAP_MS);
    expect(states(await bobRecord(msgId))).toEqual(expect.arrayContaining(['host_queued', 'receiver_acknowledged']));
    expect(states(await bobRecord(msgId))).not.toContain('delivery_failed');
  });

  it('saves a timed-out notice as delivery_unknown; failed-deliveries retry delivers it with the real CLI', async () => {
    await setStandIn({ mode: 'hang' });
    const sent = await alicePeer!.call<{ msg_id: string }>('send_message', { to: 'bob', session: thread, text: 'third message: codex hangs', status: 'needs_input' });

    // The executor gives up after 30 s and cannot know whether Codex queued the notice.
    await eventually(async () => (states(await bobRecord(sent.msg_id)).includes('delivery_unknown') ? true : undefined), 60_000, 'delivery_unknown');
    const listed = failuresSchema.parse(JSON.parse(await interlink(bob.env, ['failed-deliveries', 'list', '--json'])));
    const failure = listed.failures.find((f) => f.outcome === 'delivery_unknown');
    expect(failure).toMatchObject({ thread, outcome: 'delivery_unknown' });
    expect(failure!.reason).toMatch(/may or may not|twice/);
    expect(failure!.message).toContain(failure!.notification_id);
    expect(failure!.message).not.toContain('third message');

    // A person retries it; the stand-in now runs the real CLI.
    await setStandIn({ mode: 'real' });
    const requestsBefore = (await readResponsesLog(api.log)).length;
    const retried = retrySchema.parse(JSON.parse(await interlink({ ...bob.env, PATH: env.PATH!, CODEX_HOME: codexHome, INTERLINK_CODEX_BIN: standIn.bin }, ['failed-deliveries', 'retry', failure!.id, '--json'])));
    expect(retried).toMatchObject({ id: failure!.id, outcome: 'host_queued', still_saved: false });

    const { receive } = await expectWakeTurn(requestsBefore, sent.msg_id);
    expect(lastUserInput(receive)).toContain(failure!.notification_id);
    expect(states(await bobRecord(sent.msg_id))).toContain('receiver_acknowledged');
    const after = failuresSchema.parse(JSON.parse(await interlink(bob.env, ['failed-deliveries', 'list', '--json'])));
    expect(after.failures.map((f) => f.id)).not.toContain(failure!.id);
  });

  /** Sends from alice to the thread's session and waits for the whole wake. */
  async function sendAndExpectWake(text: string): Promise<{ msgId: string; receive: ResponsesRequest }> {
    const requestsBefore = (await readResponsesLog(api.log)).length;
    const sent = await alicePeer!.call<{ msg_id: string }>('send_message', { to: 'bob', session: thread, text, task_id: `t-${randomUUID()}`, status: 'needs_input' });
    const { receive } = await expectWakeTurn(requestsBefore, sent.msg_id);
    expect(lastUserInput(receive)).not.toContain(text);
    return { msgId: sent.msg_id, receive };
  }

  /**
   * A turn the queue started on this thread: the model was shown the notice (a pointer
   * with a notification_id), called receive_messages, then acknowledge_messages with
   * exactly the receipt of `msgId`, and finished.
   */
  async function expectWakeTurn(requestsBefore: number, msgId: string): Promise<{ receive: ResponsesRequest }> {
    const requests = await eventually(
      async () => {
        const fresh = (await readResponsesLog(api.log)).slice(requestsBefore);
        return fresh.some((r) => r.reply.rule === 'done') ? fresh : undefined;
      },
      90_000,
      'a queued turn that ends with DONE',
    );
    const rules = requests.map((r) => r.reply.rule);
    const receiveAt = rules.indexOf('receive');
    const acknowledgeAt = rules.indexOf('acknowledge');
    expect(receiveAt, `rules: ${rules.join(', ')}`).toBeGreaterThanOrEqual(0);
    expect(acknowledgeAt).toBeGreaterThan(receiveAt);
    const receive = requests[receiveAt]!;
    expect(turnMetadata(receive)).toMatchObject({ thread_id: thread, turn_trigger: 'queue' });
    const notice = lastUserInput(receive);
    expect(notice).toContain('receive_messages');
    expect(notice).toMatch(/notification_id/);
    const ack = requests[acknowledgeAt]!.reply.items?.find((i) => i.type === 'function_call');
    expect(ack).toMatchObject({ name: 'acknowledge_messages', namespace: 'mcp__interlink' });
    expect(JSON.parse(ack!.arguments!)).toEqual({ messages: [{ sender: alice.key, msg_id: msgId }] });
    await eventually(async () => (states(await bobRecord(msgId)).includes('receiver_acknowledged') ? true : undefined), 15_000, 'the acknowledgement in the mailbox');
    return { receive };
  }

  async function bobRecord(msgId: string): Promise<StoredRecord | undefined> {
    const mailbox = await Mailbox.open(mailboxPath(bob.state, bob.key, thread), { readOnly: true });
    try {
      return await mailbox.findByMsgId(msgId);
    } finally {
      await mailbox.close();
    }
  }
});

/** The states a stored message went through; none while it is not stored yet. */
function states(record: StoredRecord | undefined): string[] {
  return record?.states.map((s) => s.state) ?? [];
}
