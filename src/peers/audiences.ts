/**
 * `audiences.json`, beside peers.json: named groups of peers a person defines,
 * `{"<audience>": ["<petname>", …]}`, so one send can reach them all. Only a person
 * edits it (the CLI); agents read it. Edited under its sidecar lock with atomic
 * replacement, like peers.json (json-store.ts).
 *
 * Audience names and petnames share one namespace: a message's `to` names either, so a
 * name (or one that looks the same, lookalike.ts) is never both, nor two audiences.
 *
 * Lock order: a writer that decides by what both files hold (addToAudience, addPeer)
 * takes peers.json's lock first, then this file's; nothing takes them the other way round.
 */
import { dirname, join } from 'node:path';
import { z } from 'zod';
import { visibleName } from '../config/name-characters.js';
import { checkPathName, checkSafeName } from '../config/paths.js';
import { InterlinkError } from '../errors.js';
import { damageSentence, kindOf, type Damage } from '../store/damage.js';
import { peekJson, updateJson, type Recovery } from '../store/json-store.js';
import { withFileLock } from '../store/lock.js';
import { lookalikeOf } from './lookalike.js';
import { checkPetnameReason, readPeers, type PeerTable } from './peers.js';

/** The most recipients one send reaches, so the most members an audience may hold. */
export const MAX_RECIPIENTS = 32;
/** The most audiences an identity may define: the file stays small enough to read per send. */
export const MAX_AUDIENCES = 256;

/** What stops working while audiences.json is damaged (said with every report of it). */
export const AUDIENCES_UNAVAILABLE = 'its audiences can be neither listed nor sent to (peers are still reached by petname)';

/** audiences.json in the directory of peers.json (whatever INTERLINK_PEERS names). */
export function audiencesPathOf(peersPath: string): string {
  return join(dirname(peersPath), 'audiences.json');
}

export type AudiencesFile = Record<string, string[]>;
const emptyAudiences = (): AudiencesFile => ({});

/** Why one hand-written entry is refused, in words that name it and the form to write; undefined when it is fine. */
function entryProblem(name: string, members: unknown): string | undefined {
  const quoted = JSON.stringify(name);
  const nameReason = checkPetnameReason(name);
  if (nameReason !== undefined) return `audience ${JSON.stringify(visibleName(name))}: ${nameReason}`;
  if (!Array.isArray(members)) return `expected a list of petnames for ${quoted}, found ${kindOf(members)}; write it as {${quoted}: ["<petname>", …]}`;
  const seen = new Set<string>();
  const list: readonly unknown[] = members;
  for (const member of list) {
    if (typeof member !== 'string') return `${quoted} lists ${kindOf(member)} where a petname belongs`;
    const reason = checkPetnameReason(member);
    if (reason !== undefined) return `${quoted} lists the petname ${JSON.stringify(visibleName(member))}: ${reason}`;
    if (seen.has(member)) return `${quoted} lists ${JSON.stringify(visibleName(member))} twice`;
    seen.add(member);
  }
  if (members.length > MAX_RECIPIENTS) return `${quoted} has ${members.length} members, more than the ${MAX_RECIPIENTS} one send reaches`;
  return undefined;
}

/**
 * Checked entry by entry first, so a hand edit is told which audience is wrong and how.
 * What needs peers.json (members being peers, names not being petnames) is not checked
 * here: readers leave out a member that is no longer a peer (effectiveMembers).
 */
const audiencesShape = z.record(z.string(), z.unknown()).superRefine((file, ctx) => {
  const count = Object.keys(file).length;
  if (count > MAX_AUDIENCES) ctx.addIssue({ code: 'custom', message: `it defines ${count} audiences, more than the ${MAX_AUDIENCES} allowed` });
  for (const [name, members] of Object.entries(file)) {
    const problem = entryProblem(name, members);
    if (problem !== undefined) ctx.addIssue({ code: 'custom', message: problem, path: [name] });
  }
});

export const audiencesFileSchema: z.ZodType<AudiencesFile> = audiencesShape.pipe(z.record(z.string(), z.array(z.string())));

export interface Audience {
  name: string;
  /** Petnames, sorted. */
  members: string[];
}

const byText = (a: string, b: string): number => a.localeCompare(b);

export class AudienceTable {
  private readonly byName: ReadonlyMap<string, readonly string[]>;

  /** Sorted by name. */
  constructor(readonly audiences: readonly Audience[]) {
    this.byName = new Map(audiences.map((a) => [a.name, a.members]));
  }

