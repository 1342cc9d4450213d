/**
 * The relay alone: a durable relay process (`--db`) under a load generator that spreads
 * messages over many routes — how many messages per second it accepts, delivers and
 * acknowledges, and how many per second of the relay's own CPU (per core). Acknowledged
 * means removed from the store, read from the relay's own /metrics counter.
 */
import { mkdtemp } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import WebSocket from 'ws';
import { formatRoute } from '../../src/envelope/route.js';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { generateSigningKey, type SigningKey } from '../../src/identity/ed25519.js';
import { signAuth } from '../../src/wire/auth.js';
import { MAX_FRAME_BYTES } from '../../src/wire/frames.js';
import { wireOf } from '../../src/envelope/envelope.js';
import { makeEnvelopes, newCorrespondents } from './records.js';
import { startRelayProcess } from './relay-process.js';
import type { BenchContext, Benchmark, Section } from './report.js';
import { formatCount } from './stats.js';

const MESSAGES = 20_000;
const ROUTES = 256;
/** A connection may read at most 64 routes. */
const ROUTES_PER_READER = 64;
const SENDERS = 8;
const WINDOW_PER_SENDER = 32;
const ACKED_WAIT_MS = 120_000;

interface Frame {
  type: string;
  ref?: string;
  route?: string;
  id?: number;
  nonce?: string;
  /** the relay's key, in its challenge */
  key?: string;
}

/** Opens a connection and resolves with it and the relay's challenge nonce. */
async function open(url: string): Promise<{ ws: WebSocket; nonce: string; relayKey: string }> {
  const ws = new WebSocket(url, { maxPayload: MAX_FRAME_BYTES, perMessageDeflate: false });
  ws.on('error', () => undefined);
  const challenge = await new Promise<Frame>((resolve, reject) => {
    ws.once('message', (data) => resolve(JSON.parse(data.toString()) as Frame));
    ws.once('close', () => reject(new Error('the relay closed the connection before its challenge')));
  });
  return { ws, nonce: challenge.nonce ?? '', relayKey: challenge.key ?? '' };
}

/** A reader of up to 64 routes: acknowledges what it is delivered, in one ack per route per turn of the event loop. */
async function reader(url: string, keys: readonly SigningKey[], onDelivered: () => void): Promise<WebSocket> {
  const { ws, nonce, relayKey } = await open(url);
  const routes = keys.map((key) => ({ key, route: formatRoute({ key: encodeBase64url(key.publicKey), session: 'bench' }) }));
  const pending = new Map<string, number[]>();
  let scheduled = false;
  const flush = () => {
    scheduled = false;
    for (const [route, ids] of pending) ws.send(JSON.stringify({ v: 1, type: 'ack', route, ids }));
    pending.clear();
  };
  let authenticated = 0;
  const ready = new Promise<void>((resolve) => {
    ws.on('message', (data) => {
      const frame = JSON.parse(data.toString()) as Frame;
      if (frame.type === 'auth_ok' && ++authenticated === routes.length) resolve();
      if (frame.type !== 'deliver') return;
      onDelivered();
      const ids = pending.get(frame.route!) ?? [];
      ids.push(frame.id!);
      pending.set(frame.route!, ids);
      if (!scheduled) {
        scheduled = true;
        setImmediate(flush);
      }
    });
  });
  for (const { key, route } of routes) ws.send(JSON.stringify({ v: 1, type: 'auth', route, relay: relayKey, sig: signAuth(key, relayKey, nonce, route) }));
  await ready;
  return ws;
}

/** A sender keeping WINDOW_PER_SENDER sends in flight; resolves once its share was accepted. */
async function sender(url: string, jobs: { next: number; texts: readonly string[] }, onAccepted: () => void): Promise<WebSocket> {
  const { ws } = await open(url);
  return new Promise((resolve, reject) => {
    let inFlight = 0;
    let ref = 0;
    const fill = () => {
      while (inFlight < WINDOW_PER_SENDER && jobs.next < jobs.texts.length) {
        inFlight++;
        ws.send(jobs.texts[jobs.next++]!.replace('"ref":"?"', `"ref":"${ref++}"`));
      }
      if (inFlight === 0) resolve(ws);
    };
    ws.on('message', (data) => {
      const frame = JSON.parse(data.toString()) as Frame & { code?: string; message?: string };
      if (frame.type === 'refused') return reject(new Error(`refused: ${frame.code} ${frame.message}`));
      if (frame.type !== 'accepted') return;
      inFlight--;
      onAccepted();
      fill();
    });
    fill();
  });
}

