import type { Config } from '../../config/env.js';
import { backupIdentity, createIdentity, loadIdentity } from '../../identity/identity.js';
import { expectPositionals, parse, print } from '../args.js';

export const keygenHelp = `usage: interlink-mcp keygen [--force] [--json]

Creates this machine's identity (an Ed25519 key) at $INTERLINK_KEY or <config>/id.key,
readable only by you. Refuses to replace an existing key unless --force is given; then
the old key is first kept as <key file>.<date>.bak (mode 0600, e.g.
id.key.20261201T110045Z.bak) and the output says where.`;

export async function keygen(argv: readonly string[], config: Config): Promise<void> {
  const args = parse(argv, { force: { type: 'boolean' }, json: { type: 'boolean' } });
  expectPositionals(args, 0, 'interlink-mcp keygen [--force] [--json]');
  const path = config.keyPath;
  const force = args.values.force === true;
  const backup = force ? await backupIdentity(path) : undefined;
  const identity = await createIdentity(path, { force });
  print(args.values.json === true, { key: identity.key, fingerprint: identity.fingerprint, path, ...(backup !== undefined && { backup }) }, () =>
    [
      `created ${path}`,
      `key          ${identity.key}`,
      `fingerprint  ${identity.fingerprint}`,
      ...(backup !== undefined ? [`the old key is kept in ${backup}`] : []),
    ].join('\n'),
  );
}

export const whoamiHelp = `usage: interlink-mcp whoami [--json]

Prints this identity's public key (what peers add) and its fingerprint (what people compare).`;

export async function whoami(argv: readonly string[], config: Config): Promise<void> {
  const args = parse(argv, { json: { type: 'boolean' } });
  expectPositionals(args, 0, 'interlink-mcp whoami [--json]');
  const identity = await loadIdentity(config.keyPath);
  print(args.values.json === true, { key: identity.key, fingerprint: identity.fingerprint }, () =>
    [`key          ${identity.key}`, `fingerprint  ${identity.fingerprint}`].join('\n'),
  );
}
