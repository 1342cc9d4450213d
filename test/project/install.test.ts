/**
 * The README's install, as a person meets it: `npm install -g .` from this clone into a
 * temporary prefix with the registry unreachable, then everything started the way the
 * hosts start it, with only that prefix's bin, a trap for npm/npx and node on PATH:
 * - the MCP server exactly as plugin/.mcp.json says, driven by the SDK client;
 * - the plugin's Stop hook (hooks/hooks.json), which must run the installed listener;
 * - the MCP server exactly as codex/config.toml says, with what Codex passes on, also to a
 *   relay with a self-signed certificate (INTERLINK_TLS_CA or NODE_EXTRA_CA_CERTS);
 * - `interlink-mcp --help` and `interlinked` (in front of a stand-in `claude`).
 */
import { execFile, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, realpath, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { installFromClone, README_INSTALL, REPO, type Installed } from '../helpers/install.js';
import { eventually, pair, startPeer, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { startRelay, type RelayProcess } from '../helpers/spawn-relay.js';
import { hasOpenssl, makeCertificate } from '../helpers/tls.js';

const run = promisify(execFile);

const mcpJsonSchema = z.object({
  mcpServers: z.object({ interlink: z.object({ command: z.string(), args: z.array(z.string()), env: z.record(z.string(), z.string()) }).strict() }).strict(),
});

const hooksSchema = z.object({
  hooks: z.object({ Stop: z.array(z.object({ hooks: z.array(z.looseObject({ type: z.string(), command: z.string().optional() })) })) }).loose(),
});

/** Claude Code expands `${VAR:-default}` in a plugin's `.mcp.json`; so does this. */
function expandPluginEnv(value: string, env: Record<string, string | undefined>): string {
  return value.replace(/\$\{([A-Z_][A-Z0-9_]*):-([^}]*)\}/g, (_all, name: string, fallback: string) => env[name] ?? fallback);
}

const codexServerSchema = z.object({ command: z.string(), args: z.array(z.string()), env: z.record(z.string(), z.string()), envVars: z.array(z.string()) });

/**
 * `[mcp_servers.interlink]` of codex/config.toml, read for the TOML forms it uses: basic
 * strings and string arrays (written as JSON writes them) and one inline table of strings.
 */
function codexServer(toml: string): z.infer<typeof codexServerSchema> {
  const start = toml.indexOf('[mcp_servers.interlink]\n');
  if (start < 0) throw new Error('codex/config.toml has no [mcp_servers.interlink] table');
  const rest = toml.slice(start).split('\n').slice(1);
  const end = rest.findIndex((line) => line.startsWith('['));
  const table = (end < 0 ? rest : rest.slice(0, end)).filter((line) => !line.trimStart().startsWith('#')).join('\n');
  const value = (key: string, pattern: string): string => {
    const match = new RegExp(`^${key} = (${pattern})$`, 'm').exec(table);
    if (match?.[1] === undefined) throw new Error(`codex/config.toml: no ${key} in [mcp_servers.interlink]`);
    return match[1];
  };
  const inline = value('env', '\\{.*\\}').slice(1, -1).trim();
  const env = Object.fromEntries(
    inline.split(',').map((pair) => {
      const match = /^\s*([A-Z_][A-Z0-9_]*) = (".*")\s*$/.exec(pair);
      if (match?.[1] === undefined || match[2] === undefined) throw new Error(`codex/config.toml: cannot read env entry ${pair}`);
      const text: unknown = JSON.parse(match[2]);
      return [match[1], text];
    }),
  );
  const envVars = value('env_vars', '\\[[^\\]]*\\]').replace(/,\s*\]$/, ']');
  return codexServerSchema.parse({ command: JSON.parse(value('command', '".*"')), args: JSON.parse(value('args', '\\[.*\\]')), env, envVars: JSON.parse(envVars) });
}

/**
 * The environment Codex gives the server started from `server`: HOME, PATH and TERM of the
 * shell Codex was started in, the table's `env`, and each `env_vars` name the shell sets.
 */
function codexServerEnv(server: z.infer<typeof codexServerSchema>, shell: Record<string, string>): Record<string, string> {
  const passed = ['HOME', 'PATH', 'TERM', ...server.envVars].flatMap((name) => (shell[name] === undefined ? [] : [[name, shell[name]] as const]));
  return { ...Object.fromEntries(passed), ...server.env };
}

