/**
 * `inbox`: the messages in this identity's mailboxes (or, with --sent, its outboxes; with
 * --rejected, what the gate refused) and their delivery states, one row each. Reads only:
 * mailboxes and outboxes are opened as read-only views, nothing is acknowledged or
 * repaired. A damaged peers.json is left where it is: the messages are still shown, then
 * it fails (exit 1) with a sentence saying what is wrong with it.
 */
import type { Config } from '../../config/env.js';
import { identityDir, sessionFileIn } from '../../config/layout.js';
import { visibleName } from '../../config/name-characters.js';
import { unsafeNameReason } from '../../config/paths.js';
import { InterlinkError } from '../../errors.js';
import { fingerprintOf, loadIdentity, parsePublicKey, type Identity } from '../../identity/identity.js';
import { Mailbox } from '../../mailbox/mailbox.js';
import { currentState, isUnread } from '../../mailbox/record-state.js';
import { describeRoute, parseRoute } from '../../envelope/route.js';
import { Outbox, remoteState, shownState } from '../../outbox/outbox.js';
import { readPeers, type PeerTable } from '../../peers/peers.js';
import { expectPositionals, parse, print } from '../args.js';
import { forTerminal } from '../printable.js';
import { peekRejections, type Rejection } from '../../agent/rejected.js';
import { sessionKnown, sessionsIn } from '../session-listing.js';

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
  --peer    only messages from (with --sent: to) that peer, or "self"
  --session only that session's; a session this identity never had here is an error
            (exit 1), one it had with nothing to show lists nothing`;

function sessionFlag(value: string): string {
  const session = value.normalize('NFC');
  const reason = unsafeNameReason(session);
  if (reason !== undefined) throw new InterlinkError('usage', `--session ${JSON.stringify(visibleName(value.slice(0, 40)))} is not a session id: ${reason}`);
  return session;
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
  /** Set for one copy of a message to several recipients. */
  group_id?: string;
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
        ...(e.group !== undefined && { group_id: e.group }),
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
        ...(record.group !== undefined && { group_id: record.group.id }),
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
  const group = r.group_id !== undefined ? `  (group ${r.group_id})` : '';
  return `${new Date(r.ts).toISOString()}  ${visibleName(r.session)}  ${visibleName(who)}${forTerminal(task)}  ${r.state}  ${r.msg_id}${group}\n    ${text.replace(/\n/g, '\n    ')}`;
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
  const peerKey = peer === undefined ? undefined : peer === 'self' ? identity.key : (table.keyOf(peer) ?? table.keyOf(peer.normalize('NFC')));
  if (peer !== undefined && peerKey === undefined) throw new InterlinkError('unknown_peer', `no peer is called ${visibleName(peer)}`, undefined, { hint: { tool: 'see list_peers', cli: 'see `interlink-mcp peers list`' } });
  const dir = identityDir(config.stateDir, sent ? 'outbox' : refused ? 'rejected' : 'mailbox', identity.key);
  // A flag that names a file goes through the name rule: `--session ../../x` reads nothing outside the state root.
  const only = typeof args.values.session === 'string' ? sessionFlag(args.values.session) : undefined;
  // A mistyped id would otherwise read as a session with no messages.
  if (only !== undefined && !(await sessionKnown(config.stateDir, identity.key, only))) {
    throw new InterlinkError('unknown_session', `this identity has had no session "${forTerminal(only)}" on this machine (\`interlink-mcp status --all\` lists its sessions)`);
  }
  const sessions = only !== undefined ? [only] : await sessionsIn(dir);
  const name = (key: string) => senderName(key, identity, table, damage === undefined);
  const json = args.values.json === true;
  if (refused) {
    const rows = (await rejectedRows(dir, sessions, peerKey, name)).sort((a, b) => a.at - b.at);
    print(json, { rejected: rows }, () =>
      rows.length === 0 ? 'nothing refused' : rows.map((r) => `${new Date(r.at).toISOString()}  ${visibleName(r.session)}  ${visibleName(r.sender)}  refused ${r.code}: ${r.reason}  ${r.msg_id}`).join('\n'),
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
