/**
 * Seeded fuzzing of every MCP tool's arguments over real stdio: one real `serve` process
 * (Claude mode, then Codex mode) with a real relay, driven by the official MCP SDK client.
 * Each case calls a listed tool — or a name that is not one — with its valid arguments
 * edited (a member replaced by a hostile value, dropped, added, wrapped) or with any
 * hostile value at all: control and bidi characters, lone surrogates, path-like names,
 * 300,000-character strings, huge and fractional numbers, prototype keys, nesting.
 *
 * - Every call is answered within a deadline: a tool result that is either the tool's
 *   data or `isError` with `{"error": {"code", "message"}}` and a declared code. Only
 *   arguments that are not a JSON object at all may get a JSON-RPC error (the SDK refuses
 *   the request before any tool runs).
 * - Nothing but protocol reaches stdout (the SDK client reports any other line), and
 *   every stderr line is one structured JSON log line.
 * - The server is alive at the end, and it wrote nothing outside its state and config
 *   roots (its home and working directory stay empty).
 *
 * FUZZ_RUNS cases per mode (default 400; `npm run fuzz` runs 100,000).
 */
import fc from 'fast-check';
import { mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ERROR_CODES, TOOL_CODES } from '../../src/errors.js';
import { newIdentity } from '../helpers/fixtures.js';
import { editedJson, fuzzLabel, fuzzParameters, fuzzRuns, hostileString, hostileValue } from '../helpers/fuzz.js';
import { MAIN, resultData } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { startRelay, type RelayProcess } from '../helpers/spawn-relay.js';

const RUNS = fuzzRuns(400);
/** A call unanswered for this long is a hang; the slowest real one (a 256 KiB send) takes milliseconds. */
const CALL_DEADLINE_MS = 30_000;
const DECLARED = new Set<string>([...ERROR_CODES, ...TOOL_CODES]);

const stranger = newIdentity();
const MSG_ID = '0123456789abcdef0123456789abcdef';
const FINGERPRINT = 'abcd-efgh-ijkl-mnop';

/** Valid arguments for every tool of both modes (CONTRACT.md "MCP tools"): the starting point of every edit. */
const VALID_ARGUMENTS: Record<string, Record<string, unknown>> = {
  get_my_session_id: {},
  send_message: { to: 'self', text: 'hello', session: 'other', task_id: 't-1', status: 'update', in_reply_to: MSG_ID, idempotency_key: 'k-1' },
  cancel_task: { to: 'self', task_id: 't-1', reason: 'no longer needed' },
  message_status: { msg_id: MSG_ID },
  list_pending: {},
  receive_messages: { notification_id: 'n-1', reset_notification: true, limit: 20 },
  acknowledge_messages: { messages: [{ sender: stranger.key, msg_id: MSG_ID }] },
  conversation_history: { peer: 'self', limit: 20, consume: false },
  list_peers: {},
  list_audiences: {},
  add_peer: { petname: 'carol', key: stranger.key },
  remove_peer: { petname: 'carol' },
  discover: { peer: 'self' },
  set_summary: { summary: 'working on the parser' },
  request_pair: { target: stranger.key },
  list_pair_requests: {},
  accept_pair: { fingerprint: FINGERPRINT },
  reject_pair: { fingerprint: FINGERPRINT },
  confirm_pair: { fingerprint: FINGERPRINT },
  cancel_pending: { msg_id: MSG_ID },
  failed_deliveries: { action: 'list', id: 'f-0123456789abcdef' },
  bind_codex_session: { thread_id: '0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b' },
  bind_claude_session: { session_id: '3f1c2a9e-claude-session' },
};

interface Server {
  client: Client;
  transport: StdioClientTransport;
  stderr: () => string;
  /** What the SDK client reported that is not a response: any stdout line that is not protocol. */
  protocolErrors: string[];
  tools: string[];
  close: () => Promise<void>;
}

let root: string;
let relay: RelayProcess;