/** argv of a live process, where /proc shows it. */
async function argvOf(pid: number): Promise<string[] | undefined> {
  if (!existsSync('/proc/self/cmdline')) return undefined;
  return (await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0').filter((a) => a !== '');
}

/** The server runs with the 1 MiB young generation its config asks for (read from /proc where there is one). */
async function expectSmallYoungGeneration(pid: number): Promise<void> {
  if (!existsSync('/proc/self/environ')) return;
  const environ = (await readFile(`/proc/${pid}/environ`, 'utf8')).split('\0');
  expect(environ.find((v) => v.startsWith('NODE_OPTIONS='))).toMatch(/--max-semi-space-size=1$/);
}

describe.skipIf(process.platform === 'win32')('install from a clone, without a registry', () => {
  let root: string;
  let installed: Installed;
  let relay: RelayProcess;
  /** Where the trap's npm and npx write what they were asked to do. */
  let trapLog: string;
  /** The PATH every process below gets: the install, the trap, node; nothing else. */
  let path: string;
  const peers: Peer[] = [];

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'interlink-install-'));
    installed = await installFromClone(join(root, 'prefix'));
    const trap = join(root, 'trap');
    await mkdir(trap);
    trapLog = join(root, 'trap.log');
    for (const tool of ['npm', 'npx']) {
      await writeFile(join(trap, tool), `#!/bin/sh\necho "${tool} $*" >> ${JSON.stringify(trapLog)}\nexit 1\n`, { mode: 0o755 });
    }
    path = [installed.bin, trap, dirname(process.execPath)].join(delimiter);
    relay = await startRelay();
  });

  afterEach(async () => {
    await Promise.all(peers.splice(0).map((p) => p.close().catch(() => undefined)));
    expect(existsSync(trapLog) ? await readFile(trapLog, 'utf8') : '', 'npm or npx was run').toBe('');
  });

  afterAll(async () => {
    await reapAll();
    if (root !== undefined) await rm(root, { recursive: true, force: true });
  });

  async function peer(options: Omit<Parameters<typeof startPeer>[0], 'root' | 'relays'>): Promise<Peer> {
    const started = await startPeer({ root, relays: relay.url, ...options });
    peers.push(started);
    return started;
  }

  it('links both binaries to this clone, and fetched nothing', async () => {
    expect(await realpath(join(installed.prefix, 'lib', 'node_modules', 'interlink-mcp'))).toBe(await realpath(REPO));
    expect((await readdir(installed.bin)).sort()).toEqual(['interlink-mcp', 'interlinked']);
    // npm's cache keeps every package it fetches under _cacache; it never got one.
    expect(existsSync(join(installed.cache, '_cacache'))).toBe(false);
    // The README's command, and npm had nothing to warn about (npm 11.16 and later list
    // install scripts that no allowScripts entry covers; this one runs none).
    expect(await readFile(join(REPO, 'README.md'), 'utf8')).toContain(`\`\`\`sh\n${README_INSTALL}\n\`\`\``);
    expect(installed.npmOutput).not.toMatch(/allowScripts|install-scripts|allow-scripts/);
    const { stdout } = await run('interlink-mcp', ['--help'], { env: { PATH: path, HOME: root } });
    expect(stdout).toMatch(/^usage: interlink-mcp/);
  });

  it('starts the server as plugin/.mcp.json says, and it is the installed one', async () => {
    const server = mcpJsonSchema.parse(JSON.parse(await readFile(join(REPO, 'plugin', '.mcp.json'), 'utf8'))).mcpServers.interlink;
    const session = randomUUID();
    const callerEnv = { PATH: path, CLAUDE_CODE_SESSION_ID: session };
    const env = Object.fromEntries(Object.entries(server.env).map(([name, value]) => [name, expandPluginEnv(value, callerEnv)]));
    expect(env).toEqual({ INTERLINK_CHANNELS: '', NODE_OPTIONS: ' --max-semi-space-size=1' });
    // A caller's own NODE_OPTIONS are kept, with the server's flag after them.
    expect(expandPluginEnv(server.env.NODE_OPTIONS!, { NODE_OPTIONS: '--no-warnings' })).toBe('--no-warnings --max-semi-space-size=1');

    const bob = await peer({ name: 'bob', session, command: server.command, args: server.args, env: { ...callerEnv, ...env } });
    expect(await bob.call('get_my_session_id')).toMatchObject({ session_id: session });
    await expectSmallYoungGeneration(bob.pid()!);
    const argv = await argvOf(bob.pid()!);
    if (argv !== undefined) expect(argv.slice(1)).toEqual([join(installed.bin, 'interlink-mcp'), ...server.args]);
  });

  it("runs the installed listener from the plugin's Stop hook, which wakes on a peer's message", async () => {
    const server = mcpJsonSchema.parse(JSON.parse(await readFile(join(REPO, 'plugin', '.mcp.json'), 'utf8'))).mcpServers.interlink;
    const hooks = hooksSchema.parse(JSON.parse(await readFile(join(REPO, 'plugin', 'hooks', 'hooks.json'), 'utf8')));
    const command = hooks.hooks.Stop.flatMap((group) => group.hooks).find((hook) => hook.type === 'command')?.command;
    if (command === undefined) throw new Error('plugin/hooks/hooks.json has no Stop command hook');

    const session = randomUUID();
    const bob = await peer({ name: 'bob-hook', session, command: server.command, args: server.args, env: { PATH: path, CLAUDE_CODE_SESSION_ID: session } });
    const alice = await peer({ name: 'alice', session: 'a1' });
    await pair(alice, bob, { a: 'alice', b: 'bob' });
    await alice.call('send_message', { to: 'bob', session, text: 'from the install test' });

    const hook = spawnSync('/bin/sh', ['-c', command], {
      input: JSON.stringify({ hook_event_name: 'Stop', session_id: session }),
      env: { PATH: path, HOME: root, INTERLINK_CONFIG_DIR: bob.config, INTERLINK_STATE_DIR: bob.state, INTERLINK_LOG: 'warn' },
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect({ status: hook.status, stdout: hook.stdout }, hook.stderr).toEqual({ status: 2, stdout: '' });
    expect(hook.stderr).toContain('receive_messages');
  });

  it('starts the server as codex/config.toml says, with only what Codex passes on', async () => {
    const server = codexServer(await readFile(join(REPO, 'codex', 'config.toml'), 'utf8'));
    // Codex gives a server HOME, PATH and TERM, the table's env, and the env_vars it lists.
    expect(server.envVars).toEqual(expect.arrayContaining(['INTERLINK_CONFIG_DIR', 'INTERLINK_STATE_DIR', 'INTERLINK_URL', 'INTERLINK_LOG']));
    const thread = randomUUID();
    const carol = await peer({ name: 'carol', session: 'ignored-in-codex-mode', command: server.command, args: server.args, env: { PATH: path, TERM: 'dumb', ...server.env } });
    expect(await carol.call('bind_codex_session', { thread_id: thread })).toMatchObject({ session_id: thread });
    expect(await carol.call('get_my_session_id')).toMatchObject({ session_id: thread });
    await expectSmallYoungGeneration(carol.pid()!);
    const argv = await argvOf(carol.pid()!);
    if (argv !== undefined) expect(argv.slice(1)).toEqual([join(installed.bin, 'interlink-mcp'), ...server.args]);
  });

  it.runIf(hasOpenssl)('passes on what a relay with a self-signed certificate needs, as `status` in the same shell has it', async () => {
    const server = codexServer(await readFile(join(REPO, 'codex', 'config.toml'), 'utf8'));
    expect(server.envVars).toEqual(expect.arrayContaining(['INTERLINK_TLS_CA', 'NODE_EXTRA_CA_CERTS', 'INTERLINK_NAME']));
    const certificate = makeCertificate(root, 'codex-relay');
    const tlsRelay = await startRelay({ args: ['--tls-cert', certificate.cert, '--tls-key', certificate.key] });
    const alice = await startPeer({ root, name: 'alice-tls', session: 'a1', relays: tlsRelay.url, env: { INTERLINK_TLS_CA: certificate.cert } });
    peers.push(alice);

    /** A person's shell that trusts the certificate by `trust`, and the Codex server started from it. */
    const codexThread = async (name: string, trust: Partial<Record<string, string>>) => {
      const home = join(root, name);
      const shell = {
        PATH: path,
        HOME: home,
        TERM: 'dumb',
        INTERLINK_URL: tlsRelay.url,
        INTERLINK_NAME: `${name}-announced`,
        INTERLINK_CONFIG_DIR: join(home, 'config'),
        INTERLINK_STATE_DIR: join(home, 'state'),
        ...trust,
      };
      // What the person checks first: the relay answers in this shell.
      const { stdout } = await run('interlink-mcp', ['status', '--json'], { env: shell });
      expect((JSON.parse(stdout) as { relays: unknown[] }).relays).toEqual([expect.objectContaining({ url: tlsRelay.url, answers: true })]);
      const started = await peer({ name, session: 'ignored-in-codex-mode', command: server.command, args: server.args, env: codexServerEnv(server, shell) });
      const thread = randomUUID();
      await started.call('bind_codex_session', { thread_id: thread });
      return { started, thread, name: shell.INTERLINK_NAME };
    };

    for (const trust of [{ INTERLINK_TLS_CA: certificate.cert }, { NODE_EXTRA_CA_CERTS: certificate.cert }]) {
      const carol = await codexThread(`carol-${Object.keys(trust)[0]!.toLowerCase()}`, trust);
      const { bKey } = await pair(alice, carol.started, { a: 'alice', b: 'carol' });
      // Announces again at once, now sealed for alice too.
      await carol.started.call('set_summary', { summary: 'reached over TLS' });
      // Alice, a peer, sees the thread on the TLS relay's roster under the name the shell set.
      const seen = await eventually(async () => {
        const { identities } = await alice.call<{ identities: { key: string; sessions: { session: string; name?: string }[] }[] }>('discover', { peer: 'carol' });
        return identities.find((i) => i.key === bKey)?.sessions.find((s) => s.session === carol.thread && s.name !== undefined);
      });
      expect(seen.name).toBe(carol.name);
      await alice.call('remove_peer', { petname: 'carol' });
    }
  });

  it('runs interlinked, which starts claude with the channel on', async () => {
    const host = join(root, 'host');
    await mkdir(host);
    await writeFile(join(host, 'claude'), '#!/bin/sh\necho "args:$*"\necho "channels:$INTERLINK_CHANNELS"\n', { mode: 0o755 });
    const { stdout } = await run('interlinked', ['--version'], { env: { PATH: [path, host].join(delimiter), HOME: root } });
    expect(stdout.split('\n')).toEqual(['args:--dangerously-load-development-channels plugin:interlink@interlink --version', 'channels:1', '']);
  });
});
