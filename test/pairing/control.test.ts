/** The pairing control outbox (src/pairing/control.ts) on a real pairing store, against fake relay clients. */
import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseEnvelope, type SealedWire } from '../../src/envelope/envelope.js';
import { openEnvelope } from '../../src/envelope/open.js';
import { verifyEnvelope } from '../../src/envelope/sign.js';
import { ControlOutbox } from '../../src/pairing/control.js';
import type { ControlJob } from '../../src/pairing/rules.js';
import { pairingPath } from '../../src/config/layout.js';
import { PairingStore } from '../../src/pairing/store.js';
import { FakeRelayClient } from '../helpers/fake-relay-client.js';
import { newIdentity, tempDir } from '../helpers/fixtures.js';

const me = newIdentity(71);
const peer = newIdentity(72);
const route = `${me.key}#s1`;
const DAY_MS = 24 * 60 * 60 * 1000;

let dir: { path: string; remove: () => Promise<void> };
let store: PairingStore;
let control: ControlOutbox | undefined;
beforeEach(async () => {
  dir = await tempDir();
  store = new PairingStore(pairingPath(dir.path, me.key, 's1'));
});
afterEach(async () => {
  await control?.stop();
  control = undefined;
  await dir.remove();
});

function controlVia(...relays: FakeRelayClient[]): ControlOutbox {
  control = new ControlOutbox({ identity: me, route, store, relays: relays.map((r) => r.client) });
  return control;
}

/** Queues a pair_request signed two days ago: older than the receiver's 24 h window. */
async function queuedJob(): Promise<ControlJob> {
  const job: ControlJob = { msg_id: randomUUID().replaceAll('-', ''), kind: 'pair_request', to: peer.key, session: 'main', text: 'pair with me', created_at: Date.now() - 2 * DAY_MS };
  await store.update((data) => ({ next: { ...data, control: [...data.control, job] }, result: undefined }));
  return job;
}

const waiting = async () => (await store.read()).control.map((j) => j.msg_id);

describe('pairing control outbox', () => {
  it('signs the message again at each offer, with a fresh timestamp and the same msg_id, until a relay accepts it', async () => {
    const a = new FakeRelayClient('ws://a');
    a.answer('queue_full');
    const loop = controlVia(a);
    const job = await queuedJob();
    const before = Date.now();
    await loop.kick();
    expect(await waiting()).toEqual([job.msg_id]);
    await loop.kick();
    expect(await waiting()).toEqual([]);
    expect(a.sent).toHaveLength(2);
    for (const { route: to, envelope } of a.sent) {
      expect(to).toBe(`${peer.key}#main`);
      // Sealed to the peer: the relay sees the header only; the peer opens the claimed name.
      expect(envelope).toMatchObject({ v: 4, msg_id: job.msg_id, from: me.key, to: peer.key, to_session: 'main', kind: 'pair_request' });
      expect(envelope).not.toHaveProperty('text');
      expect(verifyEnvelope(parseEnvelope(envelope))).toBe(true);
      expect(openEnvelope(peer.signingKey, parseEnvelope(envelope) as SealedWire)).toMatchObject({ text: job.text, reply_to: route });
      expect(envelope.ts).toBeGreaterThanOrEqual(before);
    }
  });

  it('removes the job once one relay accepted it, whatever the others answered', async () => {
    const [refusing, accepting] = [new FakeRelayClient('ws://refusing'), new FakeRelayClient('ws://accepting')];
    const down = new FakeRelayClient('ws://down', { connected: false });
    refusing.answer('rate_limited');
    const loop = controlVia(refusing, accepting, down);
    const job = await queuedJob();
    await loop.kick();
    expect(await waiting()).toEqual([]);
    expect([refusing.sent.length, accepting.sent.length, down.sent.length]).toEqual([1, 1, 0]);
    await loop.kick();
    expect(accepting.sent.map((s) => s.envelope.msg_id)).toEqual([job.msg_id]);
  });

  it('keeps a job while no relay is connected, and flush sends it once one is', async () => {
    const a = new FakeRelayClient('ws://a', { connected: false });
    const loop = controlVia(a);
    const job = await queuedJob();
    expect(await loop.flush(0)).toBe(1);
    expect(await waiting()).toEqual([job.msg_id]);
    a.connected = true;
    expect(await loop.flush(10_000)).toBe(0);
    expect(a.sent.map((s) => s.envelope.msg_id)).toEqual([job.msg_id]);
  });

  it('offers nothing after stop', async () => {
    const a = new FakeRelayClient('ws://a');
    const loop = controlVia(a);
    await loop.stop();
    await queuedJob();
    a.connect();
    await loop.kick();
    expect(a.sent).toEqual([]);
  });
});
