/**
 * The console's pages by path: each reads what it shows (snapshot.ts, conversation.ts,
 * the pairing stores through the console's session) and renders it (the *-page.ts
 * modules). A path that names nothing is undefined (404).
 */
import { identityDir, sessionFileIn } from '../../config/layout.js';
import { isInterlinkError } from '../../errors.js';
import { fingerprintOf, parsePublicKey } from '../../identity/identity.js';
import { Mailbox } from '../../mailbox/mailbox.js';
import { isUnread } from '../../mailbox/record-state.js';
import type { Pairing } from '../../pairing/pairing.js';
import { readPeers } from '../../peers/peers.js';
import { sessionsIn } from '../session-listing.js';
import { failureStore } from './actions.js';
import { readConversation } from './conversation.js';
import { readGroup, readGroups } from './groups.js';
import { groupBody, groupsList } from './groups-page.js';
import { html } from './html.js';
import { conversationBody, peersBody, type PeerEntry } from './conversation-page.js';
import type { Html } from './html.js';
import type { Frame } from './layout.js';
import { overviewBody } from './overview-page.js';
import { pairingBody, revokeBody, type PairingData } from './pairing-page.js';
import { recoveryBody, failureBody } from './recovery-page.js';
import { readRecovery, readRelays, readSessions, type ConsoleContext } from './snapshot.js';

export interface View {
  title: string;
  body: (frame: Frame) => Html;
}

/** The pairing state of every session of this identity (a request reaches whichever session the roster showed). */
async function pairingState(ctx: ConsoleContext): Promise<Omit<PairingData, 'peers'>> {
  const holders: Pairing[] = [ctx.agent.pairing, ...(await ctx.agent.pairing.otherSessions())];
  const lists = await Promise.all(holders.map((p) => p.list()));
  return { incoming: lists.flatMap((l) => l.incoming), outgoing: lists.flatMap((l) => l.outgoing) };
}

async function peerRows(ctx: ConsoleContext) {
  const { table } = await readPeers(ctx.config.peersPath);
  return { table, peers: table.peers.map((p) => ({ petname: p.petname, key: p.key, fingerprint: fingerprintOf(parsePublicKey(p.key)) })) };
}

/** Received and unread counts per sender key, over every mailbox of this identity. */
async function receivedCounts(ctx: ConsoleContext): Promise<Map<string, { received: number; unread: number }>> {
  const dir = identityDir(ctx.config.stateDir, 'mailbox', ctx.identity.key);
  const counts = new Map<string, { received: number; unread: number }>();
  for (const session of await sessionsIn(dir)) {
    const mailbox = await Mailbox.open(sessionFileIn(dir, session), { readOnly: true });
    for (const record of await mailbox.all()) {
      const c = counts.get(record.envelope.from) ?? { received: 0, unread: 0 };
      counts.set(record.envelope.from, { received: c.received + 1, unread: c.unread + (isUnread(record) ? 1 : 0) });
    }
  }
  return counts;
}

async function overview(ctx: ConsoleContext): Promise<View> {
  const { table } = await readPeers(ctx.config.peersPath);
  const [sessions, relays, pairing] = await Promise.all([readSessions(ctx, table), readRelays(ctx), pairingState(ctx)]);
  const data = { identity: { key: ctx.identity.key, fingerprint: ctx.identity.fingerprint }, sessions, relays, pairRequests: pairing.incoming.length };
  return { title: 'Overview', body: () => overviewBody(data) };
}

async function conversations(ctx: ConsoleContext): Promise<View> {
  const [{ peers, table }, counts] = await Promise.all([peerRows(ctx), receivedCounts(ctx)]);
  const groups = await readGroups(ctx, table);
  const entries: PeerEntry[] = [{ petname: 'self', key: ctx.identity.key, fingerprint: ctx.identity.fingerprint }, ...peers].map((p) => ({ petname: p.petname, fingerprint: p.fingerprint, ...(counts.get(p.key) ?? { received: 0, unread: 0 }) }));
  return { title: 'Conversations', body: () => html`${peersBody(entries)}<h2>Sent to several</h2>${groupsList(groups)}` };
}

async function group(ctx: ConsoleContext, id: string): Promise<View | undefined> {
  if (!/^[0-9a-f]{32}$/.test(id)) return undefined;
  const { table } = await readPeers(ctx.config.peersPath);
  const row = await readGroup(ctx, table, id);
  return row === undefined ? undefined : { title: 'Sent to several', body: () => groupBody(row) };
}

async function conversation(ctx: ConsoleContext, petname: string): Promise<View | undefined> {
  const { table } = await readPeers(ctx.config.peersPath);
  const key = petname === 'self' ? ctx.identity.key : table.keyOf(petname);
  if (key === undefined) return undefined;
  const messages = await readConversation(ctx, key);
  return { title: `Conversation with ${petname}`, body: () => conversationBody(petname, fingerprintOf(parsePublicKey(key)), messages) };
}

async function pairing(ctx: ConsoleContext): Promise<View> {
  const [state, { peers }] = await Promise.all([pairingState(ctx), peerRows(ctx)]);
  return { title: 'Pairing', body: (frame) => pairingBody(frame, { ...state, peers }) };
}

async function revoke(ctx: ConsoleContext, petname: string | null): Promise<View | undefined> {
  const peer = (await peerRows(ctx)).peers.find((p) => p.petname === petname);
  return peer === undefined ? undefined : { title: 'Revoke a peer', body: (frame) => revokeBody(frame, peer) };
}

async function recovery(ctx: ConsoleContext): Promise<View> {
  const data = await readRecovery(ctx);
  return { title: 'Recovery', body: (frame) => recoveryBody(frame, data) };
}

async function failure(ctx: ConsoleContext, id: string): Promise<View | undefined> {
  try {
    const found = await (await failureStore(ctx, id)).get(id);
    return found === undefined ? undefined : { title: `Failed notice ${id}`, body: (frame) => failureBody(frame, found) };
  } catch (err) {
    if (isInterlinkError(err, 'unknown_failure')) return undefined;
    throw err;
  }
}

function decoded(part: string): string | undefined {
  try {
    return decodeURIComponent(part);
  } catch {
    return undefined;
  }
}

/** The page at `url` (a path with its query), or undefined when there is none. */
export async function viewAt(ctx: ConsoleContext, url: URL): Promise<View | undefined> {
  const path = url.pathname;
  if (path === '/') return overview(ctx);
  if (path === '/conversations') return conversations(ctx);
  if (path === '/pairing') return pairing(ctx);
  if (path === '/pairing/revoke') return revoke(ctx, url.searchParams.get('petname'));
  if (path === '/recovery') return recovery(ctx);
  const groupId = /^\/conversations\/groups\/([^/]+)$/.exec(path)?.[1];
  if (groupId !== undefined) return group(ctx, groupId);
  const peer = /^\/conversations\/([^/]+)$/.exec(path)?.[1];
  const name = peer === undefined ? undefined : decoded(peer);
  if (name !== undefined) return conversation(ctx, name);
  const failed = /^\/recovery\/failed\/([^/]+)$/.exec(path)?.[1];
  const id = failed === undefined ? undefined : decoded(failed);
  return id === undefined ? undefined : failure(ctx, id);
}
