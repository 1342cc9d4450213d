/**
 * `peers.json`: the people-approved peers of this identity, `{"<petname>": {"key": "<b64url>"}}`.
 * Shared by every session of the identity; edited only under its lock with atomic
 * replacement. A petname is never silently re-pointed to another key.
 */
import { z } from 'zod';
import { visibleName } from '../config/name-characters.js';
import { checkPathName, checkSafeName, unsafePathReason } from '../config/paths.js';
import { InterlinkError } from '../errors.js';
import { parsePublicKey } from '../identity/identity.js';
import { isAcceptablePoint } from '../identity/ed25519.js';
import { crashPoint } from '../store/crash-point.js';
import { damageSentence, kindOf, type Damage } from '../store/damage.js';
import { peekJson, readJson, updateJson, type Recovery } from '../store/json-store.js';
import { audienceNames, audiencesPathOf, audiencesWith, dropMember } from './audiences.js';
import { lookalikeOf } from './lookalike.js';

const keySchema = z.string().refine((key) => {
  try {
    return isAcceptablePoint(parsePublicKey(key));
  } catch {
    return false;
  }
}, 'not a usable base64url Ed25519 public key');

/**
 * `clear: true` admits this peer's clear (unsealed) envelopes and sends it clear ones: the
 * Rust Interlink cannot seal. Only a person sets it (`peers add … --clear`).
 */
const peerEntrySchema = z.object({ key: keySchema, clear: z.boolean().optional() }).loose();

const isEntryShaped = (entry: unknown): boolean => typeof entry === 'object' && entry !== null && !Array.isArray(entry) && typeof (entry as { key?: unknown }).key === 'string';

/**
 * Checked first, so a hand edit gets words naming the form to write: `{"bob": "<key>"}`
 * is the common slip, and is refused rather than guessed at.
 */
const peersShape = z.record(z.string(), z.unknown()).superRefine((peers, ctx) => {
  for (const [name, entry] of Object.entries(peers)) {
    const reason = checkPetnameReason(name);
    if (reason !== undefined) ctx.addIssue({ code: 'custom', message: `petname ${JSON.stringify(visibleName(name))}: ${reason}`, path: [name] });
    else if (!isEntryShaped(entry)) {
      const found = typeof entry === 'object' && entry !== null && !Array.isArray(entry) ? 'an object without a "key" string' : kindOf(entry);
      ctx.addIssue({
        code: 'custom',
        message: `expected {"key": "<base64url public key>"} for ${JSON.stringify(name)}, found ${found}; write it as {${JSON.stringify(name)}: {"key": "<key>"}}`,
        path: [name],
      });
    }
  }
});

export const peersFileSchema: z.ZodType<PeersFile> = peersShape.pipe(z.record(z.string(), peerEntrySchema));

/** What stops working while peers.json is damaged (said with every report of it). */
export const PEERS_UNAVAILABLE = 'the peers it lists can neither message this identity (their messages wait on the relay) nor be messaged by petname';

export type PeersFile = Record<string, { key: string; clear?: boolean }>;
const emptyPeers = (): PeersFile => ({});

/**
 * The reserved word `self` addresses this identity's own sessions, so it is no petname.
 * A stored petname is held to the path rule only: one written before the hidden-character
 * rule keeps working (listings show it made visible) until the person renames it.
 */
export function checkPetnameReason(name: string): string | undefined {
  if (name === 'self') return '"self" is reserved for your own sessions';
  return unsafePathReason(name);
}

/** A petname that enters (command line, tool arguments): the whole rule; returns it in NFC. */
export function checkPetname(name: string): string {
  const petname = checkSafeName(name, 'petname');
  if (petname === 'self') throw new InterlinkError('bad_name', 'petname "self" is reserved for your own sessions');
  return petname;
}

/** The existing petname that looks the same as `petname`, refused as `peer_conflict` (lookalike.ts). */
export function checkNotLookalike(petname: string, existing: Iterable<string>): void {
  const other = lookalikeOf(petname, existing);
  if (other === undefined) return;
  throw new InterlinkError(
    'peer_conflict',
    `petname ${JSON.stringify(petname)} looks the same as your peer ${JSON.stringify(visibleName(other))}; choose a petname that reads differently`,
  );
}

export interface Peer {
  petname: string;
  key: string;
  /** Clear envelopes both ways (a Rust Interlink peer). */
  clear?: true;
}

export class PeerTable {
  private readonly byKey: ReadonlyMap<string, string>;
  /** Keys of peers marked `clear`. */
  readonly clear: ReadonlySet<string>;

  constructor(readonly peers: readonly Peer[]) {
    this.byKey = new Map(peers.map((p) => [p.key, p.petname]));
    this.clear = new Set(peers.filter((p) => p.clear === true).map((p) => p.key));
  }

  petnameOf(key: string): string | undefined {
    return this.byKey.get(key);
  }

  has(key: string): boolean {
    return this.byKey.has(key);
  }

  keyOf(petname: string): string | undefined {
    return this.peers.find((p) => p.petname === petname)?.key;
  }
}

function toTable(file: PeersFile): PeerTable {
  return new PeerTable(
    Object.entries(file)
      .map(([petname, entry]) => ({ petname, key: entry.key, ...(entry.clear === true && { clear: true as const }) }))
      .sort((a, b) => a.petname.localeCompare(b.petname)),
  );
}

const storeOptions = { unavailable: PEERS_UNAVAILABLE };

/** For the server and writers: a damaged file is moved aside, reported, and read as empty. */
export async function loadPeers(path: string): Promise<{ table: PeerTable; recovered?: Recovery }> {
  const { value, recovered } = await readJson(path, peersFileSchema, emptyPeers, storeOptions);
  return recovered ? { table: toTable(value), recovered } : { table: toTable(value) };
}

