/**
 * What the Codex host test stands on: the pinned `codex` from scripts/host/install-clis.sh,
 * the scripted fake Responses API, a CODEX_HOME made from the files in codex/ (plus the
 * fake provider), hook trust recorded the way Codex's own `/hooks` review does, and the
 * local app-server daemon that owns the thread, as it does for Codex's own sessions.
 */
import { execFile, spawn } from 'node:child_process';
import { appendFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { promisify } from 'node:util';
import { z } from 'zod';
import { readJsonLines } from '../helpers/json-lines.js';
import { spawnNode } from '../helpers/process.js';
import { REPO, type FakeApi } from './setup.js';

const run = promisify(execFile);

export const CODEX_VERSION = '0.171.0';
/** The pinned CLI; INTERLINK_HOST_CODEX points elsewhere. */
export const CODEX = process.env.INTERLINK_HOST_CODEX ?? join(REPO, '.cache', 'host-clis', 'node_modules', '.bin', 'codex');
export const CODEX_DIR = join(REPO, 'codex');

export async function startFakeOpenAi(log: string): Promise<FakeApi> {
  const child = spawnNode(join(REPO, 'scripts', 'host', 'fake-openai.mjs'), ['--log', log]);
  await child.waitForLines(1, 10_000);
  const port = /^LISTENING (\d+)$/.exec(child.lines[0] ?? '')?.[1];
  if (port === undefined) throw new Error(`unexpected fake API output: ${child.lines[0]}; ${child.stderr()}`);
  return { child, url: `http://127.0.0.1:${port}/v1`, log };
}

const tomlString = (value: string) => JSON.stringify(value);

/**
 * `<codexHome>/config.toml`: the fake provider, then codex/config.toml as shipped with one
 * line added (the server's working directory: the project), and the project marked
 * trusted. The server is the `interlink-mcp` on PATH, which the test installs. `<codexHome>/hooks.json` is codex/hooks.json.
 */
export async function writeCodexHome(codexHome: string, api: FakeApi, project: string): Promise<void> {
  await mkdir(codexHome, { recursive: true });
  const shipped = await readFile(join(CODEX_DIR, 'config.toml'), 'utf8');
  const table = '[mcp_servers.interlink]\n';
  if (!shipped.includes(table)) throw new Error('codex/config.toml has no [mcp_servers.interlink] table');
  const config = [
    'model = "fake-model"',
    'model_provider = "fake"',
    'approval_policy = "never"',
    'sandbox_mode = "danger-full-access"',
    '',
    shipped.replace(table, `${table}cwd = ${tomlString(project)}\n`),
    '[model_providers.fake]',
    'name = "fake"',
    `base_url = ${tomlString(api.url)}`,
    'wire_api = "responses"',
    'env_key = "FAKE_OPENAI_KEY"',
    'request_max_retries = 0',
    'stream_max_retries = 0',
    '',
    '[analytics]',
    'enabled = false',
    '',
    '[features]',
    '# Otherwise Codex syncs plugins from github.com.',
    'plugins = false',
    '',
    `[projects.${tomlString(project)}]`,
    'trust_level = "trusted"',
    '',
  ].join('\n');
  await writeFile(join(codexHome, 'config.toml'), config);
  await writeFile(join(codexHome, 'hooks.json'), await readFile(join(CODEX_DIR, 'hooks.json'), 'utf8'));
}

const hookSchema = z.looseObject({ key: z.string(), currentHash: z.string(), trustStatus: z.string(), handlerType: z.string(), server: z.string().optional(), tool: z.string().optional() });
const hooksListSchema = z.looseObject({ result: z.looseObject({ data: z.array(z.looseObject({ hooks: z.array(hookSchema) })) }) });
export type ListedHook = z.infer<typeof hookSchema>;

/** Asks `codex app-server` (stdio JSON-RPC) which hooks apply in `cwd`, with their hashes. */
export async function listHooks(env: Record<string, string>, cwd: string): Promise<ListedHook[]> {
  const child = spawn(CODEX, ['app-server'], { env, cwd, stdio: ['pipe', 'pipe', 'ignore'] });
  try {
    const lines = createInterface({ input: child.stdout });
    const answers = new Map<number, (value: unknown) => void>();
    lines.on('line', (line) => {
      const message: unknown = JSON.parse(line);
      const id = z.looseObject({ id: z.number() }).safeParse(message);
      if (id.success) answers.get(id.data.id)?.(message);
    });
    const request = (id: number, method: string, params: object) =>
      new Promise<unknown>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`codex app-server did not answer ${method}`)), 20_000);
        answers.set(id, (value) => {
          clearTimeout(timer);
          resolve(value);
        });
        child.stdin.write(JSON.stringify({ id, method, params }) + '\n');
      });
    await request(1, 'initialize', { clientInfo: { name: 'interlink-host-test', version: '0' } });
    child.stdin.write(JSON.stringify({ method: 'initialized' }) + '\n');
    const listed = hooksListSchema.parse(await request(2, 'hooks/list', { cwds: [cwd] }));
    return listed.result.data.flatMap((d) => d.hooks);
  } finally {
    child.kill('SIGKILL');
  }
}

