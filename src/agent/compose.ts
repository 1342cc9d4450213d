/**
 * The parts of one session, made and wired together for Agent.start (agent.ts): its
 * stores (mailbox, outbox, replay index), its relay clients and their groups, and the
 * loops over them (inbound, outbound, presence, pairing, receipts, succession). Nothing is
 * started here: the agent starts the parts once it exists, so no delivery arrives before
 * there is an agent to wake.
 */
import { dirname } from 'node:path';
import { knownRelaysPath, mailboxPath, outboxPath, pairingPath, rejectedPath, replayPath } from '../config/layout.js';
import { formatRoute } from '../envelope/route.js';
import { wireOf, type Envelope } from '../envelope/envelope.js';
import { offerable } from '../envelope/sign.js';
import { parseReceiptText } from '../receipts/receipts.js';
import { ReceiptSender } from './receipts.js';
import type { Identity } from '../identity/identity.js';
import { log } from '../log.js';
import type { StoredRecord } from '../mailbox/format.js';
import { Mailbox } from '../mailbox/mailbox.js';
import { SendClock } from '../outbox/clock.js';
import { Outbox } from '../outbox/outbox.js';
import { Pairing } from '../pairing/pairing.js';
import { PairingStore } from '../pairing/store.js';
import { RelayClient } from '../link/client.js';
import type { ClientTls } from '../wire/tls.js';
import { KnownRelays } from '../link/known-relays.js';
import { RelayGroups, soleAddresses } from '../link/relay-groups.js';
import { ReplayIndex } from '../replay/claims.js';
import { isNewIndex, seedFromMailboxes } from '../replay/seed.js';
import { Inbound } from './inbound.js';
import { newestSessions, storedSightings } from './known-sessions.js';
import { Outbound } from './outbound.js';
import { PeerWatch } from './peer-watch.js';
import { Presence, type PresenceInfo } from './presence.js';
import { recordRejection } from './rejected.js';
import { messageOf } from '../errors.js';
import type { SessionHost } from '../succession/rules.js';
import { registerSession, Succession } from './succession.js';
import { signGoodbye } from '../presence/announcement.js';

export interface AgentOptions {
  identity: Identity;
  session: string;
  stateDir: string;
  peersPath: string;
  relayUrls: readonly string[];
  presence: PresenceInfo;
  announceIntervalMs?: number;
  /** False for a command that reports unreachable relays itself (pair): no outage log lines. */
  logOutages?: boolean;
  /** Certificates `wss://` relays may present besides Node's CAs (INTERLINK_TLS_CA). */
  tls?: ClientTls;
  /** Called after each new message is committed to the mailbox (receiver_stored). */
  onStored?: (record: StoredRecord) => void;
  /**
   * The benchmark's baseline (INTERLINK_BENCH_UNSEALED): send clear version 3 envelopes,
   * admit clear ones from every peer, send no receipts. Never for real use.
   */
  unsealed?: boolean;
  /**
   * What started this session (`serve`: claude or codex). A session with a host registers
   * itself in the identity's session registry and, while it is the heir, takes the mail of
   * the identity's ended sessions on this machine (agent/succession.ts).
   */
  host?: SessionHost;
}

/** What the parts ask of the agent they make up, once it exists. */
export interface AgentHooks {
  /** A new message is in this session's own mailbox: wake the notifier. */
  stored(): void;
  /** A sender's short name in a notice (Agent.senderName). */
  senderName(key: string): Promise<string>;
}

export interface SessionParts {
  route: string;
  mailbox: Mailbox;
  outbox: Outbox;
  replay: ReplayIndex;
  relays: RelayClient[];
  groups: RelayGroups<RelayClient>;
  inbound: Inbound;
  outbound: Outbound;
  presence: Presence;
  pairing: Pairing;
  peerWatch: PeerWatch;
  /** The session each peer was last seen in, seeded from the stores. */
  sticky: Map<string, string>;
  clock: SendClock;
  receipts: ReceiptSender;
  succession: Succession | undefined;
  /** Whether the session registered itself as live (a session with a host). */
  registered: boolean;
}

/**
 * Records what a receipt reports in the outbox, durably (the relay is acknowledged after).
 * A receipt whose text is not a receipt is logged and dropped: the same bytes would be
 * refused however often they came.
 */
async function applyReceipt(outbox: Outbox, envelope: Envelope): Promise<void> {
  let entries;
  try {
    entries = parseReceiptText(envelope.text);
  } catch (err) {
    log.warn('receipt_unreadable', { from: envelope.from, msg_id: envelope.msg_id, error: messageOf(err) });
    return;
  }
  const { applied, ignored } = await outbox.recordRemote(envelope.from, entries);
  // Reports on messages this session did not send to that key change nothing (a forged or stray receipt).
  if (ignored > 0) log.info('receipt_entries_ignored', { from: envelope.from, msg_id: envelope.msg_id, applied, ignored });
}

