/**
 * What the console shows, read from this identity's files and its running `cli` session
 * (the relays it holds open, the rosters it reads). Reads only: mailboxes and outboxes
 * are opened as read-only views, as `status` and `inbox` open them; every action goes
 * through actions.ts. Each page reads afresh, so what it shows is what is on disk now.
 */
import type { Agent } from '../../agent/agent.js';
import { awaitingOf, type Awaiting, type RosterSighting } from '../../agent/awaiting.js';
import { peekRejections, type Rejection } from '../../agent/rejected.js';
import type { Config } from '../../config/env.js';
import { identityDir, knownRelaysPath, mailboxPath, outboxPath, pairingPath, rejectedPath, SESSION_STORES } from '../../config/layout.js';
import { relayEndpoint } from '../../config/relay-url.js';
import { FailedDeliveries, failedSessions, type Failure } from '../../hosts/codex/failed.js';
import { fingerprintOf, parsePublicKey, type Identity } from '../../identity/identity.js';
import { keyRefusalText } from '../../link/key-refusal.js';
import { readKnownRelays } from '../../link/known-relays.js';
import { Mailbox } from '../../mailbox/mailbox.js';
import { refusalSentence } from '../../mailbox/refusals.js';
import { isPending, Outbox, type OutboxRecord } from '../../outbox/outbox.js';
import { pairingFileSchema } from '../../pairing/rules.js';
import { readPeers, type PeerTable } from '../../peers/peers.js';
import { peekJson } from '../../store/json-store.js';
import { lastActivity, sessionLives, sessionsIn } from '../session-listing.js';

export interface ConsoleContext {
  config: Config;
  identity: Identity;
  /** This identity's `cli` session, run by the console for pairing and the relays' view. */
  agent: Agent;
}

export interface SessionRow {
  session: string;
  /** live or ended as the session registry says; away or gone as the rosters say of a live one. */
  state: 'live' | 'away' | 'gone' | 'ended';
  host?: string;
  ended_at?: number;
  taken_by?: string;
  summary?: string;
  cwd?: string;
  unread: number;
  stored: number;
  pending: number;
  awaiting: number;
  failed: number;
  rejected: number;
  pair_requests: number;
  refusing: string[];
}

export interface RelayRow {
  url: string;
  connected: boolean;
  tls: boolean;
  key: { pinned: string | null; recorded: string | null };
  /** Why it is not usable now: an outage (with its start) or a refused key. */
  trouble?: { text: string; since?: number };
}

/** A name for a key as this identity knows it: `self`, a petname, or `stranger <fingerprint>`. */
export function nameOf(key: string, me: Identity, table: PeerTable): string {
  if (key === me.key) return 'self';
  return table.petnameOf(key) ?? `stranger ${fingerprintOf(parsePublicKey(key))}`;
}

/** Every session of this identity with a file under the state root, sorted. */
export async function allSessions(ctx: ConsoleContext): Promise<string[]> {
  const state = ctx.config.stateDir;
  const names = (await Promise.all(SESSION_STORES.map((store) => sessionsIn(identityDir(state, store, ctx.identity.key))))).flat();
  return [...new Set(names)].sort();
}

/** The rosters as the console's session last read them (fresh when asked for). */
export function sighting(ctx: ConsoleContext): Promise<RosterSighting> {
  return ctx.agent.presence.sighting();
}

export async function readSessions(ctx: ConsoleContext, table: PeerTable): Promise<SessionRow[]> {
  const { stateDir: state } = ctx.config;
  const me = ctx.identity;
  const roster = await ctx.agent.presence.roster().catch(() => []);
  const rosterOf = new Map(roster.filter((r) => r.key === me.key).map((r) => [r.session, r]));
  let seen: RosterSighting | undefined;
  const rows: (SessionRow & { last_activity: number | undefined })[] = [];
  for (const session of await allSessions(ctx)) {
    const mailbox = await Mailbox.open(mailboxPath(state, me.key, session), { readOnly: true });
    const outbox = await Outbox.open(outboxPath(state, me.key, session), { readOnly: true });
    const stats = await mailbox.stats();
    const refusing = (await mailbox.bounds()).refusals.map((r) => refusalSentence(r, nameOf(r.sender, me, table), mailbox.limits));
    const sent = await outbox.all();
    const accepted = sent.filter((r) => r.accepted_by.length > 0);
    if (accepted.length > 0) seen ??= await sighting(ctx);
    const failed = await FailedDeliveries.forSession(state, me.key, session).peek();
    const rejected = await peekRejections(rejectedPath(state, me.key, session));
    const pairing = await peekJson(pairingPath(state, me.key, session), pairingFileSchema);
    const onRoster = rosterOf.get(session);
    rows.push({
      session,
      state: 'live',
      ...(onRoster?.summary !== undefined && onRoster.summary !== '' && { summary: onRoster.summary }),
      ...(onRoster?.cwd !== undefined && { cwd: onRoster.cwd }),
      unread: stats.unread,
      stored: stats.records,
      pending: sent.filter(isPending).length,
      awaiting: seen === undefined ? 0 : accepted.filter((r) => awaitingOf(r, seen!) !== undefined).length,
      failed: 'failures' in failed ? failed.failures.length : 0,
      rejected: 'damaged' in rejected ? 0 : rejected.length,
      pair_requests: pairing.kind === 'ok' ? pairing.value.incoming.length : 0,
      refusing,
      last_activity: await lastActivity(state, me.key, session),
    });
  }
  const lives = await sessionLives(state, me.key, rows, Date.now());
  return rows.map(({ last_activity: _, ...row }) => {
    const life = lives.get(row.session);
    const onRoster = rosterOf.get(row.session);
    if (life?.state === 'ended') return { ...row, state: 'ended', ...(life.ended_at !== undefined && { ended_at: life.ended_at }), ...(life.taken_by !== undefined && { taken_by: life.taken_by }) };
    const state = onRoster === undefined || onRoster.state === 'live' ? 'live' : onRoster.state;
    return { ...row, state, ...(life?.host !== undefined && { host: life.host }) };
  });
}

