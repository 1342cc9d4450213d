/**
 * wss:// end to end (issue 13, point 5; DESIGN.md "Encrypted transport"): a relay that
 * serves TLS itself (`relay --tls-cert/--tls-key`) and a plain relay behind a
 * TLS-terminating proxy, each carrying a message between real `serve` processes that
 * trust a self-signed certificate; a client that does not trust it refuses, and `status`
 * and the server's log say why and how to trust it (and, for a certificate naming another
 * host or a port without TLS, that). The relay refuses TLS flags it cannot use with one
 * line.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { expectOneLine, runCli, userEnv, type UserDirs } from '../helpers/cli.js';
import { eventually, pair, peerPool, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { startRelay, type RelayProcess } from '../helpers/spawn-relay.js';
import { hasOpenssl, makeCertificate, startTlsProxy, type CertificateFiles, type TlsProxy } from '../helpers/tls.js';

interface Probe {
  url: string;
  answers: boolean;
  error?: string;
}

let root: string;
let files: CertificateFiles;
const peers = peerPool(() => root);

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-tls-'));
  if (hasOpenssl) files = makeCertificate(root);
});
afterEach(() => peers.closeAll());
afterAll(async () => {
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

/** alice sends bob one message through `url`; bob receives it. `tag` keeps each pair's directories apart. */
async function exchange(tag: string, url: string, trust: Record<string, string>): Promise<void> {
  const alice = await peers.start(`${tag}-alice`, 'a1', url, trust);
  const bob = await peers.start(`${tag}-bob`, 'b1', url, trust);
  await pair(alice, bob);
  const sent = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text: 'over TLS' });
  const received = await eventually(async () => {
    const inbox = await bob.call<{ messages: { msg_id: string; text: string }[] }>('receive_messages');
    return inbox.messages.length > 0 ? inbox.messages : undefined;
  });
  expect(received).toEqual([expect.objectContaining({ msg_id: sent.msg_id, text: 'over TLS' })]);
}

function dirs(name: string): UserDirs {
  return { root, configDir: join(root, name, 'config'), stateDir: join(root, name, 'state') };
}

async function statusOf(url: string, extra: Record<string, string> = {}): Promise<Probe> {
  const run = await runCli(['status', '--json'], userEnv(dirs('status'), { INTERLINK_URL: url, ...extra }));
  expect(run.code, run.stderr).toBe(0);
  const { relays } = JSON.parse(run.stdout) as { relays: Probe[] };
  expect(relays).toHaveLength(1);
  return relays[0]!;
}

