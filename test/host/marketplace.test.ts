/**
 * The repository as a Claude Code marketplace: `claude plugin marketplace add <checkout>`
 * and `claude plugin install interlink@interlink` with the pinned CLI, in a fresh config
 * directory, offline. Runs under `npm run test:host` only.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { CLAUDE, OFFLINE_CLAUDE_ENV, PLUGIN_DIR, REPO } from './setup.js';

const run = promisify(execFile);
const enabled = process.env.INTERLINK_HOST_TESTS === '1';

const installedSchema = z.array(
  z.object({ id: z.string(), version: z.string(), enabled: z.boolean(), installPath: z.string(), mcpServers: z.record(z.string(), z.unknown()).optional() }).loose(),
);

describe.runIf(enabled)('the interlink marketplace', () => {
  let home: string;
  let env: Record<string, string>;

  beforeAll(async () => {
    home = await mkdtemp(join(tmpdir(), 'interlink-marketplace-'));
    env = { PATH: process.env.PATH ?? '', HOME: home, CLAUDE_CONFIG_DIR: join(home, '.claude'), TERM: 'dumb', ...OFFLINE_CLAUDE_ENV };
  });
  afterAll(async () => {
    await rm(home, { recursive: true, force: true });
  });

  async function claude(...args: string[]): Promise<string> {
    const { stdout } = await run(CLAUDE, args, { env, cwd: home, timeout: 60_000 });
    return stdout;
  }

  it('installs interlink@interlink from a checkout, with the plugin files as they are here', async () => {
    await claude('plugin', 'marketplace', 'add', REPO);
    await claude('plugin', 'install', 'interlink@interlink');
    const installed = installedSchema.parse(JSON.parse(await claude('plugin', 'list', '--json')));
    const { version } = z.object({ version: z.string() }).parse(JSON.parse(await readFile(join(REPO, 'package.json'), 'utf8')));
    const mcp = z.object({ mcpServers: z.record(z.string(), z.unknown()) }).parse(JSON.parse(await readFile(join(PLUGIN_DIR, '.mcp.json'), 'utf8')));

    expect(installed).toEqual([expect.objectContaining({ id: 'interlink@interlink', version, enabled: true, mcpServers: mcp.mcpServers })]);
    const hooks = (dir: string) => readFile(join(dir, 'hooks', 'hooks.json'), 'utf8');
    expect(await hooks(installed[0]!.installPath)).toBe(await hooks(PLUGIN_DIR));
  });
});