/** For views (status, inbox, peers list, pair list): never moves or writes; a damaged file is described. */
export async function readPeers(path: string): Promise<{ table: PeerTable; damage?: Damage & { message: string } }> {
  const read = await peekJson(path, peersFileSchema);
  if (read.kind === 'ok') return { table: toTable(read.value) };
  if (read.kind === 'missing') return { table: toTable(emptyPeers()) };
  const damage = { file: path, problem: read.reason, unavailable: PEERS_UNAVAILABLE };
  return { table: toTable(emptyPeers()), damage: { ...damage, message: damageSentence(damage) } };
}

export type AddPeerOutcome = 'added' | 'unchanged' | 'updated';

/** The arguments of an add, checked before peers.json is touched. Returns the petname in NFC. */
export function checkNewPeer(name: string, key: string, own: string | undefined): string {
  const petname = checkPetname(name);
  parsePublicKey(key, `key for ${petname}`);
  // Trusting one's own key under a petname would make "self" and that petname two names
  // for the same sessions; "self" already reaches them.
  if (key === own) throw new InterlinkError('own_key', `that key is this identity's own; your other sessions are reached as "self", not as a peer`);
  return petname;
}

/**
 * `own`: this identity's key, refused as a peer. `clear`: mark the peer as one that
 * exchanges clear envelopes (a Rust Interlink peer); adding an existing peer with it marks
 * that peer. Only removing the peer takes the mark away.
 */
export async function addPeer(path: string, name: string, key: string, own?: string, options: { clear?: boolean } = {}): Promise<{ outcome: AddPeerOutcome; petname: string; recovered?: Recovery }> {
  const petname = checkNewPeer(name, key, own);
  const mark = options.clear === true ? { clear: true } : {};
  return updateJson(path, peersFileSchema, emptyPeers, async (current): Promise<{ next: PeersFile | undefined; result: { outcome: AddPeerOutcome; petname: string } }> => {
    const existing = current[petname];
    if (existing !== undefined) {
      if (existing.key === key && options.clear === true && existing.clear !== true) return { next: { ...current, [petname]: { ...existing, clear: true } }, result: { outcome: 'updated', petname } };
      if (existing.key === key) return { next: undefined, result: { outcome: 'unchanged', petname } };
      throw new InterlinkError(
        'peer_conflict',
        `petname ${petname} already names a different key (${existing.key}); remove it first if the peer really changed keys`,
      );
    }
    const other = Object.entries(current).find(([, entry]) => entry.key === key);
    if (other !== undefined) {
      throw new InterlinkError('peer_conflict', `that key is already your peer ${visibleName(other[0])}; remove that petname first to rename it`);
    }
    checkNotLookalike(petname, Object.keys(current));
    await checkNotAudience(path, petname);
    await clearStaleMemberships(path, petname);
    return { next: { ...current, [petname]: { key, ...mark } }, result: { outcome: 'added', petname } };
  }, storeOptions);
}

/**
 * A new petname must not name an audience, nor look like one: `to` would name both. Read
 * without audiences.json's lock; pairing checks early with it, and addPeer again under
 * peers.json's lock, which every writer of audience names takes first (audiences.ts).
 */
export async function checkNotAudience(peersPath: string, petname: string): Promise<void> {
  const names = await audienceNames(audiencesPathOf(peersPath));
  const audience = names.includes(petname) ? petname : lookalikeOf(petname, names);
  if (audience === undefined) return;
  const how = audience === petname ? 'names' : 'looks the same as';
  throw new InterlinkError('peer_conflict', `petname ${JSON.stringify(petname)} ${how} your audience ${JSON.stringify(visibleName(audience))}; choose another petname, or remove the audience first`);
}

/**
 * An audience that still lists a petname that is not a peer is left from a removal cut
 * short (removePeer): cleared before the petname names a peer again, so the new peer does
 * not inherit the old one's memberships.
 */
async function clearStaleMemberships(peersPath: string, petname: string): Promise<void> {
  const path = audiencesPathOf(peersPath);
  if ((await audiencesWith(path, petname)).length > 0) await dropMember(path, petname);
}

/**
 * The path rule only, and the name as typed or in NFC: a petname stored before the
 * hidden-character rule can be removed. The petname also leaves every audience, after
 * peers.json is written: that write is what stops the trust, so it comes first and alone
 * decides. A process that dies between the two leaves the petname listed in
 * audiences.json, where readers leave out a member that is no longer a peer
 * (effectiveMembers), `audience list` marks it, and a later peer of that petname clears
 * it before it is added (addPeer), so no message reaches the old or the new peer by it.
 */
export async function removePeer(path: string, name: string): Promise<{ key: string; audiences?: string[]; recovered?: Recovery }> {
  if (name === 'self') throw new InterlinkError('bad_name', 'petname "self" is reserved for your own sessions');
  checkPathName(name, 'petname');
  const { petname, key, recovered } = await updateJson(path, peersFileSchema, emptyPeers, (current) => {
    const stored = current[name] !== undefined ? name : name.normalize('NFC');
    const existing = current[stored];
    if (existing === undefined) throw new InterlinkError('unknown_peer', `no peer is called ${visibleName(name)}`);
    const next = { ...current };
    delete next[stored];
    return { next, result: { petname: stored, key: existing.key } };
  }, storeOptions);
  crashPoint('peers.remove.after_peers');
  const { audiences } = await dropMember(audiencesPathOf(path), petname);
  return { key, ...(audiences.length > 0 && { audiences }), ...(recovered && { recovered }) };
}
