/**
 * This identity's peers as the running session sees them: `peers.json`, read again
 * whenever it changed on disk (so a removal applies before the next message is judged),
 * and whether it can be trusted to be complete (DESIGN.md "The agent: one session").
 */
import { statSync } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { InterlinkError } from '../errors.js';
import { fingerprintOf, parsePublicKey } from '../identity/identity.js';
import { audiencesPathOf, effectiveMembers, readAudiences } from '../peers/audiences.js';
import { PeerTable, addPeer, loadPeers, removePeer } from '../peers/peers.js';

export class PeerWatch {
  private cache: { stamp: string; table: PeerTable; damaged: boolean } | undefined;

  constructor(
    private readonly path: string,
    /** This identity's key: `self` resolves to it, and it can never be added as a peer. */
    private readonly me: string,
  ) {}

  /** peers.json, read again whenever it changed on disk, so removals apply at once. */
  async peers(): Promise<PeerTable> {
    return (await this.trust()).table;
  }

  /**
   * The peer table and whether it can be trusted to be complete. When peers.json was
   * found damaged (and moved aside), the table is empty until a person writes it again;
   * meanwhile a message from an unknown key may come from a peer whose entry was lost,
   * so inbound holds such messages on the relay instead of dropping them. "Damaged" is
   * read from the disk (an aside newer than peers.json), so every session of the
   * identity, and a restarted one, agrees.
   */
  async trust(): Promise<{ table: PeerTable; damaged: boolean }> {
    if (this.cache?.stamp !== peersStamp(this.path)) {
      const { table } = await loadPeers(this.path);
      // Loading may itself have moved a damaged file aside: stamp what is there now.
      this.cache = { stamp: peersStamp(this.path), table, damaged: await peersDamaged(this.path) };
    }
    return { table: this.cache.table, damaged: this.cache.damaged };
  }

  /** The key a petname (or `self`) names; a clear error when none does. */
  async resolve(to: string): Promise<{ key: string; petname?: string; clear?: true }> {
    if (to === 'self') return { key: this.me };
    const { table, damaged } = await this.trust();
    const key = table.keyOf(to);
    if (key === undefined && damaged) {
      throw new InterlinkError('unknown_peer', `no peer is called ${to} because peers.json was damaged and moved aside; a person must restore it (the server log says where the original is)`);
    }
    if (key === undefined) throw new InterlinkError('unknown_peer', `no peer is called ${to}`, undefined, { hint: { tool: 'see list_peers; a person adds peers', cli: 'see `interlink-mcp peers list`' } });
    return { key, petname: to, ...(table.clear.has(key) && { clear: true as const }) };
  }

  async list() {
    const table = await this.peers();
    return { peers: table.peers.map((p) => ({ petname: p.petname, key: p.key, fingerprint: fingerprintOf(parsePublicKey(p.key)), ...(p.clear === true && { clear: true }) })) };
  }

  /**
   * The audiences a person defined, each with the members that are peers now. Read-only:
   * agents never change audiences, and a damaged file is described, not moved.
   */
  async audiences() {
    const [{ table, damage }, peers] = await Promise.all([readAudiences(audiencesPathOf(this.path)), this.peers()]);
    if (damage !== undefined) throw new InterlinkError('corrupt', damage.message);
    return { audiences: effectiveMembers(table, peers).audiences.map((a) => ({ name: a.name, members: [...a.members] })) };
  }

  /**
   * The members that are peers now of the audience `name`, or undefined when there is no
   * such audience. A damaged audiences.json is `corrupt`: the name may be an audience in it.
   */
  async audienceMembers(name: string): Promise<readonly string[] | undefined> {
    const [{ table, damage }, peers] = await Promise.all([readAudiences(audiencesPathOf(this.path)), this.peers()]);
    if (damage !== undefined) throw new InterlinkError('corrupt', `no peer is called ${name}, and ${damage.message}`);
    return effectiveMembers(table, peers).membersOf(name.normalize('NFC'));
  }

  async add(petname: string, key: string) {
    const result = await addPeer(this.path, petname, key, this.me);
    return { petname: result.petname, key, outcome: result.outcome };
  }

  async remove(petname: string) {
    const result = await removePeer(this.path, petname);
    return { petname, key: result.key, outcome: 'removed' as const, ...(result.audiences !== undefined && { audiences: result.audiences }) };
  }
}

/**
 * What peers.json and its directory look like on disk: another process's atomic replace
 * (new inode), edit (size, mtime) or move aside (the directory's mtime) changes it. Taken
 * before every message is judged and every send is routed, so it is two synchronous
 * stats, a few microseconds each: the asynchronous ones cost a round trip through the
 * thread pool and two promises per message, the serve process's largest cost after GC.
 */
function peersStamp(path: string): string {
  const statOf = (p: string) => {
    try {
      return statSync(p);
    } catch {
      return undefined; // absent or unreadable: loading it says which
    }
  };
  const file = statOf(path);
  const dir = statOf(dirname(path));
  return `${file ? `${file.ino}:${file.size}:${file.mtimeMs}` : 'absent'}|${dir?.mtimeMs ?? 0}`;
}

/** True while a damaged peers.json moved aside is newer than the peers.json in place (if any). */
async function peersDamaged(path: string): Promise<boolean> {
  const prefix = `${basename(path)}.corrupt-`;
  const asides = (await readdir(dirname(path)).catch(() => [] as string[])).filter((name) => name.startsWith(prefix));
  if (asides.length === 0) return false;
  // A rename keeps the file's mtime but sets its ctime: the ctime says when it was moved aside.
  const movedAt = await Promise.all(asides.map(async (name) => (await stat(join(dirname(path), name)).catch(() => undefined))?.ctimeMs ?? 0));
  const current = await stat(path).catch(() => undefined);
  return current === undefined || current.mtimeMs < Math.max(...movedAt);
}
