/**
 * `interlink-mcp audience` as a user meets it: the built binary in a child process, with
 * the config and state roots pointed at a temporary directory. Exit codes: 0 success, 1
 * failure with one line on stderr, 64 usage error; --json on every action.
 */
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { generateSigningKey } from '../../src/identity/ed25519.js';
import { expectOneLine, expectOneLineFailure, expectSuccess, mapLimit, runCli, userEnv, type Run } from '../helpers/cli.js';

let root: string;
let configDir: string;
let audiencesFile: string;

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-audience-cli-'));
  configDir = join(root, 'config');
  audiencesFile = join(configDir, 'audiences.json');
});

afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

function cli(args: string[], extraEnv: Record<string, string> = {}): Promise<Run> {
  return runCli(args, userEnv({ root, configDir, stateDir: join(root, 'state') }, extraEnv));
}

const newKey = (): string => encodeBase64url(generateSigningKey().publicKey);

async function peers(...petnames: string[]): Promise<void> {
  for (const petname of petnames) expectSuccess(await cli(['peers', 'add', petname, newKey()]));
}

const errorDocument = z.object({ error: z.object({ code: z.string(), message: z.string() }).strict() }).strict();

describe('audience', () => {
  it('adds, lists and removes, for people', async () => {
    expect(expectSuccess(await cli(['audience', 'list']))).toBe('no audiences yet (add one with `interlink-mcp audience add <name> <petname>...`)\n');
    await peers('alice', 'bob', 'carol');
    expect(expectSuccess(await cli(['audience', 'add', 'team', 'bob', 'alice']))).toBe('added alice, bob to team (2 of 32 members)\n');
    expect(expectSuccess(await cli(['audience', 'add', 'team', 'bob']))).toBe('team already has them; nothing changed (2 of 32 members)\n');
    expect(expectSuccess(await cli(['audience', 'add', 'ops', 'carol']))).toBe('added carol to ops (1 of 32 members)\n');
    expect(expectSuccess(await cli(['audience', 'list']))).toBe('ops  carol\nteam  alice, bob\n');
    expect(JSON.parse(await readFile(audiencesFile, 'utf8'))).toEqual({ team: ['alice', 'bob'], ops: ['carol'] });
    expect(expectSuccess(await cli(['audience', 'remove', 'team', 'alice']))).toBe('removed alice from team (1 member left)\n');
    expect(expectSuccess(await cli(['audience', 'remove', 'ops', 'carol']))).toBe('removed carol from ops, its last members: the audience is gone\n');
    expect(expectSuccess(await cli(['audience', 'remove', 'team']))).toBe('removed the audience team\n');
    expect(expectSuccess(await cli(['audience', 'list']))).toContain('no audiences yet');
  });

  it('adds, lists and removes, as JSON', async () => {
    await peers('alice', 'bob');
    expect(JSON.parse(expectSuccess(await cli(['audience', 'add', 'team', 'alice', 'bob', '--json'])))).toEqual({ name: 'team', added: ['alice', 'bob'], members: ['alice', 'bob'] });
    expect(JSON.parse(expectSuccess(await cli(['audience', 'list', '--json'])))).toEqual({ audiences: [{ name: 'team', members: ['alice', 'bob'] }] });
    expect(JSON.parse(expectSuccess(await cli(['audience', 'remove', 'team', 'bob', '--json'])))).toEqual({ name: 'team', removed: ['bob'], members: ['alice'] });
    expect(JSON.parse(expectSuccess(await cli(['audience', 'remove', '--json', 'team'])))).toEqual({ name: 'team', removed: ['alice'], members: [] });
    expect(JSON.parse(expectSuccess(await cli(['audience', 'list', '--json'])))).toEqual({ audiences: [] });
  });

  it('lives beside the peers.json INTERLINK_PEERS names', async () => {
    const elsewhere = join(root, 'shared', 'peers.json');
    expectSuccess(await cli(['peers', 'add', 'alice', newKey()], { INTERLINK_PEERS: elsewhere }));
    expectSuccess(await cli(['audience', 'add', 'team', 'alice'], { INTERLINK_PEERS: elsewhere }));
    expect(JSON.parse(await readFile(join(root, 'shared', 'audiences.json'), 'utf8'))).toEqual({ team: ['alice'] });
    expect((await readdir(join(root, 'shared'))).sort()).toEqual(['audiences.json', 'peers.json']);
  });

  it('`peers remove` takes the peer out of every audience and says so', async () => {
    await peers('alice', 'bob');
    expectSuccess(await cli(['audience', 'add', 'team', 'alice', 'bob']));
    expectSuccess(await cli(['audience', 'add', 'solo', 'bob']));
    expect(expectSuccess(await cli(['peers', 'remove', 'bob']))).toBe('removed bob (and from the audiences solo, team)\n');
    expect(JSON.parse(await readFile(audiencesFile, 'utf8'))).toEqual({ team: ['alice'] });
    expect(JSON.parse(expectSuccess(await cli(['peers', 'remove', 'alice', '--json'])))).toEqual({ petname: 'alice', key: expect.any(String), outcome: 'removed', audiences: ['team'] });
    expect(JSON.parse(await readFile(audiencesFile, 'utf8'))).toEqual({});
  });

  it('`peers remove` killed between its two writes: the member shows as no longer a peer, and a new peer of that petname does not inherit it', async () => {
    await peers('alice', 'bob');
    expectSuccess(await cli(['audience', 'add', 'team', 'alice', 'bob']));
    const killed = await cli(['peers', 'remove', 'bob'], { INTERLINK_CRASH_AT: 'peers.remove.after_peers' });
    expect(killed.code).toBeNull();
    expect(Object.keys(JSON.parse(await readFile(join(configDir, 'peers.json'), 'utf8')) as object)).toEqual(['alice']);
    expect(JSON.parse(await readFile(audiencesFile, 'utf8'))).toEqual({ team: ['alice', 'bob'] });
    expect(expectSuccess(await cli(['audience', 'list']))).toBe('team  alice, bob (no longer a peer)\n');
    expectSuccess(await cli(['peers', 'add', 'bob', newKey()]));
    expect(JSON.parse(await readFile(audiencesFile, 'utf8'))).toEqual({ team: ['alice'] });
  });

  it('marks a member that is no longer a peer (a removal cut short, a hand edit)', async () => {
    await peers('alice');
    await writeFile(audiencesFile, JSON.stringify({ team: ['alice', 'ghost'] }));
    expect(expectSuccess(await cli(['audience', 'list']))).toBe('team  alice, ghost (no longer a peer)\n');
    expect(JSON.parse(expectSuccess(await cli(['audience', 'list', '--json'])))).toEqual({ audiences: [{ name: 'team', members: ['alice', 'ghost'], not_peers: ['ghost'] }] });
    expectSuccess(await cli(['audience', 'remove', 'team', 'ghost']));
    expect(JSON.parse(await readFile(audiencesFile, 'utf8'))).toEqual({ team: ['alice'] });
  });

  it('exits 64 on usage errors and 1 on failures, one line each, as --json too, leaving the files as they were', async () => {
    await peers('alice', 'bob');
    expectSuccess(await cli(['audience', 'add', 'team', 'alice']));
    const before = await readFile(audiencesFile, 'utf8');
    const cases: Array<[string[], number, string]> = [
      [['audience'], 64, 'usage'],
      [['audience', 'frob'], 64, 'usage'],
      [['audience', 'list', 'extra'], 64, 'usage'],
      [['audience', 'add'], 64, 'usage'],
      [['audience', 'add', 'team'], 64, 'usage'],
      [['audience', 'add', '--bogus', 'team', 'bob'], 64, 'usage'],
      [['audience', 'add', '../x', 'bob'], 64, 'usage'],
      [['audience', 'add', 'self', 'bob'], 64, 'usage'],
      [['audience', 'add', 'team', 'self'], 64, 'usage'],
      [['audience', 'remove'], 64, 'usage'],
      [['audience', 'add', 'team', 'mallory'], 1, 'unknown_peer'],
      [['audience', 'add', 'bob', 'alice'], 1, 'audience_conflict'],
      [['audience', 'add', 'Team', 'alice'], 1, 'audience_conflict'],
      [['audience', 'remove', 'ops'], 1, 'unknown_audience'],
      [['audience', 'remove', 'team', 'bob'], 1, 'unknown_audience'],
      [['peers', 'add', 'team', newKey()], 1, 'peer_conflict'],
    ];
    const runs = await mapLimit(cases, 4, ([args]) => cli(args));
    const jsonRuns = await mapLimit(cases, 4, ([args]) => cli([...args, '--json']));
    for (const [i, [args, code, errorCode]] of cases.entries()) {
      const what = args.join(' ');
      const line = expectOneLine(runs[i]!, code, what);
      expect(runs[i]!.stdout, what).toBe('');
      expect(line.startsWith(`interlink-mcp ${args[0]}: `), line).toBe(true);
      const json = jsonRuns[i]!;
      expectOneLine(json, code, `${what} --json`);
      expect(errorDocument.parse(JSON.parse(json.stdout)).error.code, what).toBe(errorCode);
    }
    expect(await readFile(audiencesFile, 'utf8')).toBe(before);
  });

  it('refuses to list a damaged audiences.json (exit 1, the file left), and an add moves it aside and says where', async () => {
    await peers('alice');
    await writeFile(audiencesFile, '{"team": "alice"}');
    const err = expectOneLineFailure(await cli(['audience', 'list']));
    expect(err).toContain(`${audiencesFile} is damaged: line 1: expected a list of petnames for "team", found a string`);
    expect(err).toContain('left as it is');
    const json = await cli(['audience', 'list', '--json']);
    expect(json.code).toBe(1);
    expect(errorDocument.parse(JSON.parse(json.stdout)).error.code).toBe('corrupt');
    const added = await cli(['audience', 'add', 'team', 'alice']);
    expect(added.code).toBe(0);
    expect(added.stdout).toBe('added alice to team (1 of 32 members)\n');
    expect(added.stderr).toMatch(/^interlink-mcp audience: .*audiences\.json is damaged: .*The original was moved to .*audiences\.json\.corrupt-/);
    expect(JSON.parse(await readFile(audiencesFile, 'utf8'))).toEqual({ team: ['alice'] });
  });

  it('shows in status once there are some: each with its members that are peers, and a damaged file fails status', async () => {
    const offline = { INTERLINK_URL: 'ws://127.0.0.1:9' };
    await peers('alice', 'bob');
    expect(expectSuccess(await cli(['status'], offline))).not.toContain('audiences');
    expect(JSON.parse(expectSuccess(await cli(['status', '--json'], offline)))).toMatchObject({ audiences: 0 });
    await writeFile(audiencesFile, JSON.stringify({ team: ['alice', 'bob', 'ghost'], ops: ['bob'] }));
    expect(expectSuccess(await cli(['status'], offline))).toContain('\naudiences    ops (1), team (2)\n');
    expect(JSON.parse(expectSuccess(await cli(['status', '--json'], offline)))).toMatchObject({ audiences: 2 });
    await writeFile(audiencesFile, '[]');
    const damaged = await cli(['status'], offline);
    expect(damaged.code).toBe(1);
    expect(damaged.stdout).toContain(`audiences    unreadable: ${audiencesFile} is damaged (see below)`);
    expect(damaged.stderr).toContain(`${audiencesFile} is damaged`);
  });

  it('takes --help on every action, does nothing else, and is in the command list', async () => {
    await mkdir(configDir);
    const runs = await mapLimit([['audience', '--help'], ['audience', 'add', '-h'], ['--help']], 3, (args) => cli(args));
    expect(runs[0]!.stdout.startsWith('usage: interlink-mcp audience list')).toBe(true);
    expect(runs[0]!.stdout).toContain('at most 32 members');
    expect(runs[0]!.stdout).toContain('at most\n256 audiences');
    expect(runs[1]!.stdout).toBe(runs[0]!.stdout);
    expect(runs[2]!.stdout).toMatch(/\n {2}audience +list, add to or remove audiences/);
    expect(await readdir(configDir)).toEqual([]);
  });
});