  membersOf(name: string): readonly string[] | undefined {
    return this.byName.get(name);
  }
}

function toTable(file: AudiencesFile): AudienceTable {
  return new AudienceTable(
    Object.entries(file)
      .map(([name, members]) => ({ name, members: [...members].sort(byText) }))
      .sort((a, b) => byText(a.name, b.name)),
  );
}

/**
 * The table as a send should use it: only members that are peers now. A member that is
 * not is left from a removal cut short (removePeer) or a hand edit, and must not be sent
 * to. An audience keeps its place even when none of its members is left.
 */
export function effectiveMembers(table: AudienceTable, peers: PeerTable): AudienceTable {
  const current = new Set(peers.peers.map((p) => p.petname));
  return new AudienceTable(table.audiences.map((a) => ({ name: a.name, members: a.members.filter((m) => current.has(m)) })));
}

const storeOptions = { unavailable: AUDIENCES_UNAVAILABLE };

/** For views and for the sending server: never moves or writes; damage described (like readPeers in src/peers/peers.ts). */
export async function readAudiences(path: string): Promise<{ table: AudienceTable; damage?: Damage & { message: string } }> {
  const read = await peekJson(path, audiencesFileSchema);
  if (read.kind === 'ok') return { table: toTable(read.value) };
  if (read.kind === 'missing') return { table: toTable(emptyAudiences()) };
  const damage = { file: path, problem: read.reason, unavailable: AUDIENCES_UNAVAILABLE };
  return { table: toTable(emptyAudiences()), damage: { ...damage, message: damageSentence(damage) } };
}

/** An audience name that enters (command line): the petname rule; returns it in NFC. */
export function checkAudienceName(name: string): string {
  const audience = checkSafeName(name, 'audience name');
  if (audience === 'self') throw new InterlinkError('bad_name', 'audience name "self" is not allowed: it is reserved for your own sessions');
  return audience;
}

/** A member that enters: "self" is no member; a stored petname is held to the path rule only (as removePeer). */
function checkMemberName(petname: string): string {
  if (petname === 'self') throw new InterlinkError('bad_name', '"self" cannot be a member: an audience holds peers, and your own sessions are reached as "self"');
  return checkPathName(petname, 'petname');
}

/** The one of `names` that `name` is: as typed, or in NFC. */
function storedName(names: Iterable<string>, name: string): string | undefined {
  const all = new Set(names);
  if (all.has(name)) return name;
  const normal = name.normalize('NFC');
  return all.has(normal) ? normal : undefined;
}

/** Refuses a new audience name that is, or looks like, a petname or another audience's name. */
function checkNameFree(name: string, petnames: readonly string[], audiences: readonly string[]): void {
  if (petnames.includes(name)) {
    throw new InterlinkError('audience_conflict', `${JSON.stringify(name)} is already your peer's petname; an audience needs a name no peer has, so that "to" names one of them`);
  }
  const peer = lookalikeOf(name, petnames);
  if (peer !== undefined) throw new InterlinkError('audience_conflict', `audience name ${JSON.stringify(name)} looks the same as your peer ${JSON.stringify(visibleName(peer))}; choose a name that reads differently`);
  const other = lookalikeOf(name, audiences);
  if (other !== undefined) throw new InterlinkError('audience_conflict', `audience name ${JSON.stringify(name)} looks the same as your audience ${JSON.stringify(visibleName(other))}; choose a name that reads differently`);
}

