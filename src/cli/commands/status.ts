/**
 * `status`: what a person asks at a terminal about this identity, its relays and its
 * sessions (`inbox`, beside it, lists the messages). Reads only: mailboxes and outboxes
 * are opened as read-only views, nothing is acknowledged or repaired. A damaged
 * peers.json (or pairing store, or failed-deliveries file) is left where it is: status
 * shows everything else, then fails (exit 1) with a sentence saying what is wrong with it
 * and what does not work until it is fixed.
 */
import { relayEndpoint } from '../../config/relay-url.js';
import { keyRefusalText } from '../../link/key-refusal.js';
import { readKnownRelays } from '../../link/known-relays.js';
import { checkRelays } from '../../link/relay-check.js';
import type { Config } from '../../config/env.js';
import { identityDir, knownRelaysPath, localRelayDir, mailboxPath, outboxPath, pairingPath, rejectedPath, SESSION_STORES } from '../../config/layout.js';
import { isRunning, readRelayPid } from '../../relay/pid-file.js';
import { readClientTls } from '../../wire/tls.js';
import { InterlinkError, isInterlinkError } from '../../errors.js';
import { fingerprintOf, loadIdentity, parsePublicKey, type Identity } from '../../identity/identity.js';
import { FAILED_UNAVAILABLE, FailedDeliveries } from '../../hosts/codex/failed.js';
import { pairingFileSchema } from '../../pairing/rules.js';
import { PAIRING_UNAVAILABLE } from '../../pairing/store.js';
import { damageSentence, type Damage } from '../../store/damage.js';
import { peekJson } from '../../store/json-store.js';
import { Mailbox } from '../../mailbox/mailbox.js';
import { Outbox, isPending, shownState } from '../../outbox/outbox.js';
import { readPeers } from '../../peers/peers.js';
import { audiencesPathOf, effectiveMembers, readAudiences } from '../../peers/audiences.js';
import { expectPositionals, parse, print } from '../args.js';
import { visibleName } from '../../config/name-characters.js';
import { forTerminal } from '../printable.js';
import { peekRejections } from '../../agent/rejected.js';
import { lastActivity, partitionSessions, sessionLives, sessionsIn, type SessionLife } from '../session-listing.js';
import { refusalSentence } from '../../mailbox/refusals.js';
import { ReplayIndex } from '../../replay/claims.js';
import { isNewIndex } from '../../replay/seed.js';
import { replayPath } from '../../config/layout.js';
import { awaitingOf, type RosterSighting } from '../../agent/awaiting.js';
import { readRosters } from '../rosters.js';

async function identityOrNull(keyPath: string): Promise<Identity | undefined> {
  try {
    return await loadIdentity(keyPath);
  } catch (err) {
    if (isInterlinkError(err, 'key_missing')) return undefined;
    throw err;
  }
}

export const statusHelp = `usage: interlink-mcp status [--all] [--json]

This identity, its peers and audiences, the relays and whether each answers (with the key each is held
to: pinned in INTERLINK_URL or recorded on first use; a relay that answers with another
key, a NEW one after a reset, is shown refused with what to do — for a reset on purpose
\`interlink-mcp relay forget URL\`; and a WARNING when a session refused a key earlier), the zero-config local
relay (running or not, its pid and store; stop it with \`interlink-mcp relay stop\`), and
per session the unread messages, the messages no relay has accepted yet, the sent
messages a relay holds for a session that is on no relay roster (awaiting_session, asked
of the relays that answer), the Codex notices saved as failed deliveries and the pairing
requests waiting for a decision; whether each session is live or ended, and which live
session takes an ended one's mail; a REFUSING line for each peer whose mail a mailbox
bound refuses (its share, or the whole mailbox), and a line when the identity's replay
index is full.
Sessions with nothing waiting and no activity for three days are only counted; --all
lists them too. Reads only. Exits 1 when a file it reads (peers.json, audiences.json, a
pairing store, a failed-deliveries file) is damaged: everything else is still shown, and stderr says
what is wrong with each (they are left as they are).`;

/** A session's life in `status --json`: state, and for an ended one when it ended and who takes its mail. */
function lifeFields(life: SessionLife | undefined) {
  if (life === undefined) return {};
  return { state: life.state, ...(life.host !== undefined && { host: life.host }), ...(life.ended_at !== undefined && { ended_at: new Date(life.ended_at).toISOString() }), taken_by: life.taken_by ?? null };
}

