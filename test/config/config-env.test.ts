/**
 * The configuration (src/config/env.ts): every INTERLINK_* variable parsed once, each
 * value accepted before this module existed still accepted, each refused value one error
 * naming the variable; README's environment table is the schema's; no other module reads
 * the variables; and the session rule shared by the server and the listener.
 */
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { pinnedSession, serverSession } from '../../src/agent/session.js';
import { crashPointTarget, DEFAULT_LOCAL_RELAY, faultPointSpec, loadConfig, VARIABLES, type VariableName } from '../../src/config/env.js';
import { InterlinkError } from '../../src/errors.js';
import { expectOneLine, expectSuccess, runCli, userEnv } from '../helpers/cli.js';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const NAMES = Object.keys(VARIABLES) as VariableName[];

/** The error `loadConfig` throws for `env`; fails the test if it parses. */
function refusal(env: Record<string, string>): InterlinkError {
  try {
    loadConfig(env);
  } catch (err) {
    expect(err).toBeInstanceOf(InterlinkError);
    return err as InterlinkError;
  }
  throw new Error(`accepted ${JSON.stringify(env)}`);
}

describe('README environment table', () => {
  /** The rows of the table whose header is `| variable | …`, up to the first blank line. */
  async function readmeRows(): Promise<string[]> {
    const lines = (await readFile(join(REPO, 'README.md'), 'utf8')).split('\n');
    const header = lines.findIndex((line) => line.startsWith('| variable |'));
    expect(header, 'README has an environment table').toBeGreaterThan(0);
    const end = lines.findIndex((line, i) => i > header && !line.startsWith('|'));
    return lines.slice(header + 2, end);
  }

  it('lists exactly the variables of the schema, each with its meaning, values and default', async () => {
    const expected = NAMES.map((name) => `| \`${name}\` | ${VARIABLES[name].meaning} | ${VARIABLES[name].accepts} | ${VARIABLES[name].default} |`);
    // On failure the expected rows are the ones to paste into README.md.
    expect(await readmeRows()).toEqual(expected);
  });

  it('mentions no INTERLINK_ variable anywhere that the schema does not have', async () => {
    const readme = await readFile(join(REPO, 'README.md'), 'utf8');
    const unknown = [...new Set(readme.match(/INTERLINK_[A-Z_]+/g))].filter((name) => !NAMES.includes(name as VariableName));
    expect(unknown).toEqual([]);
  });
});

