/**
 * Claude channels: with INTERLINK_CHANNELS=1 the server declares claude/channel and sends
 * each notice as notifications/claude/channel (a pointer, identifier meta keys); without
 * it, it declares nothing of the kind.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { eventually, pair, startPeer, type Peer } from '../../helpers/mcp.js';
import { reapAll } from '../../helpers/process.js';
import { startRelay } from '../../helpers/spawn-relay.js';

let root: string;
const peers: Peer[] = [];
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-channels-'));
});
afterEach(async () => {
  await Promise.all(peers.splice(0).map((p) => p.close().catch(() => undefined)));
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

const channelNotification = z.object({
  method: z.literal('notifications/claude/channel'),
  params: z.object({ content: z.string(), meta: z.record(z.string(), z.string()) }),
});

describe('channels', () => {
  it('declares claude/channel and sends each notice as a channel notification', async () => {
    const relay = await startRelay();
    const alice = await startPeer({ root, name: 'alice', session: 'a1', relays: relay.url });
    const bob = await startPeer({ root, name: 'bob', session: 'b1', relays: relay.url, env: { INTERLINK_CHANNELS: '1' } });
    peers.push(alice, bob);
    expect(bob.client.getServerCapabilities()?.experimental).toEqual({ 'claude/channel': {} });
    expect(alice.client.getServerCapabilities()?.experimental).toBeUndefined();

    const received: z.infer<typeof channelNotification>['params'][] = [];
    bob.client.setNotificationHandler(channelNotification, async (n) => {
      received.push(n.params);
    });
    await pair(alice, bob);
    const sent = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text: 'BODY STAYS IN THE MAILBOX' });

    const [notice] = await eventually(async () => (received.length > 0 ? received : undefined));
    expect(notice!.content).toContain('receive_messages');
    expect(notice!.content).not.toContain('BODY STAYS');
    expect(Object.keys(notice!.meta).every((k) => /^[A-Za-z0-9_]+$/.test(k))).toBe(true);
    expect(notice!.meta).toMatchObject({ count: '1' });
    expect(notice!.content).toContain(notice!.meta.notification_id!);
    const status = await eventually(async () => {
      const s = await bob.call<{ history: { state: string }[] }>('message_status', { msg_id: sent.msg_id });
      return s.history.length >= 2 ? s : undefined;
    });
    expect(status.history.map((h) => h.state)).toEqual(['receiver_stored', 'notification_sent']);
  });
});