/** ` (live, claude)`, ` (ended <time>; its mail goes to <heir>)`, or ` (ended <time>; no live session takes its mail yet)`. */
function lifeText(life: SessionLife | undefined): string {
  if (life === undefined) return '';
  if (life.state === 'live') return ` (live${life.host !== undefined ? `, ${life.host}` : ''})`;
  const when = life.ended_at === undefined ? '' : ` ${new Date(life.ended_at).toISOString()}`;
  if (life.taken_by !== undefined) return ` (ended${when}; its mail goes to ${visibleName(life.taken_by)})`;
  return life.inherits === true ? ` (ended${when}; its mail waits for a session of this identity to start)` : ` (ended${when})`;
}

/** The zero-config relay as its pid file tells it; a stale file reads as not running. */
async function localRelay(state: string): Promise<{ running: boolean; pid?: number; url?: string; db: string }> {
  const db = localRelayDir(state);
  const record = await readRelayPid(db);
  return record !== undefined && isRunning(record.pid) ? { running: true, pid: record.pid, url: record.url, db } : { running: false, db };
}

export async function status(argv: readonly string[], config: Config): Promise<void> {
  const args = parse(argv, { json: { type: 'boolean' }, all: { type: 'boolean' } });
  expectPositionals(args, 0, 'interlink-mcp status [--all] [--json]');
  const identity = await identityOrNull(config.keyPath);
  const { table, damage } = await readPeers(config.peersPath);
  const audiences = await readAudiences(audiencesPathOf(config.peersPath));
  const damaged: Damage[] = [damage, audiences.damage].filter((d) => d !== undefined);
  const urls = config.relays ?? [`ws://${config.localRelay}`];
  const tls = readClientTls(config.tlsCa);
  const endpoints = urls.map(relayEndpoint);
  const known = await readKnownRelays(knownRelaysPath(config.stateDir));
  // Each relay's handshake as a session makes it: a key that changed is named now (link/relay-check.ts).
  const relays = await checkRelays(urls, known, 1_000, tls);
  // The key each relay is held to, and a refusal a session met (link/known-relays.ts).
  const relayKeys = endpoints.map(({ url, pin }) => ({ url, pinned: pin ?? null, recorded: known.relays[url]?.key ?? null, refused: known.refused[url] ?? null }));
  const state = config.stateDir;
  const sessions: {
    session: string;
    unread: number;
    stored: number;
    pending: number;
    awaiting_session: number;
    awaiting_since: number | undefined;
    failed_deliveries: number | 'unreadable';
    pair_requests: number | 'unreadable';
    /** Requests dropped from a full list since a person last saw `pair list` (pairing/rules.ts). */
    pair_requests_dropped: { count: number; since: string } | null;
    rejected: number | 'unreadable';
    last_activity: number | undefined;
    /** Senders a mailbox bound refuses (mailbox/refusals.ts), each named with its bound. */
    refusing: { sender: string; peer: string; bound: string; since: string; last: string; message: string }[];
  }[] = [];
  /**
   * sender key → the largest (signed time − arrival time) over its admitted messages: the
   * one that waited least on the way, so time spent on a relay is not taken for a clock
   * that is off. Transit time still makes a clock read slightly behind.
   */
  const offsets = new Map<string, { offset: number }>();
  const observe = (key: string, at: number, ts: number) => {
    const seen = offsets.get(key);
    if (seen === undefined || ts - at > seen.offset) offsets.set(key, { offset: ts - at });
  };
  // Asked once, and only when some session holds an accepted message with no report yet.
  let rosters: Promise<RosterSighting> | undefined;
  // A relay whose key a session refused is shown with its WARNING below, not asked.
  const answering = urls.filter((_, i) => relays[i]!.answers && relayKeys[i]!.refused === null);
  const sighting = (me: Identity) => (rosters ??= readRosters({ urls, ask: answering, key: me.signingKey, keys: [me.key, ...table.peers.map((p) => p.key)], records: known.relays, ...(tls !== undefined && { tls }), timeoutMs: 1_000 }));
  if (identity) {
    const names = new Set((await Promise.all(SESSION_STORES.map((store) => sessionsIn(identityDir(state, store, identity.key))))).flat());
    for (const session of [...names].sort()) {
      const mailbox = await Mailbox.open(mailboxPath(state, identity.key, session), { readOnly: true });
      const outbox = await Outbox.open(outboxPath(state, identity.key, session), { readOnly: true });
      const stats = await mailbox.stats();
      const refusing = (await mailbox.bounds()).refusals.map((r) => {
        const peer = table.petnameOf(r.sender) ?? (r.sender === identity.key ? 'self' : fingerprintOf(parsePublicKey(r.sender)));
        return { sender: r.sender, peer, bound: r.bound, since: new Date(r.since).toISOString(), last: new Date(r.at).toISOString(), message: refusalSentence(r, peer, mailbox.limits) };
      });
      const failedStore = FailedDeliveries.forSession(state, identity.key, session);
      const failed = await failedStore.peek();
      if ('damaged' in failed) damaged.push({ file: failedStore.path, problem: failed.damaged, unavailable: FAILED_UNAVAILABLE });
      const pairingFile = pairingPath(state, identity.key, session);
      const pairing = await peekJson(pairingFile, pairingFileSchema);
      if (pairing.kind === 'damaged') damaged.push({ file: pairingFile, problem: pairing.reason, unavailable: PAIRING_UNAVAILABLE });
      const rejected = await peekRejections(rejectedPath(state, identity.key, session));
      for (const record of await mailbox.all()) observe(record.envelope.from, record.received_at, record.envelope.ts);
      const sent = await outbox.all();
      const accepted = sent.filter((r) => shownState(r) === 'bus_accepted');
      const rosterView = accepted.length === 0 ? undefined : await sighting(identity);
      const awaiting = rosterView === undefined ? [] : accepted.flatMap((r) => awaitingOf(r, rosterView) ?? []);
      sessions.push({
        session,
        unread: stats.unread,
        stored: stats.records,
        pending: sent.filter(isPending).length,
        awaiting_session: awaiting.length,
        awaiting_since: awaiting.length === 0 ? undefined : Math.min(...awaiting.map((a) => a.since_at)),
        failed_deliveries: 'failures' in failed ? failed.failures.length : 'unreadable',
        pair_requests: pairing.kind === 'ok' ? pairing.value.incoming.length : pairing.kind === 'missing' ? 0 : 'unreadable',
        pair_requests_dropped: pairing.kind === 'ok' && pairing.value.dropped !== undefined ? { count: pairing.value.dropped.count, since: new Date(pairing.value.dropped.since).toISOString() } : null,
        rejected: 'damaged' in rejected ? 'unreadable' : rejected.length,
        last_activity: await lastActivity(state, identity.key, session),
        refusing,
      });
    }
  }
  const lives = identity ? await sessionLives(state, identity.key, sessions, Date.now()) : new Map<string, SessionLife>();
  const replayIndex = identity ? await replayFill(replayPath(state, identity.key)) : null;
  const { listed, quiet } = partitionSessions(sessions, Date.now());
  const shown = args.values.all === true ? sessions : listed;
  const local = await localRelay(state);
  const data = {
    identity: identity ? { key: identity.key, fingerprint: identity.fingerprint } : null,
    peers: table.peers.map((p) => ({
      petname: p.petname,
      fingerprint: fingerprintOf(parsePublicKey(p.key)),
      // Observed from its messages here: positive when its clock runs ahead of ours.
      clock_offset_ms: offsets.get(p.key)?.offset ?? null,
    })),
    audiences: audiences.damage === undefined ? audiences.table.audiences.length : ('unreadable' as const),
    relays,
    relay_keys: relayKeys,
    local_relay: local,
    state_dir: state,
    sessions: shown.map((s) => ({
      ...s,
      awaiting_since: s.awaiting_since === undefined ? null : new Date(s.awaiting_since).toISOString(),
      last_activity: s.last_activity === undefined ? null : new Date(s.last_activity).toISOString(),
      ...lifeFields(lives.get(s.session)),
    })),
    quiet_sessions: args.values.all === true ? 0 : quiet.length,
    replay_index: replayIndex,
    damaged: damaged.map((d) => ({ file: d.file, problem: d.problem, message: damageSentence(d) })),
  };
  print(args.values.json === true, data, () => {
    const lines = [identity ? `identity     ${identity.fingerprint}  ${identity.key}` : 'identity     none yet (`interlink-mcp keygen`, or start the server once)'];
    const peers = data.peers.length === 0 ? 'none' : data.peers.map((p) => `${visibleName(p.petname)} (${p.fingerprint}${clockText(p.clock_offset_ms)})`).join(', ');
    lines.push(`peers        ${damage === undefined ? peers : `unreadable: ${damage.file} is damaged (see below)`}`);
    // Only once there are some: most identities never define one.
    if (audiences.damage !== undefined) lines.push(`audiences    unreadable: ${audiences.damage.file} is damaged (see below)`);
    else if (data.audiences !== 0) lines.push(`audiences    ${effectiveMembers(audiences.table, table).audiences.map((a) => `${visibleName(a.name)} (${a.members.length})`).join(', ')}`);
    for (const [i, r] of relays.entries()) {
      const k = relayKeys[i]!;
      // URLs that pin one key are one relay at several addresses (link/relay-groups.ts).
      const same = relayKeys.filter((o) => k.pinned !== null && o.pinned === k.pinned && o.url !== k.url).map((o) => o.url);
      const shared = same.length > 0 ? ` (one relay with ${same.join(', ')})` : '';
      const key = k.pinned !== null ? `, key pinned ${k.pinned}${shared}` : k.recorded !== null ? `, key recorded ${k.recorded}` : '';
      if (r.answers && r.refused !== undefined) {
        lines.push(`relay        ${r.url}  ${keyRefusalText(r.refused)}`);
        continue;
      }
      lines.push(`relay        ${r.url}  ${r.answers ? 'answers' : `no answer (${r.error})`}${key}`);
      if (k.refused !== null) lines.push(`  WARNING    its key was refused at ${new Date(k.refused.at).toISOString()}: ${k.refused.message}`);
    }
    if (local.running) lines.push(`local relay  running, pid ${local.pid}, ${local.url}, store ${local.db} (stop: interlink-mcp relay stop)`);
    else if (config.relays === undefined) lines.push(`local relay  not running (serve starts it when no relay answers), store ${local.db}`);
    lines.push(`state        ${state}`);
    if (sessions.length === 0) lines.push('sessions     none yet');
    for (const s of shown) {
      const failed = s.failed_deliveries === 0 ? '' : `; failed Codex notices: ${s.failed_deliveries} (interlink-mcp failed-deliveries list)`;
      const dropped = s.pair_requests_dropped;
      const pairing =
        (s.pair_requests === 0 ? '' : `; pairing requests waiting for you: ${s.pair_requests} (interlink-mcp pair list)`) +
        (dropped === null ? '' : `; ${dropped.count} pairing request${dropped.count === 1 ? ' was' : 's were'} dropped since ${dropped.since} because the list was full (interlink-mcp pair list)`);
      const rejected = s.rejected === 0 ? '' : `; refused by the gate: ${s.rejected} (interlink-mcp inbox --rejected)`;
      const awaiting =
        s.awaiting_since === undefined
          ? ''
          : `; ${s.awaiting_session} sent waiting on a relay for a session on no roster since ${new Date(s.awaiting_since).toISOString()} (awaiting_session: a live session of the recipient's identity takes them when one runs)`;
      lines.push(`session      ${visibleName(s.session)}${lifeText(lives.get(s.session))}: ${s.unread} unread of ${s.stored} stored, ${s.pending} not yet accepted by a relay${awaiting}${failed}${pairing}${rejected}`);
      for (const r of s.refusing) lines.push(`  REFUSING   ${forTerminal(r.message)}`);
    }
    if (replayIndex?.full === true) {
      lines.push(`replay index FULL: ${replayIndex.entries} of ${replayIndex.limit} entries still inside the 7-day window; version 2 messages wait on their relays until entries expire`);
    }
    if (data.quiet_sessions > 0) lines.push(`             and ${data.quiet_sessions} more with nothing waiting and no activity for 3 days (interlink-mcp status --all)`);
    return lines.join('\n');
  });
  if (damaged.length > 0) throw new InterlinkError('corrupt', data.damaged.map((d) => d.message).join(' '));
}

/** The identity's replay index (replay/claims.ts) against its limit; null when it has no files yet. */
async function replayFill(path: string): Promise<{ entries: number; limit: number; full: boolean } | null> {
  if (isNewIndex(path)) return null;
  const index = await ReplayIndex.open(path, { readOnly: true });
  try {
    return await index.fill();
  } finally {
    await index.close();
  }
}

/** A peer's observed clock offset, when it is large enough to matter (over 5 s). */
function clockText(offset: number | null): string {
  if (offset === null || Math.abs(offset) < 5_000) return '';
  const seconds = Math.round(Math.abs(offset) / 1000);
  const span = seconds >= 3600 ? `${Math.round(seconds / 360) / 10} h` : seconds >= 60 ? `${Math.round(seconds / 6) / 10} min` : `${seconds} s`;
  return `, clock ${offset > 0 ? 'ahead' : 'behind'} by ${span}`;
}
