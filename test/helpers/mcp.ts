/**
 * Real `interlink-mcp serve` processes driven by the official MCP SDK client, each with
 * its own config and state directories.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

export const MAIN = join(import.meta.dirname, '..', '..', 'dist', 'src', 'cli', 'main.js');

export interface Peer {
  client: Client;
  transport: StdioClientTransport;
  config: string;
  state: string;
  /** Calls a tool; resolves with its result (see resultData), rejects on a tool error. */
  call: <T = Record<string, unknown>>(name: string, args?: Record<string, unknown>) => Promise<T>;
  /** Calls a tool that should fail; resolves with the error object. */
  fail: (name: string, args?: Record<string, unknown>) => Promise<{ code: string; message: string }>;
  pid: () => number | null;
  close: () => Promise<void>;
  stderr: () => string;
}

export interface PeerOptions {
  root: string;
  name: string;
  session: string;
  relays: string;
  env?: Record<string, string>;
  args?: string[];
  /** Run this (looked up on the env's PATH) with `args` instead of `node dist/src/cli/main.js`. */
  command?: string;
}

/**
 * A tool result's data: the JSON object its text content always carries. Where the server
 * also sent structuredContent (small results only), it must be the very same object.
 */
export function resultData(result: Record<string, unknown>): Record<string, unknown> {
  const blocks = Array.isArray(result.content) ? (result.content as { type?: unknown; text?: unknown }[]) : [];
  const text = blocks.length === 1 && blocks[0]?.type === 'text' && typeof blocks[0].text === 'string' ? blocks[0].text : undefined;
  if (text === undefined) throw new Error(`a tool result without exactly one text block: ${JSON.stringify(result).slice(0, 500)}`);
  const data = JSON.parse(text) as Record<string, unknown>;
  if (result.structuredContent !== undefined && !isDeepStrictEqual(result.structuredContent, data)) {
    throw new Error(`structuredContent differs from the text content: ${JSON.stringify(result.structuredContent).slice(0, 500)}`);
  }
  return data;
}

export async function startPeer(options: PeerOptions): Promise<Peer> {
  const config = join(options.root, options.name, 'config');
  const state = join(options.root, options.name, 'state');
  await mkdir(config, { recursive: true });
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '',
    HOME: join(options.root, options.name),
    INTERLINK_CONFIG_DIR: config,
    INTERLINK_STATE_DIR: state,
    INTERLINK_URL: options.relays,
    INTERLINK_SESSION: options.session,
    INTERLINK_LOG: 'warn',
    ...options.env,
  };
  const args = options.args ?? ['serve'];
  const command = options.command === undefined ? { command: process.execPath, args: [MAIN, ...args] } : { command: options.command, args };
  const transport = new StdioClientTransport({ ...command, env, stderr: 'pipe' });
  let stderr = '';
  transport.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const client = new Client({ name: `test-${options.name}`, version: '0.0.0' });
  await client.connect(transport);

  const raw = async (name: string, args: Record<string, unknown>) => {
    const result = await client.callTool({ name, arguments: args });
    return { isError: result.isError === true, data: resultData(result) };
  };
  return {
    client,
    transport,
    config,
    state,
    call: async <T>(name: string, args: Record<string, unknown> = {}) => {
      const { isError, data } = await raw(name, args);
      if (isError) throw new Error(`${name} failed: ${JSON.stringify(data)}`);
      return data as T;
    },
    fail: async (name: string, args: Record<string, unknown> = {}) => {
      const { isError, data } = await raw(name, args);
      if (!isError) throw new Error(`${name} succeeded: ${JSON.stringify(data)}`);
      return (data as { error: { code: string; message: string } }).error;
    },
    pid: () => transport.pid,
    close: () => client.close(),
    stderr: () => stderr,
  };
}

/**
 * The servers one test starts, under one temp root: `start` spawns and remembers a
 * server, `closeAll` (for afterEach) closes whatever the test left running.
 */
export function peerPool(root: () => string) {
  const open: Peer[] = [];
  return {
    start: async (name: string, session: string, relays: string, env: Record<string, string> = {}): Promise<Peer> => {
      const p = await startPeer({ root: root(), name, session, relays, env });
      open.push(p);
      return p;
    },
    stop: async (p: Peer): Promise<void> => {
      await p.close();
      open.splice(open.indexOf(p), 1);
    },
    closeAll: async (): Promise<void> => {
      await Promise.all(open.splice(0).map((p) => p.close().catch(() => undefined)));
    },
  };
}

/** Kills a peer's server process with SIGKILL (a crash); the caller drops it from its own list. */
export function kill9(p: Peer): void {
  const pid = p.pid();
  if (pid !== null) process.kill(pid, 'SIGKILL');
}

/** Polls `check` until it returns a value (not undefined) or the deadline passes. */
export async function eventually<T>(check: () => Promise<T | undefined>, timeoutMs = 15_000, what = 'condition'): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let delay = 10;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 200);
  }
}

/** Each side's operator adds the other's key: `a` calls `b` `bName`, and `b` calls `a` `aName`. */
export async function pair(a: Peer, b: Peer, names: { a: string; b: string } = { a: 'alice', b: 'bob' }): Promise<{ aKey: string; bKey: string }> {
  const aKey = (await a.call<{ identity: string }>('get_my_session_id')).identity;
  const bKey = (await b.call<{ identity: string }>('get_my_session_id')).identity;
  await a.call('add_peer', { petname: names.b, key: bKey });
  await b.call('add_peer', { petname: names.a, key: aKey });
  return { aKey, bKey };
}
