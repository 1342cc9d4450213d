import type { Config } from '../../config/env.js';
import { visibleName } from '../../config/name-characters.js';
import { InterlinkError, isInterlinkError } from '../../errors.js';
import { fingerprintOf, loadIdentity, parsePublicKey } from '../../identity/identity.js';
import { addPeer, checkNewPeer, readPeers, removePeer } from '../../peers/peers.js';
import { expectPositionals, parse, print, unknownAction } from '../args.js';

export const peersHelp = `usage: interlink-mcp peers list [--json]
       interlink-mcp peers add <petname> <key> [--clear] [--json]
       interlink-mcp peers remove <petname> [--json]

Edits peers.json ($INTERLINK_PEERS or <config>/peers.json): the identities whose messages
this machine accepts. A petname is never re-pointed to a different key; remove it first.
Removing a peer also takes it out of every audience (\`interlink-mcp audience\`); a petname
may not name an audience, nor look like one.
A damaged peers.json: \`list\` exits 1 and leaves it as it is; \`add\` and \`remove\` move it
aside (they say where) and start a fresh file.
A key that is not a public key, or a petname that is not allowed, is a usage error (64);
this identity's own key is refused (its sessions are reached as "self").
Messages are sealed to each peer, so relays cannot read them. --clear marks a peer that
cannot seal (the Rust Interlink): its clear envelopes are admitted, and it is sent clear
ones that every relay on the way can read. Remove the peer to take the mark away.`;

/** This identity's key, when there is one yet (an add before the first keygen is allowed). */
async function ownKey(keyPath: string): Promise<string | undefined> {
  try {
    return (await loadIdentity(keyPath)).key;
  } catch (err) {
    if (isInterlinkError(err, 'key_missing')) return undefined;
    throw err;
  }
}

/** A malformed petname or key is a mistake in the command line: exit 64, not 1. */
function checkAddArguments(petname: string, key: string, own: string | undefined): string {
  try {
    return checkNewPeer(petname, key, own);
  } catch (err) {
    if (isInterlinkError(err, 'bad_key') || isInterlinkError(err, 'bad_name')) throw new InterlinkError('usage', err.message);
    throw err;
  }
}

export async function peers(argv: readonly string[], config: Config): Promise<void> {
  const [action, ...rest] = argv;
  const args = parse(rest, { json: { type: 'boolean' }, ...(action === 'add' && { clear: { type: 'boolean' } }) });
  const json = args.values.json === true;
  const path = config.peersPath;
  switch (action) {
    case 'list': {
      expectPositionals(args, 0, 'interlink-mcp peers list');
      const { table, damage } = await readPeers(path);
      if (damage !== undefined) throw new InterlinkError('corrupt', damage.message);
      const rows = table.peers.map((p) => ({ petname: p.petname, key: p.key, fingerprint: fingerprintOf(parsePublicKey(p.key)), ...(p.clear === true && { clear: true }) }));
      print(json, { peers: rows }, () =>
        rows.length === 0 ? 'no peers yet (add one with `interlink-mcp peers add <petname> <key>`)' : rows.map((r) => `${visibleName(r.petname)}  ${r.fingerprint}  ${r.key}${r.clear === true ? '  (clear)' : ''}`).join('\n'),
      );
      return;
    }
    case 'add': {
      const [typed, key] = expectPositionals(args, 2, 'interlink-mcp peers add <petname> <key>') as [string, string];
      const own = await ownKey(config.keyPath);
      const petname = checkAddArguments(typed, key, own);
      const clear = args.values.clear === true;
      const { outcome } = await addPeer(path, petname, key, own, { clear });
      const clearNote = 'its clear (unsealed) envelopes are admitted, and it is sent clear ones';
      const words = {
        added: clear ? `added ${petname} as clear: ${clearNote}` : `added ${petname}`,
        updated: `marked ${petname} clear: ${clearNote}`,
        unchanged: `${petname} already has that key; nothing changed`,
      };
      print(json, { petname, key, outcome, ...(clear && { clear }) }, () => words[outcome]);
      return;
    }
    case 'remove': {
      const [petname] = expectPositionals(args, 1, 'interlink-mcp peers remove <petname>') as [string];
      const { key, audiences } = await removePeer(path, petname);
      const from = audiences === undefined ? '' : ` (and from the audiences ${audiences.map(visibleName).join(', ')})`;
      print(json, { petname, key, outcome: 'removed', ...(audiences !== undefined && { audiences }) }, () => `removed ${visibleName(petname)}${from}`);
      return;
    }
    default:
      throw unknownAction(action, ['list', 'add', 'remove']);
  }
}