describe('reads of the environment', () => {
  it('happen in src/config/env.ts only', async () => {
    const files = (await readdir(join(REPO, 'src'), { recursive: true })).filter((file) => file.endsWith('.ts'));
    expect(files.length).toBeGreaterThan(50);
    const readers: string[] = [];
    for (const file of files) {
      const text = await readFile(join(REPO, 'src', file), 'utf8');
      if (/env\.INTERLINK_|env\[['"`]INTERLINK_/.test(text)) readers.push(file);
    }
    expect(readers).toEqual([join('config', 'env.ts')]);
  });
});

describe('loadConfig', () => {
  it('gives the defaults for an empty environment, under the XDG roots', () => {
    const config = loadConfig({ XDG_CONFIG_HOME: '/x/config', XDG_STATE_HOME: '/x/state' });
    expect(config).toEqual({
      configDir: '/x/config/interlink',
      keyPath: '/x/config/interlink/id.key',
      peersPath: '/x/config/interlink/peers.json',
      stateDir: '/x/state/interlink',
      relays: undefined,
      localRelay: DEFAULT_LOCAL_RELAY,
      name: undefined,
      session: undefined,
      claudeSession: undefined,
      mode: 'claude',
      channels: false,
      codexBin: 'codex',
      log: undefined,
      hostPid: undefined,
      benchUnsealed: false,
    });
  });

  it('treats every variable set to the empty string as unset', () => {
    const empty = Object.fromEntries(NAMES.map((name) => [name, '']));
    const base = { XDG_CONFIG_HOME: '/x/config', XDG_STATE_HOME: '/x/state' };
    expect(loadConfig({ ...base, ...empty, CLAUDE_CODE_SESSION_ID: '' })).toEqual(loadConfig(base));
    expect(crashPointTarget({ INTERLINK_CRASH_AT: '' })).toBeUndefined();
  });

  it('takes the explicit roots and files over the XDG ones', () => {
    const config = loadConfig({ XDG_CONFIG_HOME: '/x/config', XDG_STATE_HOME: '/x/state', INTERLINK_CONFIG_DIR: 'rel/cfg', INTERLINK_STATE_DIR: '/s', INTERLINK_PEERS: '/p.json' });
    expect(config).toMatchObject({ configDir: 'rel/cfg', keyPath: join('rel/cfg', 'id.key'), peersPath: '/p.json', stateDir: '/s' });
    expect(loadConfig({ INTERLINK_KEY: '/k/id.key' }).keyPath).toBe('/k/id.key');
  });

  it('keeps accepting every value the modules accepted before', () => {
    const cases: [Record<string, string>, Record<string, unknown>][] = [
      [{ INTERLINK_URL: ' ws://a:1 , ,wss://b/x ' }, { relays: ['ws://a:1', 'wss://b/x'] }],
      [{ INTERLINK_URL: '   ' }, { relays: undefined }],
      [{ INTERLINK_LOCAL_RELAY: ' 127.0.0.1:9555 ' }, { localRelay: '127.0.0.1:9555' }],
      [{ INTERLINK_NAME: '  alice  ' }, { name: 'alice' }],
      [{ INTERLINK_NAME: 'n'.repeat(300) }, { name: 'n'.repeat(128) }],
      [{ INTERLINK_SESSION: 'pinned' }, { session: 'pinned' }],
      [{ CLAUDE_CODE_SESSION_ID: '6a1f0c2e-claude' }, { claudeSession: '6a1f0c2e-claude' }],
      [{ INTERLINK_MODE: 'codex' }, { mode: 'codex' }],
      [{ INTERLINK_MODE: 'claude' }, { mode: 'claude' }],
      [{ INTERLINK_CHANNELS: '1' }, { channels: true }],
      [{ INTERLINK_CHANNELS: '0' }, { channels: false }],
      [{ INTERLINK_CODEX_BIN: '/opt/codex/bin/codex' }, { codexBin: '/opt/codex/bin/codex' }],
      [{ INTERLINK_LOG: 'DEBUG' }, { log: 'debug' }],
      [{ INTERLINK_LOG: 'info' }, { log: 'info' }],
      [{ INTERLINK_LOG: 'Error' }, { log: 'error' }],
      [{ INTERLINK_LOG: 'silent' }, { log: 'silent' }],
      [{ INTERLINK_HOST_PID: '4242' }, { hostPid: 4242 }],
    ];
    for (const [env, expected] of cases) expect(loadConfig(env), JSON.stringify(env)).toMatchObject(expected);
    expect(crashPointTarget({ INTERLINK_CRASH_AT: 'listener.after_output' })).toBe('listener.after_output');
    expect(crashPointTarget({})).toBeUndefined();
  });

  it('refuses a bad value with one sentence naming the variable, the value and what it takes', () => {
    const cases: [VariableName, string][] = [
      ['INTERLINK_MODE', 'banana'],
      ['INTERLINK_MODE', 'Codex'],
      ['INTERLINK_LOG', 'loud'],
      ['INTERLINK_CHANNELS', 'yes'],
      ['INTERLINK_CHANNELS', 'true'],
      ['INTERLINK_HOST_PID', 'abc'],
      ['INTERLINK_HOST_PID', '0'],
      ['INTERLINK_HOST_PID', '-12'],
      ['INTERLINK_HOST_PID', '1234567890123456'],
      ['INTERLINK_SESSION', '../elsewhere'],
      ['INTERLINK_SESSION', 'a/b'],
      ['INTERLINK_SESSION', ' padded'],
      ['INTERLINK_FAULT_AT', 'mailbox.append.sync:EWHAT'],
      ['INTERLINK_FAULT_AT', 'mailbox.append.sync*0'],
      ['INTERLINK_FAULT_AT', 'Mailbox.append.sync'],
    ];
    for (const [name, value] of cases) {
      const err = refusal({ [name]: value });
      expect(err.code).toBe('bad_config');
      expect(err.message.startsWith(`${name}=${JSON.stringify(value)} is not accepted`), err.message).toBe(true);
      expect(err.message).toContain(`it takes ${VARIABLES[name].accepts.replaceAll('`', '')}`);
      expect(err.message).not.toContain('\n');
    }
  });

  it('reads INTERLINK_FAULT_AT into the fault it asks for; one it cannot read is no fault outside the CLI', () => {
    expect(faultPointSpec({})).toBeUndefined();
    expect(faultPointSpec({ INTERLINK_FAULT_AT: '' })).toBeUndefined();
    expect(faultPointSpec({ INTERLINK_FAULT_AT: 'outbox.append.write' })).toEqual({ point: 'outbox.append.write', from: 1, code: 'EIO', count: undefined, whileFile: undefined });
    expect(faultPointSpec({ INTERLINK_FAULT_AT: 'relay.append.sync@3:ENOSPC*2 while /tmp/a b' })).toEqual({ point: 'relay.append.sync', from: 3, code: 'ENOSPC', count: 2, whileFile: '/tmp/a b' });
    expect(faultPointSpec({ INTERLINK_FAULT_AT: 'atomic.write:EROFS' })).toMatchObject({ point: 'atomic.write', code: 'EROFS' });
    expect(faultPointSpec({ INTERLINK_FAULT_AT: 'atomic.write:EWHAT' })).toBeUndefined();
  });

  it('says why a session id is refused', () => {
    expect(refusal({ INTERLINK_SESSION: '../elsewhere' }).message).toContain('(it contains "..")');
  });

  it('names every refused variable in one error', () => {
    const err = refusal({ INTERLINK_MODE: 'banana', INTERLINK_LOG: 'loud', INTERLINK_URL: 'ws://fine' });
    expect(err.message).toMatch(/^INTERLINK_MODE="banana" is not accepted.* INTERLINK_LOG="loud" is not accepted/);
    expect(err.details).toEqual({ variables: ['INTERLINK_MODE', 'INTERLINK_LOG'] });
  });
});

describe('the session rule', () => {
  const none = { session: undefined, claudeSession: undefined };

  it('takes --session, then INTERLINK_SESSION, then CLAUDE_CODE_SESSION_ID, else generates one', () => {
    const all = { session: 'pinned', claudeSession: 'claude-id' };
    expect(serverSession('flag', all)).toEqual({ session: 'flag', source: '--session' });
    expect(serverSession(undefined, all)).toEqual({ session: 'pinned', source: 'INTERLINK_SESSION' });
    expect(serverSession('', all)).toEqual({ session: 'pinned', source: 'INTERLINK_SESSION' });
    expect(serverSession(undefined, { ...none, claudeSession: 'claude-id' })).toEqual({ session: 'claude-id', source: 'CLAUDE_CODE_SESSION_ID' });
    expect(serverSession(undefined, none)).toMatchObject({ session: expect.stringMatching(/^[0-9a-f]{8}$/), source: 'generated' });
  });

  it('pins only what a person chose: the listener falls back to the Stop payload itself', () => {
    expect(pinnedSession('flag', { session: 'pinned' })).toEqual({ session: 'flag', source: '--session' });
    expect(pinnedSession(undefined, { session: 'pinned' })).toEqual({ session: 'pinned', source: 'INTERLINK_SESSION' });
    expect(pinnedSession(undefined, { session: undefined })).toBeUndefined();
  });

  it('refuses the reserved `cli` session from every source, naming the source', () => {
    for (const [flag, config, source] of [
      ['cli', none, '--session'],
      [undefined, { ...none, session: 'cli' }, 'INTERLINK_SESSION'],
      [undefined, { ...none, claudeSession: 'cli' }, 'CLAUDE_CODE_SESSION_ID'],
    ] as const) {
      expect(() => serverSession(flag, config)).toThrow(expect.objectContaining({ code: 'usage', message: expect.stringMatching(new RegExp(`^${source}: the session id cli is reserved`)) }));
    }
    expect(() => pinnedSession(undefined, { session: 'cli' })).toThrow(/INTERLINK_SESSION: the session id cli is reserved/);
  });

  it('refuses an unsafe --session or CLAUDE_CODE_SESSION_ID', () => {
    expect(() => serverSession('../x', none)).toThrow(expect.objectContaining({ code: 'bad_name' }));
    expect(() => serverSession(undefined, { ...none, claudeSession: 'a/b' })).toThrow(expect.objectContaining({ code: 'bad_name' }));
  });
});

describe('the command line', () => {
  let root: string;
  const env = (extra: Record<string, string>) => userEnv({ root, configDir: join(root, 'config'), stateDir: join(root, 'state') }, extra);

  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), 'interlink-config-'));
  });

  afterEach(async () => {
    await rm(root, { recursive: true, force: true });
  });

  const errorDocument = z.object({ error: z.object({ code: z.string(), message: z.string() }) });

  it('stops at startup on a bad value: exit 64, one line naming the variable, and the JSON error with --json', async () => {
    const run = await runCli(['whoami', '--json'], env({ INTERLINK_MODE: 'banana' }));
    const line = expectOneLine(run, 64, 'whoami');
    expect(line).toBe(`interlink-mcp whoami: INTERLINK_MODE="banana" is not accepted: it takes claude or codex (or leave it unset).\n`);
    expect(errorDocument.parse(JSON.parse(run.stdout))).toEqual({ error: { code: 'bad_config', message: line.slice('interlink-mcp whoami: '.length).trimEnd() } });
  });

  it('stops the Stop-hook listener the same way, before it reads anything', async () => {
    const run = await runCli(['wait'], env({ INTERLINK_LOG: 'loud' }));
    expect(expectOneLine(run, 64, 'wait')).toMatch(/^interlink-mcp wait: INTERLINK_LOG="loud" is not accepted: /);
    expect(run.stdout).toBe('');
  });

  it("refuses the pair command's session for the listener too, as a usage error", async () => {
    const run = await runCli(['wait'], env({ INTERLINK_SESSION: 'cli' }));
    expect(expectOneLine(run, 64, 'wait')).toMatch(/^interlink-mcp wait: INTERLINK_SESSION: the session id cli is reserved for `interlink-mcp pair`/);
  });

  it('still runs with values spelled as before (upper-case level, 0, claude)', async () => {
    const out = expectSuccess(await runCli(['keygen', '--json'], env({ INTERLINK_LOG: 'WARN', INTERLINK_CHANNELS: '0', INTERLINK_MODE: 'claude', INTERLINK_URL: '' })));
    expect(JSON.parse(out)).toMatchObject({ path: join(root, 'config', 'id.key') });
  });
});
