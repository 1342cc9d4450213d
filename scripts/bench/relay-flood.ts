/**
 * The relay's memory under the slow-reader flood: its roster filled with announcements of
 * about 1.2 KiB from 1,000 keys, then 100 and 300 connections from one address (the relay's
 * per-address cap raised for them) that ask for the entries of 256 of those keys every
 * 50 ms, never read a byte and send pongs nobody asked for. Resident memory is sampled every 100 ms,
 * and an honest client's send → delivery is timed while the flood runs.
 */
import { once } from 'node:events';
import type { Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import WebSocket from 'ws';
import { formatRoute } from '../../src/envelope/route.js';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { generateSigningKey } from '../../src/identity/ed25519.js';
import { signAnnouncement } from '../../src/presence/announcement.js';
import { signAuth } from '../../src/wire/auth.js';
import { startRelayProcess, type RelayProcess } from './relay-process.js';
import type { BenchContext, Benchmark, Section } from './report.js';
import { formatMs } from './stats.js';

const ANNOUNCEMENTS = 1_000;
const FLOODS = [100, 300] as const;
const FLOOD_MS = 10_000;
const REQUEST_EVERY_MS = 50;

interface Frame {
  type: string;
  nonce?: string;
  /** the relay's key, in its challenge */
  key?: string;
  id?: number;
  route?: string;
}

async function open(url: string, autoPong = true): Promise<{ ws: WebSocket; nonce: string; relayKey: string }> {
  const ws = new WebSocket(url, { perMessageDeflate: false, autoPong });
  ws.on('error', () => undefined);
  const [data] = (await once(ws, 'message')) as [Buffer];
  const challenge = JSON.parse(data.toString()) as Frame;
  return { ws, nonce: challenge.nonce ?? '', relayKey: challenge.key ?? '' };
}

/** Announces ANNOUNCEMENTS sessions of as many keys; returns the keys. */
async function fillRoster(url: string): Promise<string[]> {
  const { ws } = await open(url);
  const keys: string[] = [];
  for (let i = 0; i < ANNOUNCEMENTS; i++) {
    const key = generateSigningKey();
    keys.push(encodeBase64url(key.publicKey));
    const fields = { name: 'agent', session: `s${i}`, cwd: '/repo', git_root: '/repo', summary: 'x'.repeat(1_000), ts: 1 };
    ws.send(JSON.stringify({ v: 1, type: 'announce', announcement: signAnnouncement(key, fields) }));
  }
  // Frames are handled in order: once the roster answers, every announcement was taken.
  ws.send(JSON.stringify({ v: 1, type: 'roster', ref: 'full', keys: keys.slice(-1) }));
  await once(ws, 'message');
  ws.terminate();
  return keys;
}

/** An honest reader sends itself one message and times it until the delivery. */
async function honestRoundTrip(url: string): Promise<number> {
  const { ws, nonce, relayKey } = await open(url);
  const key = generateSigningKey();
  const route = formatRoute({ key: encodeBase64url(key.publicKey), session: 'honest' });
  const start = performance.now();
  ws.send(JSON.stringify({ v: 1, type: 'auth', route, relay: relayKey, sig: signAuth(key, relayKey, nonce, route) }));
  ws.send(JSON.stringify({ v: 1, type: 'send', ref: 'h', to: route, payload: { hello: 'world' } }));
  await new Promise<void>((resolve) => ws.on('message', (data) => (JSON.parse(data.toString()) as Frame).type === 'deliver' && resolve()));
  const elapsed = performance.now() - start;
  ws.terminate();
  return elapsed;
}

async function flood(relay: RelayProcess, connections: number, keys: readonly string[]): Promise<{ peak: number; honestMs: number }> {
  const readers: WebSocket[] = [];
  for (let i = 0; i < connections; i++) {
    const { ws } = await open(relay.url, false);
    (ws as unknown as { _socket: Socket })._socket.pause();
    readers.push(ws);
  }
  let peak = relay.rss();
  const sampler = setInterval(() => (peak = Math.max(peak, relay.rss() || 0)), 100);
  let n = 0;
  const attack = setInterval(() => {
    for (const ws of readers) {
      if (ws.readyState !== WebSocket.OPEN) continue;
      ws.send(JSON.stringify({ v: 1, type: 'roster', ref: `q${n++}`, keys: keys.slice(0, 256) }));
      ws.pong(Buffer.from('not an answer'));
    }
  }, REQUEST_EVERY_MS);
  try {
    await new Promise((r) => setTimeout(r, FLOOD_MS / 2));
    const honestMs = await honestRoundTrip(relay.url);
    await new Promise((r) => setTimeout(r, FLOOD_MS / 2));
    return { peak, honestMs };
  } finally {
    clearInterval(attack);
    clearInterval(sampler);
    for (const ws of readers) ws.terminate();
  }
}

function mib(bytes: number): string {
  return (bytes / 2 ** 20).toFixed(0);
}

export function relayFlood(projectRoot: string): Benchmark {
  return {
    id: 'relay-flood',
    async run(context: BenchContext): Promise<Section> {
      const rows: string[][] = [];
      const peaks: number[] = [];
      for (const connections of FLOODS) {
        context.progress(`relay under ${connections} slow readers`);
        // All from 127.0.0.1, past the per-address cap of a relay listening on loopback (256).
        const relay = await startRelayProcess(projectRoot, undefined, { flags: ['--max-connections-per-address', '1024'] });
        try {
          const idle = relay.rss();
          const keys = await fillRoster(relay.url);
          const full = relay.rss();
          const { peak, honestMs } = await flood(relay, connections, keys);
          peaks.push(peak);
          rows.push([String(connections), mib(idle), mib(full), mib(peak), formatMs(honestMs)]);
        } finally {
          await relay.stop();
        }
      }
      const worst = Math.max(...peaks);
      return {
        title: 'Relay memory under slow readers',
        measures: `A relay process (in memory) whose roster holds ${ANNOUNCEMENTS.toLocaleString('en-US')} signed announcements of about 1.2 KiB (it keeps at most 1 MiB of them); then the given number of connections, opened from the benchmark process, each ask for the roster every ${REQUEST_EVERY_MS} ms for ${FLOOD_MS / 1000} s, never read a byte (their sockets paused) and send pongs that answer no ping. VmRSS is sampled every 100 ms; halfway through, an honest client on a new connection authenticates, sends itself a message and times it until the delivery.`,
        tables: [{ headers: ['Slow readers', 'Idle MiB', 'Roster full MiB', 'Peak under the flood MiB', 'Honest send → delivery ms'], rows }],
        checks: [{ target: '100–300 slow readers keep the relay under 512 MiB RSS', actual: `${mib(worst)} MiB peak`, pass: worst < 512 * 2 ** 20 }],
        notes: ['Before the roster replies counted against the send budget, 100 such connections took a relay from 76 MiB to 728 MiB and 300 to about 2 GiB.'],
      };
    },
  };
}