describe.runIf(hasOpenssl)('a relay serving TLS itself (relay --tls-cert --tls-key)', () => {
  let relay: RelayProcess;

  beforeAll(async () => {
    relay = await startRelay({ args: ['--tls-cert', files.cert, '--tls-key', files.key] });
  });

  it('says wss:// when it listens', () => {
    expect(relay.child.lines[0]).toMatch(/^interlink relay listening on wss:\/\/127\.0\.0\.1:\d+ /);
    expect(relay.url).toMatch(/^wss:\/\//);
  });

  it('carries a message between sessions that trust its certificate (INTERLINK_TLS_CA)', async () => {
    await exchange('direct', relay.url, { INTERLINK_TLS_CA: files.cert });
  });

  it('answers status with the certificate trusted', async () => {
    expect(await statusOf(relay.url, { INTERLINK_TLS_CA: files.cert })).toEqual({ url: relay.url, answers: true });
  });

  it('is refused by a client that does not trust the certificate, and status says why and how to trust it', async () => {
    const probe = await statusOf(relay.url);
    expect(probe.answers).toBe(false);
    expect(probe.error).toMatch(/^certificate not trusted \(self-signed certificate\): to trust it, set INTERLINK_TLS_CA/);
  });

  it('is refused when the trusted certificate is another one', async () => {
    const other = makeCertificate(root, 'other');
    const probe = await statusOf(relay.url, { INTERLINK_TLS_CA: other.cert });
    expect(probe.error).toMatch(/^certificate not trusted/);
  });

  it('is refused by a session that does not trust it: its log says the certificate is not trusted', async () => {
    const eve: Peer = await peers.start('eve', 'e1', relay.url);
    const line = await eventually(async () => eve.stderr().split('\n').find((l) => l.includes('"relay_unreachable"')), 15_000, 'the relay_unreachable log line');
    const logged = JSON.parse(line) as { relay: string; error: string; message: string };
    expect(logged.relay).toBe(relay.url);
    expect(logged.error).toMatch(/^certificate not trusted .*INTERLINK_TLS_CA/);
    expect(logged.message).toContain('certificate not trusted');
  });
});

describe.runIf(hasOpenssl)('a plain relay behind a TLS-terminating proxy', () => {
  let relay: RelayProcess;
  let proxy: TlsProxy;

  beforeAll(async () => {
    relay = await startRelay();
    proxy = await startTlsProxy(files, relay.port);
  });
  afterAll(() => proxy?.close());

  it("carries a message between sessions that trust the proxy's certificate (NODE_EXTRA_CA_CERTS)", async () => {
    await exchange('proxied', proxy.url, { NODE_EXTRA_CA_CERTS: files.cert });
    expect(proxy.secured()).toBeGreaterThanOrEqual(2);
  });

  it('is refused by a client that does not trust it', async () => {
    const before = proxy.secured();
    expect((await statusOf(proxy.url)).error).toMatch(/^certificate not trusted/);
    expect(proxy.secured()).toBe(before);
  });

  it('is refused, though trusted, when its certificate names another host', async () => {
    const elsewhere = makeCertificate(root, 'elsewhere', 'DNS:relay.example.org');
    const wrongName = await startTlsProxy(elsewhere, relay.port);
    try {
      const probe = await statusOf(wrongName.url, { INTERLINK_TLS_CA: elsewhere.cert });
      expect(probe.error).toMatch(/^certificate is for another host \(.*127\.0\.0\.1/);
    } finally {
      await wrongName.close();
    }
  });

  it('says there is no TLS when a wss:// URL names the plain relay', async () => {
    const probe = await statusOf(relay.url.replace('ws://', 'wss://'));
    expect(probe.error).toMatch(/^no TLS on that port/);
  });
});

describe.runIf(hasOpenssl)('TLS settings that cannot work are refused with one line', () => {
  const relay = (args: string[]) => runCli(['relay', '--addr', '127.0.0.1:0', ...args], userEnv(dirs('relay')));

  it('--tls-cert without --tls-key, and the other way round (exit 64)', async () => {
    expect(expectOneLine(await relay(['--tls-cert', files.cert]), 64)).toContain('--tls-cert needs --tls-key');
    expect(expectOneLine(await relay(['--tls-key', files.key]), 64)).toContain('--tls-key needs --tls-cert');
  });

  it('an unreadable file, or a certificate and key TLS cannot use together (exit 64)', async () => {
    const missing = join(root, 'missing.pem');
    expect(expectOneLine(await relay(['--tls-cert', missing, '--tls-key', files.key]), 64)).toContain(`--tls-cert ${missing}: cannot read it`);
    expect(expectOneLine(await relay(['--tls-cert', files.cert, '--tls-key', missing]), 64)).toContain(`--tls-key ${missing}: cannot read it`);
    const swapped = await relay(['--tls-cert', files.key, '--tls-key', files.cert]);
    expect(expectOneLine(swapped, 64)).toContain('are not a PEM certificate and its private key');
  });

  it('INTERLINK_TLS_CA that is missing or holds no certificate (exit 1, naming the variable)', async () => {
    const notPem = join(root, 'not-a-certificate.pem');
    await writeFile(notPem, 'hello\n');
    for (const [path, why] of [
      [join(root, 'missing.pem'), 'cannot read it'],
      [notPem, 'no PEM certificate in it'],
    ] as const) {
      const run = await runCli(['status'], userEnv(dirs('status'), { INTERLINK_URL: 'wss://127.0.0.1:1', INTERLINK_TLS_CA: path }));
      expect(expectOneLine(run, 1)).toContain(`INTERLINK_TLS_CA ${path}: ${why}`);
    }
  });
});
