/**
 * `status` and `inbox`: what people ask at a terminal. Both only read: mailboxes and
 * outboxes are opened as read-only views, nothing is acknowledged or repaired. A damaged
 * peers.json is left where it is: both show everything else, then fail (exit 1) with a
 * sentence saying what is wrong with it and what does not work until it is fixed.
 */
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { configuredRelays, localRelayAddr, probeRelay } from '../../agent/local-relay.js';
import { keyPath, peersPath, stateDir } from '../../config/paths.js';
import { InterlinkError, isInterlinkError } from '../../errors.js';
import { fingerprintOf, loadIdentity, parsePublicKey, type Identity } from '../../identity/identity.js';
import { FAILED_UNAVAILABLE, FailedDeliveries } from '../../codex/failed.js';
import { pairingFileSchema } from '../../pairing/rules.js';
import { PAIRING_UNAVAILABLE, pairingPath } from '../../pairing/store.js';
import { damageSentence, type Damage } from '../../store/damage.js';
import { peekJson } from '../../store/json-store.js';
import { Mailbox } from '../../mailbox/mailbox.js';
import { currentState } from '../../mailbox/state.js';
import { Outbox, isPending } from '../../outbox/outbox.js';
import { readPeers, type PeerTable } from '../../peers/peers.js';
import { expectPositionals, parse, print } from '../args.js';

/**
 * Sessions with a store in `dir`: a snapshot (`<session>.json`) or, before the first
 * compaction, only a journal (`<session>.journal`).
 */
async function sessionsIn(dir: string): Promise<string[]> {
  const names = await readdir(dir).catch(() => [] as string[]);
  const sessions = names
    .filter((n) => !n.includes('.corrupt-'))
    .flatMap((n) => (n.endsWith('.json') ? [n.slice(0, -'.json'.length)] : n.endsWith('.journal') ? [n.slice(0, -'.journal'.length)] : []));
  return [...new Set(sessions)];
}

async function identityOrNull(): Promise<Identity | undefined> {
  try {
    return await loadIdentity(keyPath());
  } catch (err) {
    if (isInterlinkError(err, 'key_missing')) return undefined;
    throw err;
  }
}

export const statusHelp = `usage: interlink-mcp status [--json]

This identity, its peers, the relays and whether each answers, and per session the
unread messages, the messages no relay has accepted yet, the Codex notices saved as
failed deliveries and the pairing requests waiting for a decision. Reads only.
Exits 1 when a file it reads (peers.json, a pairing store, a failed-deliveries file)
is damaged: everything else is still shown, and stderr says what is wrong with each
(they are left as they are).`;

export async function status(argv: readonly string[]): Promise<void> {
  const args = parse(argv, { json: { type: 'boolean' } });
  expectPositionals(args, 0, 'interlink-mcp status [--json]');
  const identity = await identityOrNull();
  const { table, damage } = await readPeers(peersPath());
  const damaged: Damage[] = damage === undefined ? [] : [damage];
  const urls = configuredRelays(process.env) ?? [`ws://${localRelayAddr(process.env)}`];
  const relays = await Promise.all(urls.map((url) => probeRelay(url, 1_000)));
  const state = stateDir();
  const sessions: {
    session: string;
    unread: number;
    stored: number;
    pending: number;
    failed_deliveries: number | 'unreadable';
    pair_requests: number | 'unreadable';
  }[] = [];
  if (identity) {
    const names = new Set([
      ...(await sessionsIn(join(state, 'mailbox', identity.key))),
      ...(await sessionsIn(join(state, 'outbox', identity.key))),
      ...(await sessionsIn(join(state, 'failed', identity.key))),
      ...(await sessionsIn(join(state, 'pairing', identity.key))),
    ]);
    for (const session of [...names].sort()) {
      const mailbox = await Mailbox.open(join(state, 'mailbox', identity.key, `${session}.json`), { readOnly: true });
      const outbox = await Outbox.open(join(state, 'outbox', identity.key, `${session}.json`), { readOnly: true });
      const stats = await mailbox.stats();
      const failedStore = FailedDeliveries.forSession(state, identity.key, session);
      const failed = await failedStore.peek();
      if ('damaged' in failed) damaged.push({ file: failedStore.path, problem: failed.damaged, unavailable: FAILED_UNAVAILABLE });
      const pairingFile = pairingPath(state, identity.key, session);
      const pairing = await peekJson(pairingFile, pairingFileSchema);
      if (pairing.kind === 'damaged') damaged.push({ file: pairingFile, problem: pairing.reason, unavailable: PAIRING_UNAVAILABLE });
      sessions.push({
        session,
        unread: stats.unread,
        stored: stats.records,
        pending: (await outbox.all()).filter(isPending).length,
        failed_deliveries: 'failures' in failed ? failed.failures.length : 'unreadable',
        pair_requests: pairing.kind === 'ok' ? pairing.value.incoming.length : pairing.kind === 'missing' ? 0 : 'unreadable',
      });
    }
  }
  const data = {
    identity: identity ? { key: identity.key, fingerprint: identity.fingerprint } : null,
    peers: table.peers.map((p) => ({ petname: p.petname, fingerprint: fingerprintOf(parsePublicKey(p.key)) })),
    relays,
    state_dir: state,
    sessions,
    damaged: damaged.map((d) => ({ file: d.file, problem: d.problem, message: damageSentence(d) })),
  };
  print(args.values.json === true, data, () => {
    const lines = [identity ? `identity     ${identity.fingerprint}  ${identity.key}` : 'identity     none yet (`interlink-mcp keygen`, or start the server once)'];
    const peers = data.peers.length === 0 ? 'none' : data.peers.map((p) => `${p.petname} (${p.fingerprint})`).join(', ');
    lines.push(`peers        ${damage === undefined ? peers : `unreadable: ${damage.file} is damaged (see below)`}`);
    for (const r of relays) lines.push(`relay        ${r.url}  ${r.answers ? 'answers' : `no answer (${r.error})`}`);
    lines.push(`state        ${state}`);
    if (sessions.length === 0) lines.push('sessions     none yet');
    for (const s of sessions) {
      const failed = s.failed_deliveries === 0 ? '' : `; failed Codex notices: ${s.failed_deliveries} (interlink-mcp failed-deliveries list)`;
      const pairing = s.pair_requests === 0 ? '' : `; pairing requests waiting for you: ${s.pair_requests} (interlink-mcp pair list)`;
      lines.push(`session      ${s.session}: ${s.unread} unread of ${s.stored} stored, ${s.pending} not yet accepted by a relay${failed}${pairing}`);
    }
    return lines.join('\n');
  });
  if (damaged.length > 0) throw new InterlinkError('corrupt', data.damaged.map((d) => d.message).join(' '));
}

