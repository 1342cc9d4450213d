/**
 * The plugin's files, and the Stop hook's guard run under sh with stand-in launchers. The
 * guard exists because an asyncRewake hook whose launch fails can re-wake the session in a
 * loop (anthropics/claude-code#96148): it must end with 2 only when the listener itself
 * reports notices (status 2 and the INTERLINK_NOTICES marker as its last stdout line).
 *
 * Needs no host CLI, so it runs under `npm test` as well as `npm run test:host`.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { toolsFor } from '../../src/mcp/tools.js';

const REPO = join(import.meta.dirname, '..', '..');

async function json(path: string): Promise<unknown> {
  return JSON.parse(await readFile(join(REPO, path), 'utf8'));
}

const commandHookSchema = z
  .object({ type: z.literal('command'), command: z.string(), async: z.boolean(), asyncRewake: z.boolean(), timeout: z.number() })
  .loose();
const mcpToolHookSchema = z.object({ type: z.literal('mcp_tool'), server: z.string(), tool: z.string(), input: z.record(z.string(), z.string()) }).strict();
const hooksSchema = z
  .object({ hooks: z.object({ Stop: z.array(z.object({ hooks: z.array(z.union([commandHookSchema, mcpToolHookSchema])) })) }).strict() })
  .loose();

async function stopHooks(): Promise<(z.infer<typeof commandHookSchema> | z.infer<typeof mcpToolHookSchema>)[]> {
  return hooksSchema.parse(await json('plugin/hooks/hooks.json')).hooks.Stop.flatMap((group) => group.hooks);
}

/** The listener's hook: the only command hook. */
async function stopHook(): Promise<z.infer<typeof commandHookSchema>> {
  const commands = (await stopHooks()).filter((h) => h.type === 'command');
  if (commands.length !== 1 || commands[0] === undefined) throw new Error(`expected one Stop command hook, found ${commands.length}`);
  return commands[0];
}

describe('plugin files', () => {
  it('name the plugin interlink@interlink at the package version', async () => {
    const { version } = z.object({ version: z.string() }).parse(await json('package.json'));
    expect(await json('plugin/.claude-plugin/plugin.json')).toMatchObject({ name: 'interlink', version, description: expect.any(String) });
    expect(await json('.claude-plugin/marketplace.json')).toMatchObject({
      name: 'interlink',
      owner: { name: expect.any(String) },
      plugins: [expect.objectContaining({ name: 'interlink', source: './plugin', version })],
    });
  });

  it('run the installed interlink-mcp from PATH, never npx, and pin no paths', async () => {
    const servers = z.object({ mcpServers: z.record(z.string(), z.object({ command: z.string(), args: z.array(z.string()), env: z.record(z.string(), z.string()) })) }).parse(await json('plugin/.mcp.json'));
    expect(servers.mcpServers).toEqual({
      interlink: { command: 'interlink-mcp', args: ['serve'], env: { INTERLINK_CHANNELS: '${INTERLINK_CHANNELS:-}', NODE_OPTIONS: '${NODE_OPTIONS:-} --max-semi-space-size=1' } },
    });
  });

  it('register an async, re-waking Stop hook with a one-hour timeout', async () => {
    const hook = await stopHook();
    expect(hook).toMatchObject({ async: true, asyncRewake: true, timeout: 3600 });
    expect(hook.command).toContain('out=$(INTERLINK_HOST_PID=$PPID interlink-mcp wait)');
    expect(hook.command).not.toContain('npx');
  });

  it('bind the server to the hooks\' session id at every Stop, with a tool the server has', async () => {
    const binds = (await stopHooks()).filter((h) => h.type === 'mcp_tool');
    expect(binds).toEqual([{ type: 'mcp_tool', server: 'plugin:interlink:interlink', tool: 'bind_claude_session', input: { session_id: '${session_id}' } }]);
    expect(toolsFor('claude').map((t) => t.name)).toContain('bind_claude_session');
  });
});

describe.skipIf(process.platform === 'win32')('the Stop hook guard', () => {
  let dir: string;
  let command: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'interlink-guard-'));
    command = (await stopHook()).command;
    // A stand-in `interlink-mcp`: records its arguments and stdin, then behaves as $LISTENER says.
    await writeFile(join(dir, 'interlink-mcp'), '#!/bin/sh\nprintf "%s" "$*" > "$GUARD_DIR/argv"\ncat > "$GUARD_DIR/stdin"\neval "$LISTENER"\n', { mode: 0o755 });
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const shells = ['/bin/sh', '/bin/bash', '/bin/dash'].filter((s) => existsSync(s));

  function runHook(shell: string, listener: string | undefined): { status: number | null; stdout: string; stderr: string } {
    const path = listener === undefined ? join(dir, 'missing') : `${dir}:/usr/bin:/bin`;
    const result = spawnSync(shell, ['-c', command], {
      input: '{"hook_event_name":"Stop","session_id":"s1"}',
      env: { PATH: path, HOME: dir, GUARD_DIR: dir, LISTENER: listener ?? '' },
      encoding: 'utf8',
      timeout: 10_000,
    });
    return { status: result.status, stdout: result.stdout, stderr: result.stderr };
  }

  const cases: [string, string | undefined, number][] = [
    ['notices: marker, then exit 2', 'echo "notice n1" >&2; echo INTERLINK_NOTICES; exit 2', 2],
    ['other output before the marker', 'echo "node warning"; echo INTERLINK_NOTICES; exit 2', 2],
    ['exit 2 without the marker (a launcher failure)', 'echo "npm error" >&2; exit 2', 0],
    ['the marker, but not last', 'echo INTERLINK_NOTICES; echo more; exit 2', 0],
    ['the marker with exit 0', 'echo INTERLINK_NOTICES; exit 0', 0],
    ['a marker look-alike', 'echo INTERLINK_NOTICES_X; exit 2', 0],
    ['nothing to report', 'exit 0', 0],
    ['the listener fails', 'exit 1', 0],
    ['a usage error (old package without wait)', 'exit 64', 0],
    ['killed', 'kill -9 $$', 0],
    ['interlink-mcp not installed (not on PATH)', undefined, 0],
  ];

  for (const shell of shells) {
    it.each(cases)(`${shell}: %s → exit %i`, (_name, listener, expected) => {
      expect(runHook(shell, listener).status).toBe(expected);
    });

    it(`${shell}: passes the Stop payload and the notices through, and keeps stdout for itself`, async () => {
      const result = runHook(shell, 'echo "Interlink: call receive_messages notification_id=n1" >&2; echo INTERLINK_NOTICES; exit 2');
      expect(result).toEqual({ status: 2, stdout: '', stderr: 'Interlink: call receive_messages notification_id=n1\n' });
      expect(await readFile(join(dir, 'argv'), 'utf8')).toBe('wait');
      expect(JSON.parse(await readFile(join(dir, 'stdin'), 'utf8'))).toEqual({ hook_event_name: 'Stop', session_id: 's1' });
    });
  }
});
