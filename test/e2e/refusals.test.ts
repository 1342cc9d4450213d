/**
 * What an agent is refused, through a real `interlink-mcp serve` and the MCP SDK client:
 * a blank message (empty_text, enforced in the agent, below every tool schema) and its
 * own key as a peer (own_key).
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { pair, startPeer, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { startRelay } from '../helpers/spawn-relay.js';

let root: string;
const peers: Peer[] = [];
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-refusals-'));
});
afterEach(async () => {
  await Promise.all(peers.splice(0).map((p) => p.close().catch(() => undefined)));
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

describe('refusals', () => {
  it('refuses empty and whitespace-only text with empty_text, queuing nothing; cancel_task with a blank reason still says "canceled"', async () => {
    const relay = await startRelay();
    const alice = await startPeer({ root, name: 'alice', session: 'a1', relays: relay.url });
    const bob = await startPeer({ root, name: 'bob', session: 'b1', relays: relay.url });
    peers.push(alice, bob);
    await pair(alice, bob);
    for (const text of ['', '   ', '\n\t \u00a0\u2003']) {
      const error = await alice.fail('send_message', { to: 'bob', session: 'b1', text });
      expect(error.code, JSON.stringify(text)).toBe('empty_text');
      expect((await alice.fail('send_message', { to: 'self', text })).code).toBe('empty_text');
    }
    expect(await alice.call('list_pending')).toEqual({ pending: [] });
    const canceled = await alice.call<{ msg_id: string }>('cancel_task', { to: 'bob', session: 'b1', task_id: 't1', reason: ' ' });
    expect(canceled.msg_id).toMatch(/^[0-9a-f]{32}$/);
  });

  it("refuses add_peer of this identity's own key with own_key, leaving peers.json untouched", async () => {
    const alice = await startPeer({ root, name: 'alice', session: 'a1', relays: 'ws://127.0.0.1:9' });
    peers.push(alice);
    const { identity } = await alice.call<{ identity: string }>('get_my_session_id');
    const error = await alice.fail('add_peer', { petname: 'me', key: identity });
    expect(error.code).toBe('own_key');
    expect(error.message).toContain('"self"');
    await expect(readFile(join(alice.config, 'peers.json'))).rejects.toThrow(/ENOENT/);
  });
});
