/**
 * Slow readers against a relay process (issue 13, point 3): the roster is filled with
 * announcements of about 1.2 KiB each from 1,000 keys, then 100 connections ask for the
 * entries of 256 of those keys every 50 ms, never read a byte, and send pongs nobody asked
 * for. The relay's RSS (VmRSS from
 * /proc/<pid>/status, where there is one) stays under 512 MiB, an honest client on another
 * connection still authenticates, sends, receives and acknowledges, and the heartbeat cuts
 * every slow reader off, since none of their pongs echoes a ping (DESIGN.md "Bounded by
 * construction").
 */
import { readFileSync } from 'node:fs';
import { once } from 'node:events';
import type { Socket } from 'node:net';
import WebSocket from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateSigningKey } from '../../src/identity/ed25519.js';
import { signAnnouncement } from '../../src/presence/announcement.js';
import { PROTOCOL_VERSION, type RelayFrame } from '../../src/wire/frames.js';
import { MAX_QUERY_KEYS } from '../../src/wire/frames.js';
import { reapAll } from '../helpers/process.js';
import { newReader, TestClient, until } from '../helpers/relay-test-client.js';
import { startRelay, type RelayProcess } from '../helpers/spawn-relay.js';

const SLOW_READERS = 100;
const ANNOUNCEMENTS = 1_000;
const RSS_BOUND_BYTES = 512 * 1024 * 1024;

/** The process's resident set from /proc, or undefined where there is no /proc. */
function rssBytes(pid: number): number | undefined {
  try {
    const match = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match === null ? undefined : Number(match[1]) * 1024;
  } catch {
    return undefined;
  }
}

/** A connection that never reads what the relay sends (its socket paused from the start). */
async function slowReader(url: string): Promise<WebSocket> {
  const ws = new WebSocket(url, { perMessageDeflate: false, autoPong: false });
  ws.on('error', () => undefined);
  await once(ws, 'open');
  (ws as unknown as { _socket: Socket })._socket.pause();
  return ws;
}

function rosterRequest(ref: string, keys: readonly string[]): string {
  return JSON.stringify({ v: PROTOCOL_VERSION, type: 'roster', ref, keys });
}

describe('a relay process under slow readers with a full roster', () => {
  let relay: RelayProcess;
  beforeAll(async () => {
    relay = await startRelay();
  });
  afterAll(async () => {
    await reapAll();
  });

  it(`stays under 512 MiB with ${SLOW_READERS} of them, serves an honest client, and cuts them off`, async () => {
    const pid = relay.child.process.pid!;
    const filler = await TestClient.connect(relay.url);
    expect(await filler.prove()).toMatchObject({ type: 'auth_ok' });
    const keys: string[] = [];
    for (let i = 0; i < ANNOUNCEMENTS; i++) {
      const key = generateSigningKey();
      keys.push(key.publicKey.toString('base64url'));
      const fields = { name: 'agent', session: `s${i}`, cwd: '/repo', git_root: '/repo', summary: 'x'.repeat(1_000), ts: 1 };
      filler.frame({ type: 'announce', announcement: signAnnouncement(key, fields) });
    }
    const asked = keys.slice(0, MAX_QUERY_KEYS);
    filler.frame({ type: 'roster', ref: 'full', keys: asked });
    const roster = (await filler.waitFor('the roster of 256 keys', (f) => f.type === 'roster' && f.ref === 'full')) as Extract<RelayFrame, { type: 'roster' }>;
    // The keys asked for, and no other.
    expect(new Set(roster.entries.map((e) => (e.announcement as { key: string }).key))).toEqual(new Set(asked));
    await filler.close();

    const baseline = rssBytes(pid);
    let peak = baseline ?? 0;
    const sampler = setInterval(() => (peak = Math.max(peak, rssBytes(pid) ?? 0)), 100);
    const readers = await Promise.all(Array.from({ length: SLOW_READERS }, () => slowReader(relay.url)));
    let requests = 0;
    const attack = setInterval(() => {
      for (const ws of readers) {
        if (ws.readyState !== WebSocket.OPEN) continue;
        ws.send(rosterRequest(`q${requests++}`, asked));
        ws.pong(Buffer.from('not an answer to any ping'));
      }
    }, 50);
    try {
      await until('40 roster requests per slow reader', () => (requests >= 40 * SLOW_READERS ? true : undefined), 20_000);

      const honest = await TestClient.connect(relay.url);
      const reader = newReader();
      expect(await honest.auth(reader)).toMatchObject({ type: 'auth_ok' });
      expect(await honest.send(reader.route, { hello: 'world' })).toMatchObject({ type: 'accepted' });
      const [delivery] = await honest.waitForDeliveries(1);
      expect(delivery!.payload).toEqual({ hello: 'world' });
      honest.ack(reader.route, [delivery!.id]);
      // One waiting reply per slow reader at most, so the budget still has room for an honest one.
      honest.frame({ type: 'roster', ref: 'honest', keys: asked });
      const answer = await honest.waitFor('the honest roster', (f) => 'ref' in f && f.ref === 'honest');
      expect(answer).toMatchObject({ type: 'roster', entries: roster.entries.map(() => expect.anything()) });
      await honest.close();

      // Two heartbeats (15 s each) at most: the first pings, the second finds no echo.
      await until('the relay cut every slow reader off', () => (readers.every((ws) => ws.readyState === WebSocket.CLOSED) ? true : undefined), 45_000);
    } finally {
      clearInterval(attack);
      clearInterval(sampler);
      for (const ws of readers) ws.terminate();
    }
    if (baseline === undefined) return; // no /proc here: the memory bound cannot be read
    console.log(`relay RSS with ${SLOW_READERS} slow readers: baseline ${(baseline / 2 ** 20).toFixed(0)} MiB, peak ${(peak / 2 ** 20).toFixed(0)} MiB`);
    expect(peak).toBeLessThan(RSS_BOUND_BYTES);
  }, 60_000);
});