/**
 * Records trust for the listed hooks as Codex's `/hooks` review does: the hook's key and
 * its current hash under `[hooks.state]` in config.toml.
 */
export async function trustHooks(codexHome: string, hooks: readonly ListedHook[]): Promise<void> {
  const lines = hooks.flatMap((h) => [`[hooks.state.${tomlString(h.key)}]`, `trusted_hash = ${tomlString(h.currentHash)}`, '']);
  await appendFile(join(codexHome, 'config.toml'), '\n' + lines.join('\n'));
}

export async function codexCli(env: Record<string, string>, cwd: string, args: readonly string[], timeoutMs = 60_000): Promise<{ stdout: string; stderr: string }> {
  return run(CODEX, [...args], { env, cwd, timeout: timeoutMs, killSignal: 'SIGKILL', maxBuffer: 16 * 1024 * 1024 });
}

const execEventSchema = z.looseObject({ type: z.string(), thread_id: z.string().optional(), item: z.looseObject({ type: z.string() }).optional() });
export type ExecEvent = z.infer<typeof execEventSchema>;

/** `codex exec --remote unix:// --json <prompt>`: a turn on a thread the daemon owns. */
export async function execOnDaemon(env: Record<string, string>, cwd: string, prompt: string): Promise<ExecEvent[]> {
  const child = spawn(CODEX, ['exec', '--remote', 'unix://', '--json', prompt], { env, cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('close', (c) => {
      clearTimeout(timer);
      resolve(c);
    });
  });
  if (code !== 0) throw new Error(`codex exec --remote exited ${code}: ${stderr.slice(-2000)}`);
  return stdout
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => execEventSchema.parse(JSON.parse(line)));
}

const requestSchema = z.looseObject({
  t: z.number(),
  url: z.string(),
  headers: z.record(z.string(), z.unknown()),
  body: z.union([z.looseObject({ input: z.array(z.unknown()).optional() }), z.null()]),
  reply: z.looseObject({ rule: z.string(), items: z.array(z.looseObject({ type: z.string(), name: z.string().optional(), namespace: z.string().optional(), arguments: z.string().optional() })).optional() }),
});
export type ResponsesRequest = z.infer<typeof requestSchema>;

export async function readResponsesLog(log: string): Promise<ResponsesRequest[]> {
  return (await readJsonLines(log)).map((line) => requestSchema.parse(line));
}

const turnMetadataSchema = z.looseObject({ thread_id: z.string(), turn_trigger: z.string().optional() });

/** Codex's `x-codex-turn-metadata` header: which thread, and what started the turn. */
export function turnMetadata(request: ResponsesRequest): z.infer<typeof turnMetadataSchema> | undefined {
  const header = request.headers['x-codex-turn-metadata'];
  if (typeof header !== 'string') return undefined;
  const parsed = turnMetadataSchema.safeParse(JSON.parse(header));
  return parsed.success ? parsed.data : undefined;
}

const inputMessageSchema = z.looseObject({ role: z.string(), content: z.array(z.looseObject({ text: z.string().optional() })) });

/** The text of the last user message in the request's input. */
export function lastUserInput(request: ResponsesRequest): string {
  const input = request.body?.input ?? [];
  for (let i = input.length - 1; i >= 0; i--) {
    const parsed = inputMessageSchema.safeParse(input[i]);
    if (parsed.success && parsed.data.role === 'user') return parsed.data.content.map((c) => c.text ?? '').join('\n');
  }
  return '';
}