export function relayThroughput(projectRoot: string): Benchmark {
  return {
    id: 'relay-throughput',
    async run(context: BenchContext): Promise<Section> {
      context.progress('relay alone: load over many routes');
      const keys = Array.from({ length: ROUTES }, () => generateSigningKey());
      const routes = keys.map((key) => formatRoute({ key: encodeBase64url(key.publicKey), session: 'bench' }));
      const payloads = makeEnvelopes(newCorrespondents(), MESSAGES).map(wireOf);
      // Frames are built before the clock starts: the generator should cost the relay's cores as little as it can.
      const texts = payloads.map((p, i) => `{"v":1,"type":"send","ref":"?","to":${JSON.stringify(routes[i % ROUTES])},"payload":${JSON.stringify(p)}}`);
      const relay = await startRelayProcess(projectRoot, await mkdtemp(join(context.scratch, 'relay-tp-')), { metrics: true });
      const sockets: WebSocket[] = [];
      try {
        let delivered = 0;
        let accepted = 0;
        let lastDelivered = 0;
        let lastAccepted = 0;
        for (let i = 0; i < ROUTES; i += ROUTES_PER_READER) {
          sockets.push(await reader(relay.url, keys.slice(i, i + ROUTES_PER_READER), () => ((lastDelivered = performance.now()), delivered++)));
        }
        const cpuBefore = relay.cpu();
        const start = performance.now();
        const jobs = { next: 0, texts };
        sockets.push(...(await Promise.all(Array.from({ length: SENDERS }, () => sender(relay.url, jobs, () => ((lastAccepted = performance.now()), accepted++))))));
        const deadline = Date.now() + ACKED_WAIT_MS;
        while ((await relay.metric('acknowledged_total')) < MESSAGES || (await relay.metric('queued_messages')) > 0) {
          if (Date.now() > deadline) throw new Error(`not every message was acknowledged within ${ACKED_WAIT_MS / 1000} s`);
          await new Promise((r) => setTimeout(r, 10));
        }
        const acked = performance.now();
        const relayCpu = relay.cpu() - cpuBefore;
        const rss = relay.rss();
        if (accepted !== MESSAGES || delivered < MESSAGES) throw new Error(`accepted ${accepted}, delivered ${delivered} of ${MESSAGES}`);
        const rate = (at: number) => formatCount((MESSAGES * 1000) / (at - start));
        const perCore = formatCount(MESSAGES / relayCpu);
        return {
          title: 'The relay alone: accepted, delivered and acknowledged per second',
          measures: [
            `A durable relay process (\`relay --db\`, every accept and every acknowledgement fsynced, commits grouped) and a load generator in the benchmark process: ${SENDERS} sender connections keeping ${WINDOW_PER_SENDER} sends each in flight, spreading ${formatCount(MESSAGES)} signed envelopes of 1 KiB over ${ROUTES} routes, whose readers (${ROUTES / ROUTES_PER_READER} connections of ${ROUTES_PER_READER} routes) acknowledge every delivery at once, one ack per route per turn of their event loop.`,
            'Each rate is the messages over the time from the first send to the last `accepted`, the last delivery, and the moment the relay\'s own /metrics count every message acknowledged and none queued. Per core: messages over the CPU seconds (user + system) the relay process used meanwhile.',
          ].join(' '),
          tables: [
            {
              headers: ['Measure:', 'Messages/s'],
              rows: [
                ['accepted (answered after the commit)', rate(lastAccepted)],
                ['delivered', rate(lastDelivered)],
                ['acknowledged (removed, committed)', rate(acked)],
                ['per second of relay CPU (per core), accept to acknowledge', perCore],
              ],
            },
          ],
          checks: [],
          notes: [`The relay used ${relayCpu.toFixed(2)} CPU seconds for ${formatCount(MESSAGES)} messages, ${((relayCpu * 1e6) / MESSAGES).toFixed(0)} µs each, and ended with ${(rss / 2 ** 20).toFixed(1)} MiB resident. The generator shares the machine's cores with it.`],
        };
      } finally {
        for (const ws of sockets) ws.terminate();
        await relay.stop();
      }
    },
  };
}