/** Adds members (creating the audience); every petname must be in peers.json now. */
export async function addToAudience(
  path: string,
  peersPath: string,
  name: string,
  petnames: readonly string[],
): Promise<{ name: string; added: string[]; members: string[]; recovered?: Recovery }> {
  const audience = checkAudienceName(name);
  const typed = petnames.map(checkMemberName);
  if (typed.length === 0) throw new InterlinkError('usage', `name at least one peer to add to ${audience}`);
  // peers.json's lock keeps its petnames as they are read until audiences.json is written,
  // so a peer removed or added meanwhile cannot slip past the checks below.
  return withFileLock(peersPath, async () => {
    const { table: peers, damage } = await readPeers(peersPath);
    if (damage !== undefined) throw new InterlinkError('corrupt', damage.message);
    const petnamesNow = peers.peers.map((p) => p.petname);
    const wanted = typed.map((petname) => {
      const stored = storedName(petnamesNow, petname);
      if (stored === undefined) throw new InterlinkError('unknown_peer', `no peer is called ${visibleName(petname)}; an audience holds only peers (see \`interlink-mcp peers list\`)`);
      return stored;
    });
    return updateJson(path, audiencesFileSchema, emptyAudiences, (current) => {
      const existing = current[audience];
      if (existing === undefined) {
        const count = Object.keys(current).length;
        if (count >= MAX_AUDIENCES) throw new InterlinkError('audience_full', `there are already ${count} audiences, the most allowed (${MAX_AUDIENCES}); remove one first`);
        checkNameFree(audience, petnamesNow, Object.keys(current));
      }
      const before = existing ?? [];
      const added = [...new Set(wanted)].filter((p) => !before.includes(p)).sort(byText);
      const members = [...before, ...added].sort(byText);
      if (members.length > MAX_RECIPIENTS) {
        throw new InterlinkError('audience_full', `${audience} would hold ${members.length} members, more than the ${MAX_RECIPIENTS} one send reaches`);
      }
      return { next: added.length === 0 ? undefined : { ...current, [audience]: members }, result: { name: audience, added, members } };
    }, storeOptions);
  });
}

/** Without petnames: removes the whole audience; with: those members (the audience goes when empty). */
export async function removeFromAudience(
  path: string,
  name: string,
  petnames?: readonly string[],
): Promise<{ name: string; removed: string[]; members: string[]; recovered?: Recovery }> {
  if (name === 'self') throw new InterlinkError('bad_name', 'audience name "self" is not allowed: it is reserved for your own sessions');
  checkPathName(name, 'audience name');
  // An empty list is refused rather than read as "the whole audience": a caller that
  // filtered its list down to nothing did not mean to delete the audience.
  if (petnames?.length === 0) throw new InterlinkError('usage', `name the members to remove from ${visibleName(name)}, or none to remove the audience`);
  const typed = petnames?.map(checkMemberName);
  return updateJson(path, audiencesFileSchema, emptyAudiences, (current) => {
    const audience = storedName(Object.keys(current), name);
    if (audience === undefined) throw new InterlinkError('unknown_audience', `no audience is called ${visibleName(name)} (see \`interlink-mcp audience list\`)`);
    const before = current[audience]!;
    const removed =
      typed === undefined
        ? before
        : typed.map((petname) => {
            const stored = storedName(before, petname);
            if (stored === undefined) throw new InterlinkError('unknown_audience', `${visibleName(petname)} is not a member of ${visibleName(audience)}`);
            return stored;
          });
    const members = before.filter((m) => !removed.includes(m));
    const next = { ...current };
    if (members.length === 0) delete next[audience];
    else next[audience] = members;
    return { next, result: { name: audience, removed: [...new Set(removed)].sort(byText), members } };
  }, storeOptions);
}

/** The audiences that list `petname`, by a look that never locks, moves or writes. */
export async function audiencesWith(path: string, petname: string): Promise<string[]> {
  const read = await peekJson(path, audiencesFileSchema);
  if (read.kind !== 'ok') return [];
  return Object.keys(read.value).filter((name) => read.value[name]!.includes(petname));
}

/**
 * Drops a petname from every audience (called when the peer is removed). An audience left
 * empty goes. Without a membership (or without the file) nothing is locked or written,
 * so removing a peer of an identity that has no audiences leaves no trace beside peers.json.
 * A damaged file is left to the next audience command (a reader leaves out a member that
 * is no longer a peer, so the stale member is never sent to).
 */
export async function dropMember(path: string, petname: string): Promise<{ audiences: string[] }> {
  if ((await audiencesWith(path, petname)).length === 0) return { audiences: [] };
  return updateJson(path, audiencesFileSchema, emptyAudiences, (current) => {
    const listing = Object.keys(current).filter((name) => current[name]!.includes(petname));
    if (listing.length === 0) return { next: undefined, result: { audiences: [] } };
    const next = { ...current };
    for (const name of listing) {
      const members = current[name]!.filter((m) => m !== petname);
      if (members.length === 0) delete next[name];
      else next[name] = members;
    }
    return { next, result: { audiences: listing.sort(byText) } };
  }, storeOptions);
}

/**
 * What a new petname must not collide with, read without a lock: the caller holds
 * peers.json's lock, which every writer of audience names (addToAudience) holds too. A
 * damaged audiences.json names no audience until a person restores it.
 */
export async function audienceNames(path: string): Promise<string[]> {
  const read = await peekJson(path, audiencesFileSchema);
  return read.kind === 'ok' ? Object.keys(read.value) : [];
}