beforeAll(async () => {
  // tmpfs where there is one: 100,000 sends are 100,000 synced appends.
  root = await mkdtemp(join(existsSync('/dev/shm') ? '/dev/shm' : tmpdir(), 'interlink-tools-fuzz-'));
  relay = await startRelay();
});
afterAll(async () => {
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

async function startServer(name: string, env: Record<string, string>): Promise<Server & { home: string; cwd: string }> {
  const home = join(root, name, 'home');
  const cwd = join(root, name, 'cwd');
  await mkdir(home, { recursive: true });
  await mkdir(cwd, { recursive: true });
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [MAIN, 'serve'],
    cwd,
    env: {
      PATH: process.env.PATH ?? '',
      HOME: home,
      INTERLINK_CONFIG_DIR: join(root, name, 'config'),
      INTERLINK_STATE_DIR: join(root, name, 'state'),
      INTERLINK_URL: relay.url,
      INTERLINK_SESSION: 'fuzz',
      ...env,
    },
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const client = new Client({ name: 'tools-fuzz', version: '0.0.0' });
  const protocolErrors: string[] = [];
  client.onerror = (err) => protocolErrors.push(String(err));
  await client.connect(transport);
  const tools = (await client.listTools()).tools.map((t) => t.name);
  return { client, transport, stderr: () => stderr, protocolErrors, tools, home, cwd, close: () => client.close() };
}

/** A case: a tool (or a name that is none) and its arguments. */
function callArbitrary(tools: readonly string[]): fc.Arbitrary<{ name: string; args: unknown }> {
  const known = fc.constantFrom(...tools).chain((name) => {
    const valid = VALID_ARGUMENTS[name] ?? {};
    return fc
      .oneof(
        { weight: 2, arbitrary: fc.constant<unknown>(valid) },
        { weight: 10, arbitrary: editedJson(valid) },
        { weight: 3, arbitrary: fc.dictionary(fc.oneof(fc.constantFrom(...Object.keys(valid), 'to', 'text', '__proto__'), hostileString), hostileValue, { maxKeys: 5 }) },
        { weight: 1, arbitrary: hostileValue },
      )
      .map((args) => ({ name, args }));
  });
  const unknown = fc.tuple(fc.oneof(hostileString, fc.constantFrom('', 'SEND_MESSAGE', 'send_message ', 'constructor', '__proto__')), hostileValue).map(([name, args]) => ({ name, args }));
  return fc.oneof({ weight: 12, arbitrary: known }, { weight: 1, arbitrary: unknown });
}

function isPlainObject(value: unknown): boolean {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

async function callOnce(server: Server, name: string, args: unknown): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${name} not answered within ${CALL_DEADLINE_MS} ms`)), CALL_DEADLINE_MS);
  });
  let result: Record<string, unknown>;
  try {
    result = await Promise.race([server.client.callTool({ name, arguments: args as Record<string, unknown> }, undefined, { timeout: CALL_DEADLINE_MS }), deadline]);
  } catch (err) {
    // The SDK refuses a request whose arguments are not an object before any tool runs.
    if (!isPlainObject(args) && args !== undefined && /-32602|Invalid/i.test(String(err))) return 'json-rpc refusal';
    throw new Error(`${name} ${JSON.stringify(args)?.slice(0, 300)}: ${String(err)}`);
  } finally {
    clearTimeout(timer);
  }
  const data = resultData(result);
  if (result.isError === true) {
    const error = (data as { error?: { code?: unknown; message?: unknown } }).error;
    expect(typeof error?.message, `${name}: an error without a message`).toBe('string');
    expect(DECLARED.has(String(error?.code)), `${name}: undeclared error code ${String(error?.code)}`).toBe(true);
    return String(error?.code);
  }
  return 'ok';
}

function stderrLines(server: Server): string[] {
  return server.stderr().split('\n').filter((line) => line !== '');
}

describe.each([
  ['Claude', {}],
  ['Codex', { INTERLINK_MODE: 'codex', INTERLINK_CODEX_BIN: 'true' }],
])('every tool of a %s-mode server under hostile arguments', (mode, env) => {
  it(`answers each call with its data or a declared error, puts only protocol on stdout, writes only under its roots ${fuzzLabel(RUNS)}`, async () => {
    const server = await startServer(mode.toLowerCase(), { INTERLINK_LOG: 'info', ...env });
    try {
      expect(server.tools.length).toBeGreaterThan(10);
      const unlisted = server.tools.filter((t) => VALID_ARGUMENTS[t] === undefined);
      expect(unlisted, 'a tool with no valid arguments to start from').toEqual([]);
      const outcomes = new Map<string, number>();
      await fc.assert(
        fc.asyncProperty(callArbitrary(server.tools), async ({ name, args }) => {
          const outcome = `${name}: ${await callOnce(server, name, args)}`;
          outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
          expect(server.protocolErrors).toEqual([]);
        }),
        fuzzParameters(RUNS),
      );
      // What the calls came to, so a run that only ever met bad_arguments is seen for what it is.
      console.log(`${mode} tool outcomes:\n  ${[...outcomes].sort(([a], [b]) => a.localeCompare(b)).map(([k, n]) => `${k} ${n}`).join('\n  ')}`);
      expect([...outcomes.keys()].filter((k) => k.endsWith(': ok')).length, 'tools that answered with data').toBeGreaterThan(8);
      // Still serving, and every log line is structured.
      expect((await server.client.callTool({ name: 'get_my_session_id', arguments: {} })).isError).not.toBe(true);
      const unstructured = stderrLines(server).filter((line) => {
        try {
          return typeof (JSON.parse(line) as { event?: unknown }).event !== 'string';
        } catch {
          return true;
        }
      });
      expect(unstructured.slice(0, 5)).toEqual([]);
      expect(await readdir(server.home)).toEqual([]);
      expect(await readdir(server.cwd)).toEqual([]);
      expect((await readdir(join(root, mode.toLowerCase()))).sort()).toEqual(['config', 'cwd', 'home', 'state']);
    } finally {
      await server.close();
    }
  }, 7_200_000);
});
