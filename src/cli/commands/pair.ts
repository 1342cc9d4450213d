/**
 * `interlink-mcp pair`: the pairing flow for people at a terminal, with no agent session.
 * It runs this identity's `cli` session for the length of the command: it connects to
 * the relays, announces itself (and leaves the announcement in place, so the other
 * person can address a request or a confirmation to it later), handles what the relays
 * hold for it (requests, confirmations), does the one thing asked, and waits (bounded)
 * until a relay has taken the control message it queued.
 */
import { Agent } from '../../agent/agent.js';
import { relayUrls } from '../../agent/local-relay.js';
import { PAIRING_SESSION } from '../../agent/routing.js';
import { droppedSentence } from '../../pairing/view.js';
import type { Config } from '../../config/env.js';
import { InterlinkError } from '../../errors.js';
import { loadOrCreateIdentity } from '../../identity/identity.js';
import { loadPeers, readPeers } from '../../peers/peers.js';
import { goingOnWithout, noUsableRelay } from '../../link/reach.js';
import { readClientTls } from '../../wire/tls.js';
import { expectPositionals, parse, print } from '../args.js';
import { presenceInfo } from '../presence-info.js';
import { visibleName } from '../../config/name-characters.js';

export const CLI_SESSION = PAIRING_SESSION;
const CONNECT_MS = 5_000;
const FLUSH_MS = 5_000;

export const pairHelp = `usage: interlink-mcp pair request <target> [--petname NAME] [--session ID] [--json]
       interlink-mcp pair list [--json]
       interlink-mcp pair accept <fingerprint> [--petname NAME] [--json]
       interlink-mcp pair reject <fingerprint> [--json]
       interlink-mcp pair confirm <fingerprint> [--json]
       interlink-mcp pair cancel <fingerprint> [--json]

Pairing by people. Both sides see the same verification code: compare it with the other
person over another channel (phone, in person) before accepting. A code that differs
means someone in between substituted a key: reject.
  request  ask <target> (a name on the roster, a full public key, or a fingerprint) to pair;
           asking again sends the same request (the same code) again
  list     incoming requests waiting for you, your open requests, and what arrived, and
           how many requests were dropped because the list (at most 64) was full
  accept   trust the requester (peers.json) and send it the confirmation; of one that
           was your peer already it says so (--json: already_peer)
  reject   drop an incoming request
  confirm  after the other side accepted a request you made by name, and the codes
           match: make it your peer
  cancel   withdraw a request of yours that is still open
Runs as this identity's "cli" session (on the relay rosters so that people can ask to
pair; agent mail never goes there); no agent session is needed. Exits 1, doing
nothing, when no relay answers or every relay that answers has a key the sessions refuse
(stderr names each relay and why: a NEW key after a reset, and the \`interlink-mcp relay
forget URL\` that accepts it), and \`pair list\`
exits 1 when peers.json is damaged (it leaves the file as it is).`;

const ACTIONS = ['request', 'list', 'accept', 'reject', 'confirm', 'cancel'] as const;
type Action = (typeof ACTIONS)[number];

function isAction(value: string | undefined): value is Action {
  return (ACTIONS as readonly (string | undefined)[]).includes(value);
}

