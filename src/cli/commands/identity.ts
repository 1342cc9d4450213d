import { keyPath } from '../../config/paths.js';
import { createIdentity, loadIdentity } from '../../identity/identity.js';
import { expectPositionals, parse, print } from '../args.js';

export const keygenHelp = `usage: interlink-mcp keygen [--force] [--json]

Creates this machine's identity (an Ed25519 key) at $INTERLINK_KEY or <config>/id.key,
readable only by you. Refuses to replace an existing key unless --force is given.`;

export async function keygen(argv: readonly string[]): Promise<void> {
  const args = parse(argv, { force: { type: 'boolean' }, json: { type: 'boolean' } });
  expectPositionals(args, 0, 'interlink-mcp keygen [--force] [--json]');
  const path = keyPath();
  const identity = await createIdentity(path, { force: args.values.force === true });
  print(args.values.json === true, { key: identity.key, fingerprint: identity.fingerprint, path }, () =>
    [`created ${path}`, `key          ${identity.key}`, `fingerprint  ${identity.fingerprint}`].join('\n'),
  );
}

export const whoamiHelp = `usage: interlink-mcp whoami [--json]

Prints this identity's public key (what peers add) and its fingerprint (what people compare).`;

export async function whoami(argv: readonly string[]): Promise<void> {
  const args = parse(argv, { json: { type: 'boolean' } });
  expectPositionals(args, 0, 'interlink-mcp whoami [--json]');
  const identity = await loadIdentity(keyPath());
  print(args.values.json === true, { key: identity.key, fingerprint: identity.fingerprint }, () =>
    [`key          ${identity.key}`, `fingerprint  ${identity.fingerprint}`].join('\n'),
  );
}
