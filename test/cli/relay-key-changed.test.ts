/**
 * A relay whose key changed (issue 35, point 7), as a person meets it: the relay restarts
 * on its address with a fresh --db, so with a new key. `status`, every `pair` command and
 * `serve` (its log and send_message's note) name the new key and the recorded one and
 * point to `interlink-mcp relay forget`; after it, each works again. Real relay and serve
 * processes, the CLI as a person types it, the official MCP SDK client.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { eventually, startPeer, type Peer } from '../helpers/mcp.js';
import { logged, pairingWorkspace, person, type Person } from '../helpers/pairing.js';
import { freePort, startRelay, type RelayProcess } from '../helpers/spawn-relay.js';

let root = '';
const open = pairingWorkspace('interlink-relay-key-changed-', (dir) => (root = dir));

/** A relay on a port of its own with its store in `db`; restartable on the same address. */
async function relayAt(port: number, db: string): Promise<RelayProcess> {
  return startRelay({ port, db: join(root, db) });
}

/** The sentence every surface uses for the changed key, up to the command that accepts it. */
function changedKey(url: string, fresh: string, recorded: string): RegExp {
  const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`answers with a NEW key ${escape(fresh)} \\(recorded ${escape(recorded)} since [^)]+\\): refused.*run \`interlink-mcp relay forget ${escape(url)}\``);
}

/** alice meets the relay once (her `pair list` records its key), then it restarts with a new key. */
async function resetUnderAlice(): Promise<{ alice: Person; url: string; old: string; fresh: RelayProcess }> {
  const port = await freePort();
  const first = await relayAt(port, 'db-1');
  const alice = person(root, 'alice', first.url);
  const listed = await alice.cli(['pair', 'list']);
  expect(listed.code, listed.stderr).toBe(0);
  await first.child.kill('SIGTERM');
  const fresh = await relayAt(port, 'db-2');
  expect(fresh.key).not.toBe(first.key);
  return { alice, url: first.url, old: first.key, fresh };
}

describe('a relay that restarted with a new key', () => {
  it('status names the new key and the recorded one and points to `relay forget`; after it, the relay answers as before', async () => {
    const { alice, url, old, fresh } = await resetUnderAlice();
    const shown = await alice.cli(['status']);
    expect(shown.code, shown.stderr).toBe(0);
    const line = shown.stdout.split('\n').find((l) => l.startsWith(`relay        ${url}  `));
    expect(line, shown.stdout).toMatch(changedKey(url, fresh.key, old));
    const data = JSON.parse((await alice.cli(['status', '--json'])).stdout) as { relays: unknown[] };
    expect(data.relays).toEqual([
      { url, answers: true, refused: { code: 'relay_untrusted', reason: 'key_changed', url, key: fresh.key, recorded: old, since: expect.any(Number), message: expect.stringMatching(changedKey(url, fresh.key, old)) } },
    ]);

    // The command exactly as the sentence gives it.
    const command = /run `interlink-mcp (relay forget [^`]+)`/.exec(line!)![1]!.split(' ');
    const forgot = await alice.cli(command);
    expect(forgot.code, forgot.stderr).toBe(0);
    const after = await alice.cli(['status']);
    expect(after.stdout).toContain(`relay        ${url}  answers\n`);
    expect(after.stdout).not.toContain('NEW key');
    await fresh.child.kill('SIGTERM');
  });

  it('every pair command names the new key and `relay forget` instead of "no relay answered", and works after it', async () => {
    const { alice, url, old, fresh } = await resetUnderAlice();
    const fingerprint = '0123-4567-89ab-cdef';
    for (const args of [['pair', 'request', 'bob'], ['pair', 'list'], ['pair', 'accept', fingerprint], ['pair', 'reject', fingerprint], ['pair', 'list', '--json']]) {
      const run = await alice.cli(args);
      expect(run.code, `${args.join(' ')}: ${run.stderr}`).toBe(1);
      const lines = run.stderr.trimEnd().split('\n');
      expect(lines, run.stderr).toHaveLength(1);
      expect(lines[0]).toMatch(changedKey(url, fresh.key, old));
      expect(lines[0]).toContain('Nothing was done.');
      expect(lines[0]).not.toContain('no relay answered');
      expect(lines[0]).not.toContain('Is the relay running');
      if (args.includes('--json')) expect(JSON.parse(run.stdout)).toEqual({ error: { code: 'relay_untrusted', message: expect.stringMatching(changedKey(url, fresh.key, old)) } });
    }
    // A session that refused it recorded the refusal: status shows the live verdict once.
    const shown = await alice.cli(['status']);
    expect(shown.stdout.match(/NEW key/g), shown.stdout).toHaveLength(1);

    expect((await alice.cli(['relay', 'forget', url])).code).toBe(0);
    const listed = await alice.cli(['pair', 'list']);
    expect(listed.code, listed.stderr).toBe(0);
    expect((await alice.cli(['status'])).stdout).toContain(`relay        ${url}  answers, key recorded ${fresh.key}\n`);
    await fresh.child.kill('SIGTERM');
  });

  it("serve logs it in those words and send_message's note says why the message waits; after `relay forget` the message goes out", async () => {
    const { alice, url, old, fresh } = await resetUnderAlice();
    const server: Peer = await startPeer({ root, name: 'alice', session: 'alice-s1', relays: url });
    open.peers.push(server);
    await eventually(async () => (logged(server.stderr(), 'relay_key_refused').length > 0 ? true : undefined), 15_000, 'relay_key_refused');
    expect(logged(server.stderr(), 'relay_key_refused')[0]!.message).toMatch(changedKey(url, fresh.key, old));

    const sent = await server.call<{ msg_id: string; state: string; note?: string }>('send_message', { to: 'self', session: 'alice-s2', text: 'through the reset relay' });
    expect(sent.state).toBe('pending');
    expect(sent.note).toMatch(changedKey(url, fresh.key, old));
    expect(sent.note).toContain('waits in the outbox');

    expect((await alice.cli(['relay', 'forget', url])).code).toBe(0);
    // The running session trusts the new key at its next attempt, with no restart.
    await eventually(
      async () => ((await server.call<{ state: string }>('message_status', { msg_id: sent.msg_id })).state !== 'pending' ? true : undefined),
      20_000,
      'accepted after relay forget',
    );
    await fresh.child.kill('SIGTERM');
  });
});
