/**
 * `status` and the mailbox's bounds, as a person runs it: the built binary against state
 * files written the way a running session writes them (a mailbox whose bound refused a
 * peer, a replay index at its limit).
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mailboxPath, replayPath } from '../../src/config/layout.js';
import { Mailbox } from '../../src/mailbox/mailbox.js';
import { MAX_CLAIMS } from '../../src/replay/rules.js';
import { runCli, userEnv } from '../helpers/cli.js';
import { freePort } from '../helpers/spawn-relay.js';
import { newIdentity } from '../helpers/fixtures.js';
import { signEnvelope } from '../../src/envelope/sign.js';

let root: string;
let env: NodeJS.ProcessEnv;

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-status-bounds-'));
  // A relay address nobody listens on: status only probes it.
  env = userEnv({ root, configDir: join(root, 'config'), stateDir: join(root, 'state') }, { INTERLINK_URL: `ws://127.0.0.1:${await freePort()}` });
  await mkdir(join(root, 'config'), { recursive: true });
});
afterEach(() => rm(root, { recursive: true, force: true }));

async function cli(args: string[]): Promise<string> {
  const run = await runCli(args, env);
  expect(run.code, run.stderr).toBe(0);
  return run.stdout;
}

async function me(): Promise<string> {
  await cli(['keygen']);
  return (JSON.parse(await cli(['whoami', '--json'])) as { key: string }).key;
}

describe('status and the mailbox bounds', () => {
  it('names the peer a bound refuses, and the bound, under its session', async () => {
    const key = await me();
    const alice = newIdentity(61);
    await cli(['peers', 'add', 'alice', alice.key]);
    const toMe = (text: string) => signEnvelope(alice.signingKey, { to: key, text });
    const mailbox = await Mailbox.open(mailboxPath(join(root, 'state'), key, 's1'));
    for (let i = 0; i < 1_024; i++) expect((await mailbox.store(toMe(`m${i}`))).outcome).toBe('stored');
    expect(await mailbox.store(toMe('one too many'))).toMatchObject({ outcome: 'full', reason: 'sender_records' });
    await mailbox.close();
    const text = await cli(['status']);
    expect(text).toMatch(/session {6}s1( \([^)]*\))?: 1024 unread of 1024 stored/);
    expect(text).toMatch(/\n {2}REFUSING +mail from alice is refused since \S+: alice holds its share of 1024 unread messages \(sender_records\); it waits on the relay until some of alice's messages are acknowledged\n/);
    const json = JSON.parse(await cli(['status', '--json'])) as { sessions: { refusing: unknown[] }[] };
    expect(json.sessions[0]!.refusing).toEqual([expect.objectContaining({ peer: 'alice', sender: alice.key, bound: 'sender_records' })]);
  });

  it('says when the replay index is full, and shows its fill in --json', async () => {
    const key = await me();
    const until = Date.now() + 60 * 60 * 1000;
    const entries = Array.from({ length: MAX_CLAIMS }, (_, i) => ({ from: key, msg_id: i.toString(16).padStart(32, '0'), session: 's1', until }));
    const path = replayPath(join(root, 'state'), key);
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, JSON.stringify({ format: 'interlink-replay', version: 1, generation: 1, data: { latest: Date.now(), entries } }), { mode: 0o600 });
    const text = await cli(['status']);
    expect(text).toContain(`replay index FULL: ${MAX_CLAIMS} of ${MAX_CLAIMS} entries still inside the 7-day window`);
    const json = JSON.parse(await cli(['status', '--json'])) as { replay_index: unknown };
    expect(json.replay_index).toEqual({ entries: MAX_CLAIMS, limit: MAX_CLAIMS, full: true });
  });

  it('shows neither while nothing is refused and the index has room', async () => {
    await me();
    const text = await cli(['status']);
    expect(text).not.toContain('REFUSING');
    expect(text).not.toContain('replay index');
    expect((JSON.parse(await cli(['status', '--json'])) as { replay_index: unknown }).replay_index).toBeNull();
  });
});
