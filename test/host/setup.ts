/**
 * What a host test stands on: identities made and paired with the real CLI, this clone
 * installed the README's way (`npm install -g .`, into a prefix of the run, without the
 * network) so that the plugin and codex/config.toml find `interlink-mcp` on PATH, the
 * scripted fake Anthropic API, and the pinned Claude Code from scripts/host/install-clis.sh.
 */
import { execFile } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { z } from 'zod';
import { installFromClone, REPO } from '../helpers/install.js';
import { readJsonLines } from '../helpers/json-lines.js';
import { MAIN } from '../helpers/mcp.js';
import { spawnNode, type Child } from '../helpers/process.js';

const run = promisify(execFile);

export { REPO };
export const PLUGIN_DIR = join(REPO, 'plugin');
export const CLAUDE_CODE_VERSION = '2.1.197';
/** The pinned CLI; INTERLINK_HOST_CLAUDE points elsewhere. */
export const CLAUDE = process.env.INTERLINK_HOST_CLAUDE ?? join(REPO, '.cache', 'host-clis', 'node_modules', '.bin', 'claude');

/** How Claude Code names a tool of the plugin's MCP server (`plugin:interlink:interlink`). */
export function pluginTool(name: string): string {
  return `mcp__plugin_interlink_interlink__${name}`;
}

/** Keeps Claude Code from calling anything but ANTHROPIC_BASE_URL, and npm offline should anything run it. */
export const OFFLINE_CLAUDE_ENV = {
  CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
  DISABLE_AUTOUPDATER: '1',
  DISABLE_TELEMETRY: '1',
  DISABLE_ERROR_REPORTING: '1',
  npm_config_offline: 'true',
  npm_config_update_notifier: 'false',
} as const;

export interface Identity {
  name: string;
  config: string;
  state: string;
  key: string;
  env: Record<string, string>;
}

export async function interlink(env: Record<string, string>, args: readonly string[]): Promise<string> {
  const { stdout } = await run(process.execPath, [MAIN, ...args], { env: { PATH: process.env.PATH ?? '', INTERLINK_LOG: 'warn', ...env } });
  return stdout;
}

/** `<root>/<name>/config` and `/state`, the layout test/helpers/mcp.ts startPeer uses. */
export async function createIdentity(root: string, name: string): Promise<Identity> {
  const config = join(root, name, 'config');
  const state = join(root, name, 'state');
  await mkdir(config, { recursive: true });
  const env = { HOME: join(root, name), INTERLINK_CONFIG_DIR: config, INTERLINK_STATE_DIR: state };
  await interlink(env, ['keygen']);
  const { key } = z.object({ key: z.string() }).parse(JSON.parse(await interlink(env, ['whoami', '--json'])));
  return { name, config, state, key, env };
}

/** Each trusts the other under its name, through `interlink-mcp peers add`. */
export async function pair(a: Identity, b: Identity): Promise<void> {
  await interlink(a.env, ['peers', 'add', b.name, b.key]);
  await interlink(b.env, ['peers', 'add', a.name, a.key]);
}

export interface InstalledInterlink {
  /** The install's bin directory: put it first on PATH. */
  bin: string;
  /** `<bin>/interlink-mcp`, argv[1] of every process the hosts start from it. */
  entry: string;
}

/** This clone, installed into `<root>/prefix` as the README's `npm install -g .` does. */
export async function installInterlink(root: string): Promise<InstalledInterlink> {
  const { bin } = await installFromClone(join(root, 'prefix'));
  return { bin, entry: join(bin, 'interlink-mcp') };
}

/** The project the host runs in; `interlink-mcp` on its PATH must be the installed one. */
export async function createProject(dir: string, env: Record<string, string>, installed: InstalledInterlink): Promise<void> {
  await mkdir(dir, { recursive: true });
  const { stdout } = await run('sh', ['-c', 'command -v interlink-mcp'], { cwd: dir, env });
  if (stdout.trim() !== installed.entry) throw new Error(`interlink-mcp on the host's PATH is ${stdout.trim() || 'missing'}, not ${installed.entry}`);
}

export interface FakeApi {
  child: Child;
  url: string;
  log: string;
}

export async function startFakeApi(log: string): Promise<FakeApi> {
  const child = spawnNode(join(REPO, 'scripts', 'host', 'fake-anthropic.mjs'), ['--log', log]);
  await child.waitForLines(1, 10_000);
  const port = /^LISTENING (\d+)$/.exec(child.lines[0] ?? '')?.[1];
  if (port === undefined) throw new Error(`unexpected fake API output: ${child.lines[0]}; ${child.stderr()}`);
  return { child, url: `http://127.0.0.1:${port}`, log };
}

const contentBlockSchema = z.object({ type: z.string(), text: z.string().optional(), name: z.string().optional(), input: z.unknown().optional() }).loose();
const messageSchema = z.object({ role: z.string(), content: z.union([z.string(), z.array(contentBlockSchema)]) }).loose();
const apiRequestSchema = z.object({
  t: z.number(),
  method: z.string(),
  url: z.string(),
  headers: z.record(z.string(), z.unknown()),
  body: z.union([z.object({ messages: z.array(messageSchema).optional() }).loose(), z.string(), z.null()]),
  reply: z.object({ rule: z.string(), content: z.array(contentBlockSchema).optional() }).loose(),
});
export type ApiRequest = z.infer<typeof apiRequestSchema>;

export async function readApiLog(log: string): Promise<ApiRequest[]> {
  return (await readJsonLines(log)).map((line) => apiRequestSchema.parse(line));
}

/** The text of the last user message the model was shown in this request. */
export function lastUserText(request: ApiRequest): string {
  const body = request.body;
  if (body === null || typeof body === 'string') return '';
  const last = [...(body.messages ?? [])].reverse().find((m) => m.role === 'user');
  if (last === undefined) return '';
  if (typeof last.content === 'string') return last.content;
  return last.content.map((block) => block.text ?? '').join('\n');
}
