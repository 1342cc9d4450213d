/**
 * A relay behind TLS, as README "Security" advises for crossing machines: a terminator
 * (here a TLS server piping each connection to the relay's plain port, as a reverse proxy
 * in stream mode does) in front of a real relay, and real `serve` processes given
 * `wss://` URLs. A client that trusts the certificate (NODE_EXTRA_CA_CERTS) exchanges
 * messages through it; one that does not trust it never gets past the handshake.
 */
import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type Server } from 'node:tls';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { eventually, pair, startPeer, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { startRelay, type RelayProcess } from '../helpers/spawn-relay.js';

const hasOpenssl = spawnSync('openssl', ['version']).status === 0;

/** A self-signed certificate for 127.0.0.1, made by the openssl CLI. */
function makeCertificate(dir: string): { key: string; cert: string } {
  const key = join(dir, 'key.pem');
  const cert = join(dir, 'cert.pem');
  const args = ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'];
  const made = spawnSync('openssl', args, { encoding: 'utf8' });
  if (made.status !== 0) throw new Error(`openssl could not make a certificate: ${made.stderr}`);
  return { key, cert };
}

interface Terminator {
  server: Server;
  url: string;
  /** Connections that completed the TLS handshake. */
  secured: () => number;
  /** Handshakes the client broke off (an untrusted certificate). */
  refused: () => number;
}

async function startTerminator(files: { key: string; cert: string }, relayPort: number): Promise<Terminator> {
  let secured = 0;
  let refused = 0;
  const server = createServer({ key: await readFile(files.key), cert: await readFile(files.cert) }, (tlsSocket) => {
    secured += 1;
    const upstream: Socket = connect(relayPort, '127.0.0.1');
    tlsSocket.pipe(upstream).pipe(tlsSocket);
    const close = (): void => {
      tlsSocket.destroy();
      upstream.destroy();
    };
    tlsSocket.on('error', close).on('close', close);
    upstream.on('error', close).on('close', close);
  });
  server.on('tlsClientError', () => (refused += 1));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  return { server, url: `wss://127.0.0.1:${port}`, secured: () => secured, refused: () => refused };
}

describe.runIf(hasOpenssl)('a relay behind TLS (wss://)', () => {
  let root: string;
  let relay: RelayProcess;
  let terminator: Terminator;
  let cert: string;
  const peers: Peer[] = [];

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'interlink-tls-'));
    const files = makeCertificate(root);
    cert = files.cert;
    relay = await startRelay();
    terminator = await startTerminator(files, relay.port);
  });

  afterEach(async () => {
    await Promise.all(peers.splice(0).map((p) => p.close().catch(() => undefined)));
  });

  afterAll(async () => {
    await new Promise((resolve) => terminator?.server.close(resolve));
    await reapAll();
    if (root !== undefined) await rm(root, { recursive: true, force: true });
  });

  async function peer(name: string, session: string, env: Record<string, string>): Promise<Peer> {
    const started = await startPeer({ root, name, session, relays: terminator.url, env });
    peers.push(started);
    return started;
  }

  it('carries a message between sessions that trust the certificate', async () => {
    const trusted = { NODE_EXTRA_CA_CERTS: cert };
    const alice = await peer('alice', 'a1', trusted);
    const bob = await peer('bob', 'b1', trusted);
    await pair(alice, bob);

    const sent = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text: 'over TLS' });
    const received = await eventually(async () => {
      const inbox = await bob.call<{ messages: { msg_id: string; text: string }[] }>('receive_messages');
      return inbox.messages.length > 0 ? inbox.messages : undefined;
    });
    expect(received).toEqual([expect.objectContaining({ msg_id: sent.msg_id, text: 'over TLS' })]);
    expect(terminator.secured()).toBeGreaterThanOrEqual(2);
  });

  it('does not connect a session that does not trust the certificate', async () => {
    const [refusedBefore, securedBefore] = [terminator.refused(), terminator.secured()];
    // A session connects to its relays as it starts, to read its route.
    await peer('eve', 'e1', {});
    await eventually(async () => (terminator.refused() > refusedBefore ? true : undefined), 15_000, 'a refused TLS handshake');
    expect(terminator.secured()).toBe(securedBefore);
  });
});
