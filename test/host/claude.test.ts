/**
 * The real Claude Code (pinned by scripts/host/install-clis.sh) with the plugin loaded by
 * --plugin-dir, offline against the scripted fake Anthropic API, in one persistent
 * stream-json session: the plugin's MCP server connects, a first turn completes, the Stop
 * hook binds the server to the session and starts the listener, and a message sent later
 * by a paired peer wakes the idle session by itself. The model (the fake) reads the
 * notice, calls receive_messages, then acknowledge_messages with the receipts, and the
 * receiver's mailbox records it. After /clear (a new session id for the hooks, the same
 * server) the bind follows the new id and the next message wakes the session again.
 *
 * Runs under `npm run test:host` only (INTERLINK_HOST_TESTS); everything it starts talks
 * to 127.0.0.1, and under scripts/host/isolated.sh it has no other network at all.
 */
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { mailboxPath } from '../../src/config/layout.js';
import { Mailbox } from '../../src/mailbox/mailbox.js';
import { toolsFor } from '../../src/mcp/tools.js';
import { eventually, startPeer, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { freePort, startRelay, type RelayProcess } from '../helpers/spawn-relay.js';
import { ClaudeSession, type StreamEvent } from './claude-session.js';
import { RUN_MARKER, markedProcesses, reapMarked, type MarkedProcess } from './processes.js';
import {
  CLAUDE,
  CLAUDE_CODE_VERSION,
  OFFLINE_CLAUDE_ENV,
  PLUGIN_DIR,
  createIdentity,
  createProject,
  installInterlink,
  lastUserText,
  pair,
  pluginTool,
  readApiLog,
  startFakeApi,
  type FakeApi,
  type Identity,
  type InstalledInterlink,
} from './setup.js';

const enabled = process.env.INTERLINK_HOST_TESTS === '1';
const FIRST_TURN = 'hello from the host test';
const PEER_TEXT = 'please review PR 7 (host test)';

function isInit(e: StreamEvent): boolean {
  return e.type === 'system' && e.subtype === 'init';
}

function isResult(e: StreamEvent): boolean {
  return e.type === 'result';
}

function isStopHook(subtype: string): (e: StreamEvent) => boolean {
  return (e) => e.type === 'system' && e.subtype === subtype && e.hook_event === 'Stop';
}

const bindResultSchema = z.object({ session_id: z.string(), mailbox_session: z.string(), changed: z.boolean() }).strict();

/** The result of the Stop hook's bind_claude_session call, if this event is its answer. */
function bindResult(e: StreamEvent): z.infer<typeof bindResultSchema> | undefined {
  if (!isStopHook('hook_response')(e) || typeof e.output !== 'string') return undefined;
  try {
    const parsed = bindResultSchema.safeParse(JSON.parse(e.output));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

/** An answer of the listener's Stop hook (the other Stop hook is the bind). */
function isListenerResponse(e: StreamEvent): boolean {
  return isStopHook('hook_response')(e) && bindResult(e) === undefined;
}

/** Names of the tools the assistant called in these events, in order. */
function toolCalls(events: readonly StreamEvent[]): string[] {
  const names: string[] = [];
  for (const e of events) {
    if (e.type !== 'assistant' || typeof e.message !== 'object' || e.message === null || !('content' in e.message)) continue;
    const content = e.message.content;
    if (!Array.isArray(content)) continue;
    for (const block of content) if (block?.type === 'tool_use' && typeof block.name === 'string') names.push(block.name);
  }
  return names;
}

describe.runIf(enabled)(`Claude Code ${CLAUDE_CODE_VERSION} with the interlink plugin`, () => {
  const run = randomUUID();
  const sessionId = randomUUID();
  let root: string;
  let project: string;
  let relay: RelayProcess;
  let api: FakeApi;
  let receiver: Identity;
  let sender: Identity;
  let claude: ClaudeSession;
  let alice: Peer | undefined;
  let installed: InstalledInterlink;

  beforeAll(async () => {
    if (!existsSync(CLAUDE)) throw new Error(`no Claude Code at ${CLAUDE}: run scripts/host/install-clis.sh first`);
    root = await mkdtemp(join(tmpdir(), 'interlink-host-'));
    project = join(root, 'project');
    const home = join(root, 'home');
    await mkdir(home, { recursive: true });

    installed = await installInterlink(root);
    relay = await startRelay();
    api = await startFakeApi(join(root, 'api.jsonl'));
    receiver = await createIdentity(root, 'bob');
    sender = await createIdentity(root, 'alice');
    await pair(receiver, sender);

    // No proxy listens on this port: anything that ignores NO_PROXY fails here, not outside.
    const deadProxy = `http://127.0.0.1:${await freePort()}`;
    const env: Record<string, string> = {
      PATH: `${installed.bin}:${process.env.PATH ?? ''}`,
      HOME: home,
      CLAUDE_CONFIG_DIR: join(home, '.claude'),
      TERM: 'dumb',
      ANTHROPIC_BASE_URL: api.url,
      ANTHROPIC_API_KEY: 'host-test-key',
      HTTPS_PROXY: deadProxy,
      HTTP_PROXY: deadProxy,
      NO_PROXY: '127.0.0.1,localhost',
      ...OFFLINE_CLAUDE_ENV,
      INTERLINK_CONFIG_DIR: receiver.config,
      INTERLINK_STATE_DIR: receiver.state,
      INTERLINK_URL: relay.url,
      INTERLINK_LOG: 'warn',
      [RUN_MARKER]: run,
    };
    await createProject(project, env, installed);

    claude = ClaudeSession.start({
      claude: CLAUDE,
      cwd: project,
      env,
      args: [
        '--include-hook-events',
        '--session-id',
        sessionId,
        '--plugin-dir',
        PLUGIN_DIR,
        '--allowedTools',
        [pluginTool('receive_messages'), pluginTool('acknowledge_messages')].join(','),
      ],
    });
    claude.send(FIRST_TURN);
    await claude.waitFor('the first result', isResult, { timeoutMs: 60_000 });
  });

  afterAll(async () => {
    await alice?.close().catch(() => undefined);
    await claude?.close();
    await reapMarked(run);
    await reapAll();
    // INTERLINK_HOST_KEEP=1 keeps the run's files (API log, state, Claude's transcripts).
    if (root !== undefined && process.env.INTERLINK_HOST_KEEP !== '1') await rm(root, { recursive: true, force: true });
    else if (root !== undefined) console.log(`host test files kept in ${root}`);
  });

  it('loads the plugin and connects its MCP server with every tool', async () => {
    const { event: init } = await claude.waitFor('system/init', isInit);
    expect(init).toMatchObject({
      session_id: sessionId,
      claude_code_version: CLAUDE_CODE_VERSION,
      mcp_servers: [{ name: 'plugin:interlink:interlink', status: 'connected' }],
      plugins: [expect.objectContaining({ name: 'interlink', path: PLUGIN_DIR })],
    });
    expect(init.tools).toEqual(expect.arrayContaining(toolsFor('claude').map((t) => pluginTool(t.name))));
  });

  it.runIf(process.platform === 'linux')('starts the installed server from PATH, in the session, with the channels switch and NODE_OPTIONS expanded', async () => {
    const servers = (await markedProcesses(run)).filter((p) => p.argv.includes(installed.entry) && p.argv.includes('serve'));
    expect(servers).toHaveLength(1);
    expect(servers[0]).toMatchObject({
      cwd: project,
      env: { CLAUDE_CODE_SESSION_ID: sessionId, INTERLINK_CHANNELS: '', NODE_OPTIONS: expect.stringMatching(/^\s*--max-semi-space-size=1$/) },
    });
  });

  it('completes a first turn against the fake API, binds the session, and starts the listener', async () => {
    const { event: result } = await claude.waitFor('the first result', isResult);
    expect(result).toMatchObject({ subtype: 'success', is_error: false, result: `FAKE_REPLY: ${FIRST_TURN}`, session_id: sessionId });
    await claude.waitFor('the Stop hooks', isStopHook('hook_started'));
    const { event: bind } = await claude.waitFor('the bind_claude_session hook', (e) => bindResult(e) !== undefined);
    expect(bindResult(bind)).toEqual({ session_id: sessionId, mailbox_session: sessionId, changed: false });

    const requests = await readApiLog(api.log);
    const turns = requests.filter((r) => r.reply.rule === 'reply');
    expect(turns.length).toBeGreaterThanOrEqual(1);
    expect(lastUserText(turns[0]!)).toContain(FIRST_TURN);
    expect(turns[0]!.headers['user-agent']).toContain(`claude-cli/${CLAUDE_CODE_VERSION}`);
  });

  it.runIf(process.platform === 'linux')('runs the installed listener from the Stop hook, and it waits', async () => {
    const listener = await waitForListener(sessionId);
    expect(listener.cwd).toBe(project);
    // Waiting: the listener's hook has not answered (a launch failure would have, with 0).
    expect(claude.events.filter(isListenerResponse)).toEqual([]);
  });

  it('wakes the idle session when a paired peer sends a message, and the model acknowledges it', async () => {
    alice = await startPeer({ root, name: 'alice', session: 'a1', relays: relay.url });
    await expectWake(alice, PEER_TEXT);
  });

  it('follows the session id to a new listener after /clear, and wakes there', async () => {
    const before = claude.events.length;
    claude.send('/clear');
    const { event: cleared } = await claude.waitFor('the cleared session', (e) => isInit(e) && e.session_id !== sessionId, { from: before });
    const newId = String(cleared.session_id);
    const afterClear = claude.events.length;
    claude.send(FIRST_TURN);
    await claude.waitFor('the first turn after /clear', isResult, { from: afterClear });
    const { event: bind } = await claude.waitFor('the rebind', (e) => bindResult(e)?.changed === true, { from: afterClear });
    expect(bindResult(bind)).toEqual({ session_id: newId, mailbox_session: sessionId, changed: true });
    const oldListener = await waitForListener(sessionId); // Claude leaves it running after /clear
    const newListener = await waitForListener(newId);

    // Peers still address the spawn-time session; the notice goes where the new listener waits.
    await expectWake(alice!, `${PEER_TEXT}, after /clear`);
    const alive = (await markedProcesses(run)).map((p) => p.pid);
    expect(alive).not.toContain(newListener.pid);
    expect(alive).toContain(oldListener.pid);
  });

  /** The listener process of this run whose hook was started for `session`. */
  async function waitForListener(session: string): Promise<MarkedProcess> {
    return eventually(
      async () => (await markedProcesses(run)).find((p) => p.argv.includes(installed.entry) && p.argv.includes('wait') && p.env.CLAUDE_CODE_SESSION_ID === session),
      15_000,
      `the listener of ${session}`,
    );
  }

  /**
   * Sends a message to the receiver's spawn-time session and checks the whole wake: a turn
   * nobody typed, the notice the model saw, receive_messages then acknowledge_messages with
   * the exact receipt, and the acknowledgement in the receiver's mailbox.
   */
  async function expectWake(from: Peer, text: string): Promise<void> {
    const eventsBefore = claude.events.length;
    const requestsBefore = (await readApiLog(api.log)).length;
    const turnsTyped = claude.userTurnsSent;
    const sent = await from.call<{ msg_id: string }>('send_message', { to: 'bob', session: sessionId, text, task_id: `t-${randomUUID()}`, status: 'needs_input' });

    const { index: initAt } = await claude.waitFor('a new turn (system/init)', isInit, { from: eventsBefore, timeoutMs: 60_000 });
    const { event: result, index: resultAt } = await claude.waitFor('the woken turn to end', isResult, { from: initAt, timeoutMs: 30_000 });
    expect(claude.userTurnsSent).toBe(turnsTyped);
    expect(result).toMatchObject({ subtype: 'success', result: 'DONE' });
    expect(toolCalls(claude.events.slice(initAt, resultAt))).toEqual([pluginTool('receive_messages'), pluginTool('acknowledge_messages')]);

    // What the model was shown: a notice naming a notification_id, never the body.
    const requests = (await readApiLog(api.log)).slice(requestsBefore).filter((r) => r.body !== null && typeof r.body === 'object');
    const rules = requests.map((r) => r.reply.rule);
    const [receiveAt, acknowledgeAt, doneAt] = [rules.indexOf('receive'), rules.indexOf('acknowledge'), rules.indexOf('done')];
    expect(receiveAt, `rules: ${rules.join(', ')}`).toBeGreaterThanOrEqual(0);
    expect(acknowledgeAt).toBeGreaterThan(receiveAt);
    expect(doneAt).toBeGreaterThan(acknowledgeAt);
    const notice = lastUserText(requests[receiveAt]!);
    expect(notice).toContain('Interlink notice:'); // the hook's rewakeMessage
    expect(notice).toContain('receive_messages');
    expect(notice).toContain('notification_id');
    expect(notice).not.toContain(text);
    const acknowledged = requests[acknowledgeAt]!.reply.content?.find((b) => b.type === 'tool_use')?.input;
    expect(acknowledged).toEqual({ messages: [{ sender: sender.key, msg_id: sent.msg_id }] });

    const mailbox = await Mailbox.open(mailboxPath(receiver.state, receiver.key, sessionId), { readOnly: true });
    try {
      const record = await mailbox.findByMsgId(sent.msg_id);
      expect(record?.states.map((s) => s.state)).toContain('receiver_acknowledged');
    } finally {
      await mailbox.close();
    }
  }
});
