/**
 * Sockets that never ask for the WebSocket upgrade (issue 38, point 1): no connection cap
 * counts them (the caps count upgrades), so the relay closes each one that has not asked
 * within its deadline (`upgradeWithinMs`; the TLS handshake has the same one): silent
 * sockets, one that sends half a request line and stops, one that completes TLS and says
 * nothing. An honest client connecting meanwhile is served, and is not cut off later.
 */
import { connect as tcpConnect, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { once } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { readServerTls } from '../../src/wire/tls.js';
import { RelayClient } from '../../src/link/client.js';
import type { RelayServer } from '../../src/relay/server.js';
import { tempDir } from '../helpers/fixtures.js';
import { newReader, TestClient } from '../helpers/relay-test-client.js';
import { startTestRelay } from '../helpers/relay-store.js';
import { hasOpenssl, makeCertificate } from '../helpers/tls.js';

const DEADLINE_MS = 400;
const open: { relays: RelayServer[]; sockets: Socket[]; dirs: { remove: () => Promise<void> }[]; clients: RelayClient[] } = { relays: [], sockets: [], dirs: [], clients: [] };

afterEach(async () => {
  for (const c of open.clients.splice(0)) c.close();
  for (const s of open.sockets.splice(0)) s.destroy();
  await Promise.all(open.relays.splice(0).map((r) => r.close()));
  await Promise.all(open.dirs.splice(0).map((d) => d.remove()));
});

function portOf(relay: RelayServer): number {
  return Number(new URL(relay.url).port);
}

async function rawSocket(port: number, send?: string): Promise<{ socket: Socket; gone: Promise<void> }> {
  const socket = tcpConnect(port, '127.0.0.1');
  open.sockets.push(socket);
  socket.on('error', () => undefined);
  await once(socket, 'connect');
  if (send !== undefined) socket.write(send);
  return { socket, gone: once(socket, 'close').then(() => undefined) };
}

describe('a socket that never asks for the upgrade', () => {
  it('is closed at the deadline, a half-sent request too, while an honest client is served and kept', async () => {
    const relay = await startTestRelay({ upgradeWithinMs: DEADLINE_MS });
    open.relays.push(relay);
    const port = portOf(relay);
    // The honest client first: once the silent sockets opened after it are closed, its own deadline (had it one) is past too.
    const honest = await TestClient.connect(relay.url);
    const reader = newReader();
    expect(await honest.auth(reader)).toMatchObject({ type: 'auth_ok' });
    const silent = await Promise.all(Array.from({ length: 50 }, () => rawSocket(port)));
    const slow = await rawSocket(port, 'GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n');
    await Promise.all([...silent, slow].map((s) => s.gone));
    expect(await honest.send(reader.route, { still: 'here' })).toMatchObject({ type: 'accepted' });
    await honest.close();
  });

  it.skipIf(!hasOpenssl)('is closed at the deadline over TLS, during the handshake or after it', async () => {
    const dir = await tempDir();
    open.dirs.push(dir);
    const files = makeCertificate(dir.path);
    const relay = await startTestRelay({ upgradeWithinMs: DEADLINE_MS, tls: readServerTls(files.cert, files.key) });
    open.relays.push(relay);
    const port = portOf(relay);
    // No handshake at all: the raw socket says nothing.
    const silent = await rawSocket(port);
    // A finished handshake, then silence.
    const secure = tlsConnect({ host: '127.0.0.1', port, rejectUnauthorized: false });
    open.sockets.push(secure);
    secure.on('error', () => undefined);
    await once(secure, 'secureConnect');
    const secureClosed = once(secure, 'close');
    await Promise.all([silent.gone, secureClosed]);
    expect(secure.destroyed).toBe(true);
  });
});

describe('a WebSocket that proves no key', () => {
  it('is closed at the deadline (1008), pongs answered or not, while one that proves a key without reading stays', async () => {
    const relay = await startTestRelay({ proofWithinMs: DEADLINE_MS });
    open.relays.push(relay);
    const prover = await TestClient.connect(relay.url);
    expect(await prover.prove()).toMatchObject({ type: 'auth_ok', read: false });
    // A session's connection that does not read (a relay listed at several addresses) proves its key on its own.
    const reader = newReader();
    const standby = new RelayClient({ url: relay.url, key: reader.key, routes: [reader.route], readOnConnect: false });
    open.clients.push(standby);
    let dropped = 0;
    standby.on('disconnected', () => dropped++);
    standby.start();
    expect(await standby.ready(5_000)).toBe(true);
    // A proof reads nothing: a message to the proven route is not delivered on that connection.
    expect(await prover.send(reader.route, { queued: true })).toMatchObject({ type: 'accepted' });
    // Connected last, so when its deadline closes it the others' deadlines are past too.
    const idle = await TestClient.connect(relay.url);
    expect(await idle.closed).toMatchObject({ code: 1008, reason: expect.stringContaining('no key proved within 400 ms') });
    expect([prover.isOpen, standby.connected, dropped, prover.deliveries()]).toEqual([true, true, 0, []]);
    await prover.close();
  });
});