export async function composeSession(options: AgentOptions, agent: AgentHooks): Promise<SessionParts> {
  const { identity, session, stateDir } = options;
  const mailbox = await Mailbox.open(mailboxPath(stateDir, identity.key, session));
  const outbox = await Outbox.open(outboxPath(stateDir, identity.key, session));
  // Live in the registry once its stores open (a root they cannot use stops the session
  // first, in one line); the heir leaves a mailbox the registry does not know alone
  // while it changes (succession/rules.ts), so this new one is never taken meanwhile.
  const registered = options.host === undefined ? false : await registerSession(stateDir, identity.key, session, options.host);
  const replayFile = replayPath(stateDir, identity.key);
  const seedIndex = isNewIndex(replayFile);
  const replay = await ReplayIndex.open(replayFile);
  if (seedIndex) await seedFromMailboxes(replay, dirname(mailboxPath(stateDir, identity.key, session)));
  const route = formatRoute({ key: identity.key, session });
  const trust = new KnownRelays(knownRelaysPath(stateDir), options.relayUrls);
  // A relay listed at several addresses (one key pinned on each) is read through one of them (relay-groups.ts).
  const sole = soleAddresses(options.relayUrls);
  const relays = options.relayUrls.map(
    (url, i) =>
      new RelayClient({
        url,
        key: identity.signingKey,
        routes: [route],
        trust,
        readOnConnect: sole[i]!,
        ...(options.logOutages !== undefined && { logOutages: options.logOutages }),
        ...(options.tls !== undefined && { tls: options.tls }),
      }),
  );
  const groups = new RelayGroups(relays, route);
  const peerWatch = new PeerWatch(options.peersPath, identity.key);
  // Who may read this session's announced details: its peers and its own identity's sessions.
  const readers = async () => [identity.key, ...(await peerWatch.trust()).table.peers.map((p) => p.key)];
  const presence = new Presence(identity.signingKey, session, relays, options.presence, readers, options.announceIntervalMs);
  const pairing = new Pairing({
    identity,
    session,
    store: new PairingStore(pairingPath(stateDir, identity.key, session)),
    peersPath: options.peersPath,
    relays,
    lookup: async (query) => (await presence.lookup(query)).entries,
    name: options.presence.name,
  });
  // Seeded from the stores, so a restarted session routes to a peer it met before even with no relay answering.
  const sticky = newestSessions(await storedSightings(mailbox, outbox), route);
  // Made below, once the relays exist; used only after deliveries start.
  let receipts: ReceiptSender | undefined;
  const wire = options.unsealed === true ? wireOf : (envelope: Envelope) => offerable(identity.signingKey, envelope);
  // One inbound loop per session whose route this process reads: its own, and each
  // ended session it took (succession.ts), whose messages go to that session's mailbox
  // and are judged by the gate for the session they were signed for.
  const inboundFor = (forSession: string, box: Mailbox, sent: Outbox, stored: (record: StoredRecord) => void) =>
    new Inbound({
      me: identity,
      session: forSession,
      claim: (claim) => replay.claim(claim),
      mailbox: box,
      trust: () => peerWatch.trust(),
      outstanding: () => pairing.outstanding(),
      pairing: (envelope, admission) => pairing.handle(envelope, admission),
      sticky,
      onStored: (record) => {
        stored(record);
        options.onStored?.(record);
      },
      rejected: (entry) => recordRejection(rejectedPath(stateDir, identity.key, forSession), entry),
      receipt: (envelope) => applyReceipt(sent, envelope),
      ...(options.unsealed === true && { admitClear: true }),
      reports: {
        stored: (envelope) => receipts?.stored(envelope),
        refused: async (wire, code) => receipts?.refused(wire, code),
      },
    });
  const inbound = inboundFor(session, mailbox, outbox, () => agent.stored());
  const outbound = new Outbound(outbox, groups.groups, wire);
  receipts = new ReceiptSender({ identity, relays, trust: () => peerWatch.trust(), sticky, enabled: options.unsealed !== true, owedPath: rejectedPath(stateDir, identity.key, session) });
  // Refusals reported before a restart whose receipt no relay took yet: due again now.
  await receipts.resume();
  const succession =
    options.host === undefined
      ? undefined
      : new Succession({
          identity: identity.key,
          session,
          host: options.host,
          stateDir,
          relays,
          inbound: (ended, box, sent) => inboundFor(ended, box, sent, () => succession?.kick(ended)),
          outbound: (sent) => new Outbound(sent, groups.groups, wire),
          senderName: (key) => agent.senderName(key),
          learn: async (box, sent) => {
            for (const [key, known] of newestSessions(await storedSightings(box, sent), route)) if (!sticky.has(key)) sticky.set(key, known);
          },
          adoptReceipts: (ended) => receipts!.adopt(rejectedPath(stateDir, identity.key, ended)),
          goodbye: (ended) => {
            const goodbye = signGoodbye(identity.signingKey, ended);
            for (const relay of relays) void relay.goodbye(goodbye);
          },
        });
  const clock = new SendClock(await outbox.lastTimestamp());
  return { route, mailbox, outbox, replay, relays, groups, inbound, outbound, presence, pairing, peerWatch, sticky, clock, receipts, succession, registered };
}
