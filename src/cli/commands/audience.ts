import type { Config } from '../../config/env.js';
import { visibleName } from '../../config/name-characters.js';
import { InterlinkError, isInterlinkError } from '../../errors.js';
import { MAX_AUDIENCES, MAX_RECIPIENTS, addToAudience, audiencesPathOf, readAudiences, removeFromAudience } from '../../peers/audiences.js';
import { readPeers } from '../../peers/peers.js';
import { expectPositionals, parse, print, unknownAction } from '../args.js';

export const audienceHelp = `usage: interlink-mcp audience list [--json]
       interlink-mcp audience add <name> <petname>... [--json]
       interlink-mcp audience remove <name> [<petname>...] [--json]

Edits audiences.json (beside peers.json): named groups of peers, so one message can be
sent to them all. \`add\` creates the audience or adds members to it; every member must be
a peer now (\`interlink-mcp peers list\`), and "self" is none. \`remove\` with petnames takes
those members out (the audience goes with its last one); without, it removes the whole
audience. Removing a peer (\`peers remove\`) takes it out of every audience.
An audience holds at most ${MAX_RECIPIENTS} members (what one send reaches); there are at most
${MAX_AUDIENCES} audiences. An audience name follows the petname rule, and may not be a
petname or look like one, nor like another audience's name: a message's "to" names either.
Agents can list audiences (list_audiences) but never change them.
A name that is not allowed, or missing arguments, is a usage error (64); an unknown peer
or audience, a name taken, a bound reached or a damaged file exits 1. A damaged
audiences.json: \`list\` exits 1 and leaves it as it is; \`add\` and \`remove\` move it aside
(they say where) and start a fresh file.`;

/** A malformed name is a mistake in the command line: exit 64, not 1. */
async function asUsage<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (err) {
    if (isInterlinkError(err, 'bad_name')) throw new InterlinkError('usage', err.message);
    throw err;
  }
}

async function list(json: boolean, config: Config): Promise<void> {
  const [audiences, peers] = await Promise.all([readAudiences(audiencesPathOf(config.peersPath)), readPeers(config.peersPath)]);
  const damage = audiences.damage ?? peers.damage;
  if (damage !== undefined) throw new InterlinkError('corrupt', damage.message);
  const current = new Set(peers.table.peers.map((p) => p.petname));
  // A member that is no longer a peer is left from a removal cut short or a hand edit:
  // shown, so the person can take it out, and never sent to.
  const rows = audiences.table.audiences.map((a) => ({
    name: a.name,
    members: a.members,
    ...(a.members.some((m) => !current.has(m)) && { not_peers: a.members.filter((m) => !current.has(m)) }),
  }));
  const member = (m: string) => (current.has(m) ? visibleName(m) : `${visibleName(m)} (no longer a peer)`);
  print(json, { audiences: rows }, () =>
    rows.length === 0
      ? 'no audiences yet (add one with `interlink-mcp audience add <name> <petname>...`)'
      : rows.map((r) => `${visibleName(r.name)}  ${r.members.map(member).join(', ')}`).join('\n'),
  );
}

export async function audience(argv: readonly string[], config: Config): Promise<void> {
  const [action, ...rest] = argv;
  const args = parse(rest, { json: { type: 'boolean' } });
  const json = args.values.json === true;
  const path = audiencesPathOf(config.peersPath);
  switch (action) {
    case 'list': {
      expectPositionals(args, 0, 'interlink-mcp audience list');
      return list(json, config);
    }
    case 'add': {
      const [name, ...petnames] = args.positionals;
      if (name === undefined || petnames.length === 0) throw new InterlinkError('usage', 'usage: interlink-mcp audience add <name> <petname>...');
      const result = await asUsage(() => addToAudience(path, config.peersPath, name, petnames));
      const words = result.added.length === 0 ? `${visibleName(result.name)} already has them; nothing changed` : `added ${result.added.map(visibleName).join(', ')} to ${visibleName(result.name)}`;
      print(json, { name: result.name, added: result.added, members: result.members }, () => `${words} (${result.members.length} of ${MAX_RECIPIENTS} members)`);
      return;
    }
    case 'remove': {
      const [name, ...petnames] = args.positionals;
      if (name === undefined) throw new InterlinkError('usage', 'usage: interlink-mcp audience remove <name> [<petname>...]');
      const result = await asUsage(() => removeFromAudience(path, name, petnames.length === 0 ? undefined : petnames));
      const shown = visibleName(result.name);
      const words =
        result.members.length === 0
          ? petnames.length === 0
            ? `removed the audience ${shown}`
            : `removed ${result.removed.map(visibleName).join(', ')} from ${shown}, its last members: the audience is gone`
          : `removed ${result.removed.map(visibleName).join(', ')} from ${shown} (${result.members.length} ${result.members.length === 1 ? 'member' : 'members'} left)`;
      print(json, { name: result.name, removed: result.removed, members: result.members }, () => words);
      return;
    }
    default:
      throw unknownAction(action, ['list', 'add', 'remove']);
  }
}