/** Each relay the console's session holds: connected, why not, and the key it is held to. */
export async function readRelays(ctx: ConsoleContext): Promise<RelayRow[]> {
  const known = await readKnownRelays(knownRelaysPath(ctx.config.stateDir));
  const pins = new Map((ctx.config.relays ?? []).map((u) => relayEndpoint(u)).map((e) => [e.url, e.pin ?? null]));
  return ctx.agent.relays.map((relay) => {
    const trouble = relay.trouble;
    const since = relay.unreachableSince;
    const text = trouble === undefined ? undefined : trouble.kind === 'unreachable' ? `no answer (${trouble.error})` : keyRefusalText(trouble.refusal);
    return {
      url: relay.url,
      connected: relay.connected,
      tls: relay.url.startsWith('wss:'),
      key: { pinned: pins.get(relay.url) ?? null, recorded: known.relays[relay.url]?.key ?? null },
      ...(text !== undefined && { trouble: { text, ...(since !== undefined && trouble?.kind === 'unreachable' && { since }) } }),
    };
  });
}

export interface Recovery {
  failed: (Failure & { session: string })[];
  rejected: (Rejection & { session: string; sender: string })[];
  refusing: { session: string; text: string }[];
  pending: { session: string; record: OutboxRecord; to: string }[];
  awaiting: { session: string; record: OutboxRecord; to: string; awaiting: Awaiting }[];
  damaged: string[];
}

/** What failed or waits and a person can act on (recovery page). */
export async function readRecovery(ctx: ConsoleContext): Promise<Recovery> {
  const { stateDir: state } = ctx.config;
  const me = ctx.identity;
  const { table } = await readPeers(ctx.config.peersPath);
  const result: Recovery = { failed: [], rejected: [], refusing: [], pending: [], awaiting: [], damaged: [] };
  for (const session of await failedSessions(state, me.key)) {
    const store = FailedDeliveries.forSession(state, me.key, session);
    const failed = await store.peek();
    if ('damaged' in failed) result.damaged.push(`${store.path}: ${failed.damaged}`);
    else result.failed.push(...failed.failures.map((f) => ({ ...f, session })));
  }
  let seen: RosterSighting | undefined;
  for (const session of await allSessions(ctx)) {
    const rejected = await peekRejections(rejectedPath(state, me.key, session));
    if ('damaged' in rejected) result.damaged.push(`${rejectedPath(state, me.key, session)}: ${rejected.damaged}`);
    else result.rejected.push(...rejected.map((r) => ({ ...r, session, sender: nameOf(r.from, me, table) })));
    const mailbox = await Mailbox.open(mailboxPath(state, me.key, session), { readOnly: true });
    for (const r of (await mailbox.bounds()).refusals) result.refusing.push({ session, text: refusalSentence(r, nameOf(r.sender, me, table), mailbox.limits) });
    const outbox = await Outbox.open(outboxPath(state, me.key, session), { readOnly: true });
    for (const record of await outbox.all()) {
      const to = nameOf(record.envelope.to, me, table);
      if (isPending(record)) result.pending.push({ session, record, to });
      else if (record.accepted_by.length > 0) {
        seen ??= await sighting(ctx);
        const awaiting = awaitingOf(record, seen);
        if (awaiting !== undefined) result.awaiting.push({ session, record, to, awaiting });
      }
    }
  }
  result.failed.sort((a, b) => a.at - b.at);
  result.rejected.sort((a, b) => a.at - b.at);
  return result;
}