export async function pair(argv: readonly string[], config: Config): Promise<void> {
  const [action, ...rest] = argv;
  if (!isAction(action)) throw new InterlinkError('usage', pairHelp);
  const args = parse(rest, { json: { type: 'boolean' }, petname: { type: 'string' }, session: { type: 'string' } });
  const json = args.values.json === true;
  const petname = typeof args.values.petname === 'string' ? args.values.petname : undefined;
  const session = typeof args.values.session === 'string' ? args.values.session : undefined;
  const [subject] = expectPositionals(args, action === 'list' ? 0 : 1, action === 'list' ? 'interlink-mcp pair list' : `interlink-mcp pair ${action} <${action === 'request' ? 'target' : 'fingerprint'}>`);

  // `pair list` is a view of peers.json: a damaged one is reported and left as it is.
  if (action === 'list') {
    const { damage } = await readPeers(config.peersPath);
    if (damage !== undefined) throw new InterlinkError('corrupt', damage.message);
  }
  const tls = readClientTls(config.tlsCa);
  const identity = await loadOrCreateIdentity(config.keyPath);
  const agent = await Agent.start({ identity, session: CLI_SESSION, stateDir: config.stateDir, peersPath: config.peersPath, relayUrls: await relayUrls(config), presence: presenceInfo(config.name), logOutages: false, ...(tls !== undefined && { tls }) });
  try {
    const { answered, unanswered } = await agent.reach(CONNECT_MS);
    // confirm and cancel change only this machine's files; the rest need a relay.
    if (answered.length === 0 && action !== 'confirm' && action !== 'cancel') throw noUsableRelay(unanswered);
    if (unanswered.length > 0) process.stderr.write(`interlink-mcp pair: working with the relays that answered; ${goingOnWithout(unanswered)}\n`);
    const before = (await agent.pairing.list()).outgoing;
    await agent.drain();
    const completed = await completedSince(config.peersPath, before, (await agent.pairing.list()).outgoing);
    switch (action) {
      case 'request': {
        const result = await agent.pairing.request(subject!, { ...(petname !== undefined && { petname }), ...(session !== undefined && { session }) });
        await flushAll(agent);
        const sent = !(await agent.pairing.list()).outgoing.some((o) => o.key === result.to && o.state === 'waiting_for_relay');
        print(json, { ...result, sent }, () =>
          [
            `${!result.repeated ? 'Asked' : result.resent ? 'Asked again' : 'Already asked'} ${visibleName(result.petname)} (fingerprint ${result.fingerprint}, session ${result.session}) to pair.`,
            ...(result.resent ? ['The same request as before (the same code), sent again in case their list of requests was full and dropped it.'] : []),
            `Verification code: ${result.code}`,
            'Compare it with the other person over another channel. They accept with',
            `  interlink-mcp pair accept ${identity.fingerprint}`,
            result.confirm_needed
              ? `then \`interlink-mcp pair list\` here shows their acceptance, and after comparing the code \`interlink-mcp pair confirm ${result.fingerprint}\` completes it.`
              : 'then `interlink-mcp pair list` here completes the pairing.',
            ...(sent ? [] : ['No relay has taken the request yet; it is saved, and `interlink-mcp pair list` sends it again.']),
          ].join('\n'),
        );
        return;
      }
      case 'list': {
        await flushAll(agent);
        const moot = (await Promise.all((await sessionsOf(agent)).map((p) => p.closeMoot()))).flat();
        const { listed, seen } = await listAll(agent);
        print(json, { ...listed, completed, closed_already_peers: moot }, () => describeList(listed, completed, moot));
        // Shown: the count starts again (a drop after the read stays for next time).
        await Promise.all(seen.map(({ pairing, dropped }) => pairing.sawDropped(dropped)));
        return;
      }
      case 'confirm': {
        const result = await agent.pairing.confirm(subject!);
        print(json, result, () => `${result.petname} (fingerprint ${result.fingerprint}) is now a peer. Verification code: ${result.code}`);
        return;
      }
      case 'cancel': {
        const result = await agent.pairing.cancel(subject!);
        print(json, result, () => `Withdrew your request to ${result.petname} (${result.fingerprint}). If they accept it now, nothing changes here.`);
        return;
      }
      case 'accept': {
        const result = await agent.pairing.accept(subject!, petname !== undefined ? { petname } : {});
        await flushAll(agent);
        const sent = (await agent.pairing.confirmation(result.fingerprint)) === 'sent';
        print(json, { ...result, confirmation: sent ? ('sent' as const) : ('queued' as const), sent }, () =>
          [
            `${acceptedLine(result)} Verification code: ${result.code}`,
            sent ? 'The confirmation went to a relay.' : 'No relay has taken the confirmation yet; it is saved, and `interlink-mcp pair list` sends it again.',
          ].join('\n'),
        );
        return;
      }
      case 'reject': {
        const result = await agent.pairing.reject(subject!);
        print(json, result, () => `Rejected the request from ${result.fingerprint}.`);
        return;
      }
    }
  } finally {
    await agent.close({ goodbye: false });
  }
}

/** What an accept did to peers.json: added the peer, found it there already, or found it removed since an earlier accept. */
function acceptedLine(result: { petname: string; fingerprint: string; already_peer: boolean }): string {
  if (result.already_peer) return `${visibleName(result.petname)} (fingerprint ${result.fingerprint}) was already your peer; peers.json is unchanged.`;
  if (result.petname === '') return `The request from ${result.fingerprint} was accepted earlier, and that identity is no longer your peer (removed since); nothing changed. To pair again, they send a new request.`;
  return `${visibleName(result.petname)} (fingerprint ${result.fingerprint}) is now a peer.`;
}

/**
 * Sends what waits for a relay in every session of this identity (bounded): a request or
 * confirmation queued by an agent session that has since ended goes out from here, signed
 * with that session's route. Returns how many are left.
 */
async function flushAll(agent: Agent): Promise<number> {
  const sessions = await sessionsOf(agent);
  const left = await Promise.all(sessions.map((p) => p.flush(FLUSH_MS)));
  return left.reduce((a, b) => a + b, 0);
}

