/**
 * `status` and `inbox`: what people ask at a terminal. Both only read: mailboxes and
 * outboxes are opened as read-only views, nothing is acknowledged or repaired. A damaged
 * peers.json is left where it is: both show everything else, then fail (exit 1) with a
 * sentence saying what is wrong with it and what does not work until it is fixed.
 */
import { readdir } from 'node:fs/promises';
import { relayEndpoint } from '../../config/relay-url.js';
import { keyRefusalText } from '../../link/key-refusal.js';
import { readKnownRelays } from '../../link/known-relays.js';
import { checkRelays } from '../../link/relay-check.js';
import type { Config } from '../../config/env.js';
import { identityDir, knownRelaysPath, localRelayDir, mailboxPath, outboxPath, pairingPath, rejectedPath, sessionFileIn, sessionOfFile, SESSION_STORES } from '../../config/layout.js';
import { isRunning, readRelayPid } from '../../relay/pid-file.js';
import { readClientTls } from '../../wire/tls.js';
import { unsafeNameReason } from '../../config/paths.js';
import { InterlinkError, isInterlinkError } from '../../errors.js';
import { fingerprintOf, loadIdentity, parsePublicKey, type Identity } from '../../identity/identity.js';
import { FAILED_UNAVAILABLE, FailedDeliveries } from '../../hosts/codex/failed.js';
import { pairingFileSchema } from '../../pairing/rules.js';
import { PAIRING_UNAVAILABLE } from '../../pairing/store.js';
import { damageSentence, type Damage } from '../../store/damage.js';
import { peekJson } from '../../store/json-store.js';
import { Mailbox } from '../../mailbox/mailbox.js';
import { currentState, isUnread } from '../../mailbox/record-state.js';
import { describeRoute, parseRoute } from '../../envelope/route.js';
import { Outbox, isPending, remoteState, shownState } from '../../outbox/outbox.js';
import { readPeers, type PeerTable } from '../../peers/peers.js';
import { expectPositionals, parse, print } from '../args.js';
import { forTerminal } from '../printable.js';
import { peekRejections, type Rejection } from '../../agent/rejected.js';
import { lastActivity, partitionSessions, sessionLives, type SessionLife } from '../session-listing.js';
import { refusalSentence } from '../../mailbox/refusals.js';
import { ReplayIndex } from '../../replay/claims.js';
import { isNewIndex } from '../../replay/seed.js';
import { replayPath } from '../../config/layout.js';
import { awaitingOf, type RosterSighting } from '../../agent/awaiting.js';
import { readRosters } from '../rosters.js';

/** Sessions with a store in `dir` (layout.ts, `sessionOfFile`). */
async function sessionsIn(dir: string): Promise<string[]> {
  const names = await readdir(dir).catch(() => [] as string[]);
  return [...new Set(names.flatMap((n) => sessionOfFile(n) ?? []))];
}

async function identityOrNull(keyPath: string): Promise<Identity | undefined> {
  try {
    return await loadIdentity(keyPath);
  } catch (err) {
    if (isInterlinkError(err, 'key_missing')) return undefined;
    throw err;
  }
}

