/**
 * TLS for the wss:// tests: a self-signed certificate made by the openssl CLI, and a
 * TLS-terminating proxy (node:tls piping each connection to a plain relay port, as a
 * reverse proxy in stream mode does).
 */
import { spawnSync } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { join } from 'node:path';
import { createServer, type Server } from 'node:tls';

export const OPENSSL = '/usr/bin/openssl';
export const hasOpenssl = spawnSync(OPENSSL, ['version']).status === 0;

export interface CertificateFiles {
  cert: string;
  key: string;
}

/**
 * A self-signed P-256 certificate, valid one day, written to `dir` as `<name>.crt` and
 * `<name>.key`; by default for 127.0.0.1 and localhost (`altNames` as openssl spells them).
 */
export function makeCertificate(dir: string, name = 'relay', altNames = 'IP:127.0.0.1,DNS:localhost'): CertificateFiles {
  const files = { cert: join(dir, `${name}.crt`), key: join(dir, `${name}.key`) };
  const args = ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-subj', '/CN=localhost'];
  args.push('-addext', `subjectAltName=${altNames}`, '-days', '1', '-keyout', files.key, '-out', files.cert);
  const made = spawnSync(OPENSSL, args, { encoding: 'utf8' });
  if (made.status !== 0) throw new Error(`openssl could not make a certificate: ${made.stderr}`);
  return files;
}

export interface TlsProxy {
  url: string;
  /** Connections that completed the TLS handshake. */
  secured: () => number;
  close: () => Promise<void>;
}

/** Terminates TLS with `files` on a free loopback port and pipes each connection to `port`. */
export async function startTlsProxy(files: CertificateFiles, port: number): Promise<TlsProxy> {
  let secured = 0;
  const open = new Set<() => void>();
  const server: Server = createServer({ key: await readFile(files.key), cert: await readFile(files.cert) }, (client) => {
    secured += 1;
    const upstream = connect(port, '127.0.0.1');
    client.pipe(upstream).pipe(client);
    const close = (): void => {
      client.destroy();
      upstream.destroy();
      open.delete(close);
    };
    open.add(close);
    client.on('error', close).on('close', close);
    upstream.on('error', close).on('close', close);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const listening = typeof address === 'object' && address !== null ? address.port : 0;
  return {
    url: `wss://127.0.0.1:${listening}`,
    secured: () => secured,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        for (const close of [...open]) close();
      }),
  };
}