export const inboxHelp = `usage: interlink-mcp inbox [--session ID] [--peer PETNAME] [--json]

Messages in this identity's mailboxes and their delivery states, oldest first by the
senders' signed time (each sender's in the order it sent them). Reads only: nothing is
acknowledged. Exits 1 when peers.json is damaged: the messages are still shown (senders
by fingerprint), and stderr says what is wrong with the file.`;

function senderName(key: string, me: Identity, table: PeerTable, peersKnown: boolean): string {
  if (key === me.key) return 'self';
  const fingerprint = fingerprintOf(parsePublicKey(key));
  return table.petnameOf(key) ?? (peersKnown ? `stranger ${fingerprint}` : fingerprint);
}

interface InboxRow {
  session: string;
  from: string;
  sender: string;
  msg_id: string;
  ts: number;
  state: string;
  task_id?: string;
  status?: string;
  text: string;
}

export async function inbox(argv: readonly string[]): Promise<void> {
  const args = parse(argv, { session: { type: 'string' }, peer: { type: 'string' }, json: { type: 'boolean' } });
  expectPositionals(args, 0, 'interlink-mcp inbox [--session ID] [--peer PETNAME] [--json]');
  const identity = await loadIdentity(keyPath());
  const { table, damage } = await readPeers(peersPath());
  const peer = typeof args.values.peer === 'string' ? args.values.peer : undefined;
  if (peer !== undefined && peer !== 'self' && damage !== undefined) throw new InterlinkError('corrupt', damage.message);
  const peerKey = peer === undefined ? undefined : peer === 'self' ? identity.key : table.keyOf(peer);
  if (peer !== undefined && peerKey === undefined) throw new InterlinkError('unknown_peer', `no peer is called ${peer}`);
  const dir = join(stateDir(), 'mailbox', identity.key);
  const only = typeof args.values.session === 'string' ? args.values.session : undefined;
  const sessions = only !== undefined ? [only] : await sessionsIn(dir);
  const rows: InboxRow[] = [];
  for (const session of sessions) {
    const mailbox = await Mailbox.open(join(dir, `${session}.json`), { readOnly: true });
    for (const record of await mailbox.all()) {
      if (peerKey !== undefined && record.envelope.from !== peerKey) continue;
      const e = record.envelope;
      rows.push({
        session,
        from: senderName(e.from, identity, table, damage === undefined),
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
  // Stable, from arrival order: equal timestamps stay in arrival order, which is the
  // mailbox's own tie-break, so each sender's messages appear in the order sent.
  rows.sort((a, b) => a.ts - b.ts);
  print(args.values.json === true, { messages: rows }, () =>
    rows.length === 0
      ? 'no messages'
      : rows
          .map((r) => {
            const task = r.task_id !== undefined ? ` [${r.task_id}${r.status !== undefined ? ` ${r.status}` : ''}]` : '';
            const text = r.text.length > 200 ? `${r.text.slice(0, 200)}…` : r.text;
            return `${new Date(r.ts).toISOString()}  ${r.session}  ${r.from}${task}  ${r.state}  ${r.msg_id}\n    ${text.replace(/\n/g, '\n    ')}`;
          })
          .join('\n'),
  );
  if (damage !== undefined) throw new InterlinkError('corrupt', damage.message);
}