export const statusHelp = `usage: interlink-mcp status [--all] [--json]

This identity, its peers, the relays and whether each answers (with the key each is held
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
lists them too. Reads only. Exits 1 when a file it reads (peers.json, a pairing store,
a failed-deliveries file) is damaged: everything else is still shown, and stderr says
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
  if (life.taken_by !== undefined) return ` (ended${when}; its mail goes to ${life.taken_by})`;
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
  const damaged: Damage[] = damage === undefined ? [] : [damage];
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
  const sighting = (me: Identity) => (rosters ??= readRosters({ urls, ask: answering, key: me.signingKey, records: known.relays, ...(tls !== undefined && { tls }), timeoutMs: 1_000 }));
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
    const peers = data.peers.length === 0 ? 'none' : data.peers.map((p) => `${p.petname} (${p.fingerprint}${clockText(p.clock_offset_ms)})`).join(', ');
    lines.push(`peers        ${damage === undefined ? peers : `unreadable: ${damage.file} is damaged (see below)`}`);
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
      const pairing = s.pair_requests === 0 ? '' : `; pairing requests waiting for you: ${s.pair_requests} (interlink-mcp pair list)`;
      const rejected = s.rejected === 0 ? '' : `; refused by the gate: ${s.rejected} (interlink-mcp inbox --rejected)`;
      const awaiting =
        s.awaiting_since === undefined
          ? ''
          : `; ${s.awaiting_session} sent waiting on a relay for a session on no roster since ${new Date(s.awaiting_since).toISOString()} (awaiting_session: a live session of the recipient's identity takes them when one runs)`;
      lines.push(`session      ${s.session}${lifeText(lives.get(s.session))}: ${s.unread} unread of ${s.stored} stored, ${s.pending} not yet accepted by a relay${awaiting}${failed}${pairing}${rejected}`);
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

export const inboxHelp = `usage: interlink-mcp inbox [--session ID] [--peer PETNAME] [--unread | --sent | --rejected] [--json]

Messages in this identity's mailboxes and their delivery states, oldest first by the
senders' signed time (each sender's in the order it sent them). Reads only: nothing is
acknowledged. Exits 1 when peers.json is damaged: the messages are still shown (senders
by fingerprint), and stderr says what is wrong with the file.
  --unread  only messages not yet acknowledged (nor superseded by a newer one)
  --sent    the messages this identity sent instead, from its outboxes: each one's
            target session and state (pending until a relay accepts it, then
            bus_accepted; then receiver_stored and receiver_acknowledged as the
            receiver reports them in signed receipts, marked "reported by the
            receiver"); an accepted message stays listed for 48 hours
  --rejected  what the trust gate refused after a relay had accepted it: sender,
            msg_id, the verdict and when (the newest 256 per session)
  --peer    only messages from (with --sent: to) that peer, or "self"`;

/** A peer's observed clock offset, when it is large enough to matter (over 5 s). */
function clockText(offset: number | null): string {
  if (offset === null || Math.abs(offset) < 5_000) return '';
  const seconds = Math.round(Math.abs(offset) / 1000);
  const span = seconds >= 3600 ? `${Math.round(seconds / 360) / 10} h` : seconds >= 60 ? `${Math.round(seconds / 6) / 10} min` : `${seconds} s`;
  return `, clock ${offset > 0 ? 'ahead' : 'behind'} by ${span}`;
}

function sessionFlag(value: string): string {
  const reason = unsafeNameReason(value);
  if (reason !== undefined) throw new InterlinkError('usage', `--session ${JSON.stringify(value.slice(0, 40))} is not a session id: ${reason}`);
  return value;
}

function senderName(key: string, me: Identity, table: PeerTable, peersKnown: boolean): string {
  if (key === me.key) return 'self';
  const fingerprint = fingerprintOf(parsePublicKey(key));
  return table.petnameOf(key) ?? (peersKnown ? `stranger ${fingerprint}` : fingerprint);
}

/** What `inbox` shows of a message, received or sent. */
interface MessageRow {
  session: string;
  msg_id: string;
  ts: number;
  state: string;
  task_id?: string;
  status?: string;
  text: string;
}

interface InboxRow extends MessageRow {
  from: string;
  sender: string;
}

interface SentRow extends MessageRow {
  to: string;
  recipient: string;
  to_session: string;
  /** Set when `state` is what the receiver reported in a signed receipt, at its clock. */
  reported_by?: 'receiver';
  reported_at?: number;
}

async function receivedRows(dir: string, sessions: readonly string[], filter: { peerKey?: string; unread: boolean }, name: (key: string) => string): Promise<InboxRow[]> {
  const rows: InboxRow[] = [];
  for (const session of sessions) {
    const mailbox = await Mailbox.open(sessionFileIn(dir, session), { readOnly: true });
    for (const record of await mailbox.all()) {
      if (filter.peerKey !== undefined && record.envelope.from !== filter.peerKey) continue;
      if (filter.unread && !isUnread(record)) continue;
      const e = record.envelope;
      rows.push({
        session,
        from: name(e.from),
        sender: e.from,
        msg_id: e.msg_id,
        ts: e.ts,
        state: record.superseded_by !== undefined ? `${currentState(record)} (superseded)` : currentState(record),
        ...(e.task_id !== undefined && { task_id: e.task_id }),
        ...(e.status !== undefined && { status: e.status }),
        text: e.text,
      });
    }
  }
  return rows;
}

async function sentRows(dir: string, sessions: readonly string[], peerKey: string | undefined, name: (key: string) => string): Promise<SentRow[]> {
  const rows: SentRow[] = [];
  for (const session of sessions) {
    const outbox = await Outbox.open(sessionFileIn(dir, session), { readOnly: true });
    for (const record of await outbox.all()) {
      const e = record.envelope;
      if (peerKey !== undefined && e.to !== peerKey) continue;
      const remote = remoteState(record);
      rows.push({
        session,
        to: name(e.to),
        recipient: e.to,
        to_session: parseRoute(record.route)?.session ?? '',
        msg_id: e.msg_id,
        ts: e.ts,
        state: shownState(record),
        ...(remote !== undefined && { reported_by: 'receiver' as const, reported_at: remote.at }),
        ...(e.task_id !== undefined && { task_id: e.task_id }),
        ...(e.status !== undefined && { status: e.status }),
        text: e.text,
      });
    }
  }
  return rows;
}

/** What the gate refused after a relay accepted it (agent/rejected.ts), newest kept. */
async function rejectedRows(dir: string, sessions: readonly string[], peerKey: string | undefined, name: (key: string) => string) {
  const rows: (Rejection & { session: string; sender: string })[] = [];
  for (const session of sessions) {
    const file = sessionFileIn(dir, session);
    const list = await peekRejections(file);
    if ('damaged' in list) throw new InterlinkError('corrupt', `${file} is damaged: ${list.damaged}`);
    for (const r of list) if (peerKey === undefined || r.from === peerKey) rows.push({ ...r, session, sender: name(r.from) });
  }
  return rows;
}

function describeRow(r: MessageRow, who: string): string {
  const task = r.task_id !== undefined ? ` [${r.task_id}${r.status !== undefined ? ` ${r.status}` : ''}]` : '';
  const text = forTerminal(r.text.length > 200 ? `${r.text.slice(0, 200)}…` : r.text);
  return `${new Date(r.ts).toISOString()}  ${r.session}  ${forTerminal(who)}${forTerminal(task)}  ${r.state}  ${r.msg_id}\n    ${text.replace(/\n/g, '\n    ')}`;
}

export async function inbox(argv: readonly string[], config: Config): Promise<void> {
  const args = parse(argv, { session: { type: 'string' }, peer: { type: 'string' }, unread: { type: 'boolean' }, sent: { type: 'boolean' }, rejected: { type: 'boolean' }, json: { type: 'boolean' } });
  expectPositionals(args, 0, 'interlink-mcp inbox [--session ID] [--peer PETNAME] [--unread | --sent | --rejected] [--json]');
  const sent = args.values.sent === true;
  const unread = args.values.unread === true;
  const refused = args.values.rejected === true;
  if ([sent, unread, refused].filter(Boolean).length > 1) throw new InterlinkError('usage', '--unread, --sent and --rejected each show a different list; pass one');
  const identity = await loadIdentity(config.keyPath);
  const { table, damage } = await readPeers(config.peersPath);
  const peer = typeof args.values.peer === 'string' ? args.values.peer : undefined;
  if (peer !== undefined && peer !== 'self' && damage !== undefined) throw new InterlinkError('corrupt', damage.message);
  const peerKey = peer === undefined ? undefined : peer === 'self' ? identity.key : table.keyOf(peer);
  if (peer !== undefined && peerKey === undefined) throw new InterlinkError('unknown_peer', `no peer is called ${peer}`, undefined, { hint: { tool: 'see list_peers', cli: 'see `interlink-mcp peers list`' } });
  const dir = identityDir(config.stateDir, sent ? 'outbox' : refused ? 'rejected' : 'mailbox', identity.key);
  // A flag that names a file goes through the name rule: `--session ../../x` reads nothing outside the state root.
  const only = typeof args.values.session === 'string' ? sessionFlag(args.values.session) : undefined;
  const sessions = only !== undefined ? [only] : await sessionsIn(dir);
  const name = (key: string) => senderName(key, identity, table, damage === undefined);
  const json = args.values.json === true;
  if (refused) {
    const rows = (await rejectedRows(dir, sessions, peerKey, name)).sort((a, b) => a.at - b.at);
    print(json, { rejected: rows }, () =>
      rows.length === 0 ? 'nothing refused' : rows.map((r) => `${new Date(r.at).toISOString()}  ${r.session}  ${forTerminal(r.sender)}  refused ${r.code}: ${r.reason}  ${r.msg_id}`).join('\n'),
    );
  } else if (sent) {
    const rows = (await sentRows(dir, sessions, peerKey, name)).sort((a, b) => a.ts - b.ts);
    print(json, { sent: rows }, () =>
      rows.length === 0 ? 'no sent messages' : rows.map((r) => describeRow(r.reported_by === undefined ? r : { ...r, state: `${r.state} (reported by the receiver)` }, `to ${describeRoute(r.to, r.to_session)}`)).join('\n'),
    );
  } else {
    // Stable, from arrival order: equal timestamps keep the mailbox's own tie-break, so
    // each sender's messages appear in the order sent.
    const rows = (await receivedRows(dir, sessions, { ...(peerKey !== undefined && { peerKey }), unread }, name)).sort((a, b) => a.ts - b.ts);
    print(json, { messages: rows }, () => (rows.length === 0 ? (unread ? 'no unread messages' : 'no messages') : rows.map((r) => describeRow(r, r.from)).join('\n')));
  }
  if (damage !== undefined) throw new InterlinkError('corrupt', damage.message);
}
