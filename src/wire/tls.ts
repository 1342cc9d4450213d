/**
 * TLS for relay connections (DESIGN.md "Encrypted transport"): the certificate and key a
 * relay serves `wss://` with (`relay --tls-cert/--tls-key`), and the certificates a client
 * trusts besides Node's own (INTERLINK_TLS_CA). Both are PEM files read once, when the
 * command starts, so a missing or wrong file is one line then, not a failure at every
 * connection later.
 */
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createSecureContext, rootCertificates } from 'node:tls';
import { InterlinkError, messageOf, type ErrorCode } from '../errors.js';

/** What a relay serves TLS with: PEM text. */
export interface ServerTls {
  cert: string;
  key: string;
}

/** What a client trusts for `wss://` relays: Node's bundled CAs and the person's certificates. */
export interface ClientTls {
  ca: readonly string[];
}

const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----/g;

function readPem(path: string, name: string, code: ErrorCode): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    throw new InterlinkError(code, `${name} ${path}: cannot read it (${messageOf(err)})`);
  }
}

/** The relay's certificate (chain) and private key; refused unless TLS can use them together. */
export function readServerTls(certPath: string, keyPath: string): ServerTls {
  const tls = { cert: readPem(certPath, '--tls-cert', 'usage'), key: readPem(keyPath, '--tls-key', 'usage') };
  try {
    createSecureContext(tls);
  } catch (err) {
    throw new InterlinkError('usage', `--tls-cert ${certPath} and --tls-key ${keyPath} are not a PEM certificate and its private key (${messageOf(err)})`);
  }
  return tls;
}

/**
 * The certificates in INTERLINK_TLS_CA, added to (not replacing) the public CAs Node
 * ships: a list that mixes a public relay and a self-signed one trusts both. Node reads
 * NODE_EXTRA_CA_CERTS only into its default list, which an explicit `ca` replaces, so
 * with this variable set that one no longer applies to relays.
 */
export function readClientTls(caPath: string | undefined): ClientTls | undefined {
  if (caPath === undefined) return undefined;
  const certificates = readPem(caPath, 'INTERLINK_TLS_CA', 'bad_config').match(PEM_CERTIFICATE) ?? [];
  if (certificates.length === 0) throw new InterlinkError('bad_config', `INTERLINK_TLS_CA ${caPath}: no PEM certificate in it (-----BEGIN CERTIFICATE-----)`);
  for (const pem of certificates) {
    try {
      new X509Certificate(pem);
    } catch (err) {
      throw new InterlinkError('bad_config', `INTERLINK_TLS_CA ${caPath}: a certificate in it cannot be read (${messageOf(err)})`);
    }
  }
  return { ca: [...rootCertificates, ...certificates] };
}

/** The `ws` client options that make it trust `tls` (none: Node's defaults). */
export function trustOptions(tls: ClientTls | undefined): { ca?: string[] } {
  return tls === undefined ? {} : { ca: [...tls.ca] };
}