type Listed = Awaited<ReturnType<Agent['pairing']['list']>>;
type LocalListing = {
  incoming: (Listed['incoming'][number] & { local_session: string })[];
  outgoing: (Listed['outgoing'][number] & { local_session: string })[];
  unsent_control_messages: number;
  /** Summed over the sessions: requests dropped from a full list since a person last saw it here. */
  dropped_requests: { count: number; since: number; since_iso: string } | null;
};

/**
 * The pairing state of every session of this identity: a request reaches whichever
 * session the requester's roster showed (often an agent's), and a person decides here.
 * `local_session` says which session of this identity holds each entry.
 */
async function sessionsOf(agent: Agent): Promise<Agent['pairing'][]> {
  return [agent.pairing, ...(await agent.pairing.otherSessions())];
}

async function listAll(agent: Agent): Promise<{ listed: LocalListing; seen: { pairing: Agent['pairing']; dropped: NonNullable<Listed['dropped_requests']> }[] }> {
  const sessions = await sessionsOf(agent);
  const all = await Promise.all(sessions.map((p) => p.list()));
  const seen = all.flatMap((l, i) => (l.dropped_requests === null ? [] : [{ pairing: sessions[i]!, dropped: l.dropped_requests }]));
  const since = Math.min(...seen.map((s) => s.dropped.since));
  const listed = {
    incoming: all.flatMap((l, i) => l.incoming.map((entry) => ({ ...entry, local_session: sessions[i]!.session }))),
    outgoing: all.flatMap((l, i) => l.outgoing.map((entry) => ({ ...entry, local_session: sessions[i]!.session }))),
    unsent_control_messages: all.reduce((sum, l) => sum + l.unsent_control_messages, 0),
    dropped_requests: seen.length === 0 ? null : { count: seen.reduce((sum, s) => sum + s.dropped.count, 0), since, since_iso: new Date(since).toISOString() },
  };
  return { listed, seen };
}

type OutgoingView = { key: string; petname: string; fingerprint: string; state: string };

/** Open requests that an acceptance closed while the relays' mail was handled: now peers. */
async function completedSince(peersPath: string, before: readonly OutgoingView[], after: readonly OutgoingView[]) {
  const { table } = await loadPeers(peersPath);
  const closed = before.filter((o) => o.state !== 'accepted_with_conflict' && !after.some((a) => a.key === o.key));
  return closed.filter((o) => table.has(o.key)).map((o) => ({ petname: table.petnameOf(o.key) ?? o.petname, fingerprint: o.fingerprint, key: o.key }));
}

function describeList(listed: LocalListing, completed: { petname: string; fingerprint: string }[], moot: { petname: string; fingerprint: string }[]): string {
  const where = (session: string) => (session === CLI_SESSION ? '' : `  (session ${session})`);
  const lines: string[] = [];
  for (const c of completed) lines.push(`${c.petname} (fingerprint ${c.fingerprint}) accepted your request: now a peer.`);
  for (const m of moot) lines.push(`${m.petname} (fingerprint ${m.fingerprint}) is already your peer (peers.json); your open request to it is closed.`);
  if (listed.dropped_requests !== null) lines.push(droppedSentence(listed.dropped_requests));
  if (listed.incoming.length === 0) lines.push('No incoming pairing requests.');
  else lines.push('Incoming (you decide; compare the code first):');
  for (const i of listed.incoming) {
    const again = i.already_peer !== undefined ? `  (already your peer ${i.already_peer}: it asks again, probably because it removed you)` : '';
    lines.push(`  ${i.fingerprint}  claims to be ${visibleName(JSON.stringify(i.claimed_name))}  code ${i.code}${where(i.local_session)}${again}`);
    lines.push(`    interlink-mcp pair accept ${i.fingerprint}   |   interlink-mcp pair reject ${i.fingerprint}`);
  }
  if (listed.outgoing.length > 0) lines.push('Your open requests:');
  for (const o of listed.outgoing) {
    lines.push(`  ${visibleName(o.petname)} (${o.fingerprint})  code ${o.code}  ${outgoingLine(o)}${where(o.local_session)}`);
  }
  if (listed.unsent_control_messages > 0) lines.push(`${listed.unsent_control_messages} pairing message(s) still wait for a relay.`);
  return lines.join('\n');
}

/** What an open request of ours waits for, and on whom. */
function outgoingLine(o: LocalListing['outgoing'][number]): string {
  switch (o.state) {
    case 'accepted_confirm_needed':
      return `accepted: compare the code with them, then run \`interlink-mcp pair confirm ${o.fingerprint}\``;
    case 'accepted_with_conflict':
      return `accepted, not added: ${o.conflict ?? ''}`;
    case 'waiting_for_relay':
      return 'waiting for a relay to take the request';
    case 'sent':
      return 'sent: waiting for them to accept';
  }
}
