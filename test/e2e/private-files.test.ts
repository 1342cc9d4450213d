/**
 * Local files are private: under umask 022 everything a server and the CLI create under
 * the config and state roots is 0600 (files) or 0700 (directories); loose modes left
 * from before are tightened with a warning; a symlink planted in place of a session's
 * inbox is not followed; a flag that names a file cannot reach outside the state root.
 */
import { chmod, lstat, mkdir, mkdtemp, readFile, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runCli, userEnv } from '../helpers/cli.js';
import { eventually, pair, peerPool } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { startRelay } from '../helpers/spawn-relay.js';

let root: string;
const pool = peerPool(() => root);
let umask: number;

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-private-'));
  // Children inherit the umask: the common default, which makes new files world-readable.
  umask = process.umask(0o022);
});
afterEach(async () => {
  process.umask(umask);
  await pool.closeAll();
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

const peer = pool.start;

/** Every file and directory below `dir` (not following links), with its permission bits. */
async function modes(dir: string): Promise<Map<string, { mode: number; directory: boolean; link: boolean }>> {
  const found = new Map<string, { mode: number; directory: boolean; link: boolean }>();
  for (const name of await readdir(dir, { recursive: true })) {
    // A running server's lock or temp file may be gone by the time it is looked at.
    const info = await lstat(join(dir, name)).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return undefined;
      throw err;
    });
    if (info !== undefined) found.set(name, { mode: info.mode & 0o777, directory: info.isDirectory(), link: info.isSymbolicLink() });
  }
  return found;
}

describe('file modes under umask 022', () => {
  it('a message exchange leaves only 0600 files and 0700 directories under both roots', async () => {
    const relay = await startRelay();
    const alice = await peer('alice', 'a1', relay.url);
    const bob = await peer('bob', 'b1', relay.url);
    await pair(alice, bob);
    const sent = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', text: 'private' });
    await eventually(async () => ((await bob.call<{ messages: { msg_id: string }[] }>('receive_messages')).messages.some((m) => m.msg_id === sent.msg_id) ? true : undefined));
    for (const p of [alice, bob]) {
      for (const dir of [p.config, p.state]) {
        const all = await modes(dir);
        expect(all.size).toBeGreaterThan(0);
        for (const [name, { mode, directory }] of all) expect(mode.toString(8), `${dir}/${name}`).toBe(directory ? '700' : '600');
      }
    }
  });

  it('tightens loose modes left from before, and says so', async () => {
    const relay = await startRelay();
    const first = await peer('carol', 'c1', relay.url);
    await first.call('set_summary', { summary: 'x' });
    await pool.stop(first);
    const mailboxes = join(root, 'carol', 'state', 'mailbox');
    await mkdir(join(mailboxes, 'loose'), { recursive: true });
    await writeFile(join(mailboxes, 'loose', 'old.json'), '{}');
    await chmod(join(mailboxes, 'loose', 'old.json'), 0o644);
    await chmod(join(mailboxes, 'loose'), 0o755);
    const again = await peer('carol', 'c1', relay.url);
    await again.call('get_my_session_id');
    expect((await lstat(join(mailboxes, 'loose', 'old.json'))).mode & 0o777).toBe(0o600);
    expect((await lstat(join(mailboxes, 'loose'))).mode & 0o777).toBe(0o700);
    expect(again.stderr()).toContain('permissions_tightened');
  });
});

describe('links and names under the state root', () => {
  it('does not follow a symlink planted in place of a session inbox', async () => {
    const relay = await startRelay();
    const state = join(root, 'bob', 'state');
    const elsewhere = join(root, 'elsewhere.txt');
    await writeFile(elsewhere, 'untouched\n');
    await mkdir(join(state, 'inbox'), { recursive: true });
    await symlink(elsewhere, join(state, 'inbox', 'b1.jsonl'));
    const alice = await peer('alice', 'a1', relay.url);
    const bob = await peer('bob', 'b1', relay.url);
    await pair(alice, bob);
    const sent = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', text: 'wake up' });
    // The message is stored and readable; the notice could not be written through the link.
    await eventually(async () => ((await bob.call<{ messages: { msg_id: string }[] }>('receive_messages')).messages.some((m) => m.msg_id === sent.msg_id) ? true : undefined));
    await eventually(async () => (bob.stderr().includes('ELOOP') ? true : undefined), 15_000, 'the refused notice in the log');
    expect(await readFile(elsewhere, 'utf8')).toBe('untouched\n');
  });

  it('refuses `inbox --session` that would leave the state root', async () => {
    const dirs = { root, configDir: join(root, 'me', 'config'), stateDir: join(root, 'me', 'state') };
    expect((await runCli(['keygen'], userEnv(dirs))).code).toBe(0);
    for (const session of ['../../x', 'a/b', '..']) {
      const run = await runCli(['inbox', '--session', session], userEnv(dirs));
      expect(run.code, session).toBe(64);
      expect(run.stderr).toContain('is not a session id');
    }
  });
});
