/**
 * One session of one identity, running: its mailbox and outbox, its relay connections
 * and the loops that move messages (inbound, outbound, presence). This module composes
 * them; sending (sending.ts), reading (reading.ts) and the peer table (peer-watch.ts)
 * live beside it. The MCP tools and the CLI call the operations here; each returns plain
 * data or throws an InterlinkError.
 */
import { dirname } from 'node:path';
import { knownRelaysPath, mailboxPath, outboxPath, pairingPath, rejectedPath, replayPath } from '../config/layout.js';
import { formatRoute } from '../envelope/route.js';
import { wireOf, type Envelope } from '../envelope/envelope.js';
import { offerable } from '../envelope/sign.js';
import type { Receipt } from '../envelope/receipt.js';
import { parseReceiptText } from '../receipts/receipts.js';
import { ReceiptSender } from './receipts.js';
import { fingerprintOf, parsePublicKey, type Identity } from '../identity/identity.js';
import { log } from '../log.js';
import type { StoredRecord } from '../mailbox/format.js';
import { Mailbox } from '../mailbox/mailbox.js';
import { Notifier, type NoticeSink } from '../notices/notifier.js';
import { SendClock } from '../outbox/clock.js';
import { Outbox } from '../outbox/outbox.js';
import { Pairing } from '../pairing/pairing.js';
import { PairingStore } from '../pairing/store.js';
import type { PeerTable } from '../peers/peers.js';
import { RelayClient } from '../link/client.js';
import type { Unanswered } from '../link/reach.js';
import type { ClientTls } from '../wire/tls.js';
import { KnownRelays } from '../link/known-relays.js';
import { RelayGroups, soleAddresses } from '../link/relay-groups.js';
import { ReplayIndex } from '../replay/claims.js';
import { isNewIndex, seedFromMailboxes } from '../replay/seed.js';
import { Inbound } from './inbound.js';
import { newestSessions, storedSightings } from './known-sessions.js';
import { Outbound } from './outbound.js';
import { PeerWatch } from './peer-watch.js';
import { Presence, type PresenceInfo, type RosterSession } from './presence.js';
import { conversation, inboxMessage, messageStatus, type InboxMessage } from './reading.js';
import { recordRejection } from './rejected.js';
import { Sender, type SendArgs, type SendReceipt } from './sending.js';
import { isInterlinkError, messageOf } from '../errors.js';
import type { SessionHost } from '../succession/rules.js';
import { clampFetchLimit, MAX_FETCH_LIMIT } from '../mailbox/rules.js';
import { acknowledgeWhereHeld, presentTogether } from './inherited.js';
import { registerSession, Succession } from './succession.js';
import { signGoodbye } from '../presence/announcement.js';

export type { InboxMessage } from './reading.js';
export type { SendArgs, SendReceipt } from './sending.js';

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

export class Agent {
  readonly route: string;
  private notifier: Notifier | undefined;
  private readonly closing = new AbortController();
  private readonly sender: Sender;

  private constructor(
    readonly options: AgentOptions,
    readonly mailbox: Mailbox,
    readonly outbox: Outbox,
    readonly relays: RelayClient[],
    private readonly inbound: Inbound,
    private readonly outbound: Outbound,
    readonly presence: Presence,
    readonly pairing: Pairing,
    private readonly peerWatch: PeerWatch,
    sticky: ReadonlyMap<string, string>,
    clock: SendClock,
    private readonly replayIndex: ReplayIndex,
    private readonly receipts: ReceiptSender,
    private readonly succession: Succession | undefined,
  ) {
    this.route = formatRoute({ key: options.identity.key, session: options.session });
    this.sender = new Sender({ identity: options.identity, session: options.session, route: this.route, outbox, mailbox, outbound, relays, presence, peers: peerWatch, sticky, clock, unsealed: options.unsealed === true });
  }

  static async start(options: AgentOptions): Promise<Agent> {
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
      roster: () => presence.roster({ fresh: true }),
      name: options.presence.name,
    });
    // Seeded from the stores, so a restarted session routes to a peer it met before even with no relay answering.
    const sticky = newestSessions(await storedSightings(mailbox, outbox), route);
    let agent: Agent | undefined;
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
    const inbound = inboundFor(session, mailbox, outbox, () => agent?.notifier?.kick());
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
            senderName: (key) => agent!.senderName(key),
            learn: async (box, sent) => {
              for (const [key, known] of newestSessions(await storedSightings(box, sent), route)) if (!sticky.has(key)) sticky.set(key, known);
            },
            adoptReceipts: (ended) => receipts!.adopt(rejectedPath(stateDir, identity.key, ended)),
            goodbye: (ended) => {
              const goodbye = signGoodbye(identity.signingKey, ended);
              for (const relay of relays) void relay.goodbye(goodbye);
            },
          });
    agent = new Agent(options, mailbox, outbox, relays, inbound, outbound, presence, pairing, peerWatch, sticky, new SendClock(await outbox.lastTimestamp()), replay, receipts, succession);
    // Read peers.json once now, so a damaged one is reported (and moved aside) at start, not at the first message.
    await peerWatch.trust().catch((err: unknown) => log.warn('peers_unreadable', { error: messageOf(err) }));
    groups.start();
    for (const relay of relays) {
      inbound.attach(relay, route);
      relay.start();
    }
    presence.start();
    outbound.start();
    pairing.start();
    await succession?.start(registered);
    return agent;
  }

  /** Starts waking the host through `sink` (the Claude inbox, a channel, or Codex). */
  startNotices(sink: NoticeSink): void {
    this.notifier = new Notifier({
      mailbox: this.mailbox,
      identity: this.identity.key,
      session: this.session,
      sink,
      senderName: (key) => this.senderName(key),
    });
    this.notifier.start();
    this.succession?.notifyThrough(sink);
    // Pairing notices are not mail: they go to the host once, when the request arrives.
    this.pairing.notify = async (notice) => {
      await sink.deliver({ notification_id: notice.id, session: this.session, count: 0, senders: [], at: Date.now(), kind: 'pairing' }, notice.text);
    };
  }

  /** A short name for a sender key in a notice: `self`, its petname, or its fingerprint. */
  async senderName(key: string): Promise<string> {
    return key === this.identity.key ? 'self' : ((await this.peers()).petnameOf(key) ?? fingerprintOf(parsePublicKey(key)));
  }

  /** Waits until every delivery the relays pushed before answering a roster request has been handled. */
  async drain(): Promise<void> {
    await this.presence.roster({ fresh: true });
    await this.inbound.settled();
  }

  /**
   * Resets the notice reservation and wakes the notifier: the unread mail gets a notice
   * again, wherever the sink now delivers (a host that moved its inbox, see hosts/claude).
   */
  async renotify(): Promise<void> {
    await this.mailbox.resetNotice();
    this.notifier?.kick();
  }

  /** Aborted when the session closes: work started for a tool call (a `codex queue` retry) stops with it. */
  get closingSignal(): AbortSignal {
    return this.closing.signal;
  }

  get identity(): Identity {
    return this.options.identity;
  }

  get session(): string {
    return this.options.session;
  }

  /** Waits until every relay is connected and authenticated (or the deadline passes). */
  async ready(timeoutMs: number): Promise<boolean> {
    const results = await Promise.all(this.relays.map((r) => r.ready(timeoutMs)));
    return results.every(Boolean);
  }

  /**
   * Waits until each relay is either ready or has failed a connection attempt (or the
   * deadline passed), and says which answered and why the others did not.
   */
  async reach(timeoutMs: number): Promise<{ answered: string[]; unanswered: Unanswered[] }> {
    const results = await Promise.all(this.relays.map(async (r) => ({ relay: r, ready: await r.ready(timeoutMs, { failFast: true }) })));
    return {
      answered: results.filter((r) => r.ready).map((r) => r.relay.url),
      unanswered: results.filter((r) => !r.ready).map((r) => ({ url: r.relay.url, trouble: r.relay.trouble })),
    };
  }

  /** peers.json, read again whenever it changed on disk, so removals apply at once. */
  peers(): Promise<PeerTable> {
    return this.peerWatch.peers();
  }

  send(args: SendArgs): Promise<SendReceipt> {
    return this.sender.send(args);
  }

  cancelTask(args: { to: string; task_id: string; reason?: string; session?: string }): Promise<SendReceipt> {
    return this.sender.cancelTask(args);
  }

  cancelPending(msgId: string) {
    return this.sender.cancelPending(msgId);
  }

  listPending() {
    return this.sender.listPending();
  }

  /** One message's state: from this session's outbox or mailbox, else from those of the ended sessions it took. */
  async messageStatus(msgId: string) {
    try {
      return await messageStatus(this.outbox, this.mailbox, msgId, () => this.presence.sighting());
    } catch (err) {
      if (!isInterlinkError(err, 'unknown_message')) throw err;
      for (const taken of this.succession?.taken() ?? []) {
        const found = await messageStatus(taken.outbox, taken.mailbox, msgId, () => this.presence.sighting()).catch(() => undefined);
        if (found !== undefined) return { ...found, session: taken.session };
      }
      throw err;
    }
  }

  /**
   * Unread messages: this session's, then those of the ended sessions it took (each
   * marked with `to_session`, the session it was signed for), progress updates last.
   */
  async receive(limit?: number, resetNotice = false): Promise<{ messages: InboxMessage[]; more: boolean }> {
    const taken = this.succession?.taken() ?? [];
    if (resetNotice) {
      await Promise.all([this.mailbox, ...taken.map((t) => t.mailbox)].map((box) => box.resetNotice()));
      this.notifier?.kick();
      for (const t of taken) t.kick();
    }
    if (taken.length === 0) {
      const { messages, more } = await this.mailbox.fetch(limit);
      return { messages: messages.map(inboxMessage), more };
    }
    // A full page from each: one sender's messages may sit in several mailboxes.
    const own = await this.mailbox.fetch(MAX_FETCH_LIMIT);
    const others = await Promise.all(taken.map(async (t) => ({ session: t.session, fetched: await t.mailbox.fetch(MAX_FETCH_LIMIT) })));
    return presentTogether(own, others, clampFetchLimit(limit));
  }

  async acknowledge(receipts: { sender: string; msg_id: string }[]) {
    const taken = this.succession?.taken() ?? [];
    const counts = taken.length === 0 ? await this.mailbox.acknowledge(receipts) : await acknowledgeWhereHeld(this.mailbox, taken, receipts);
    // The reservation may have ended; anything that arrived meanwhile gets its notice now.
    this.notifier?.kick();
    for (const t of taken) t.kick();
    await this.reportAcknowledged(receipts);
    return counts;
  }

  /** Both directions with one peer, oldest first; `consume` acknowledges exactly the inbound ones returned. */
  async history(peer: string, limit = 20, consume = false) {
    const { key } = await this.peerWatch.resolve(peer);
    const result = await conversation(this.outbox, this.mailbox, key, limit, consume);
    if (consume) await this.reportAcknowledged(result.messages.flatMap((m) => (m.receipt === undefined ? [] : [m.receipt])));
    return result;
  }

  /** Tells the senders (signed receipts) that these messages are acknowledged here. */
  private async reportAcknowledged(receipts: readonly Receipt[]): Promise<void> {
    if (receipts.length === 0) return;
    const boxes = [this.mailbox, ...(this.succession?.taken() ?? []).map((t) => t.mailbox)];
    this.receipts.acknowledged((await Promise.all(boxes.map((box) => box.records(receipts)))).flat());
  }

  listPeers() {
    return this.peerWatch.list();
  }

  addPeer(petname: string, key: string) {
    return this.peerWatch.add(petname, key);
  }

  removePeer(petname: string) {
    return this.peerWatch.remove(petname);
  }

  async discover(peer?: string) {
    const roster = await this.presence.roster({ fresh: true });
    const table = await this.peers();
    const only = peer === undefined ? undefined : (await this.peerWatch.resolve(peer)).key;
    const byKey = new Map<string, RosterSession[]>();
    for (const entry of roster) {
      if (only !== undefined && entry.key !== only) continue;
      byKey.set(entry.key, [...(byKey.get(entry.key) ?? []), entry]);
    }
    return {
      identities: [...byKey].map(([key, sessions]) => ({
        key,
        fingerprint: fingerprintOf(parsePublicKey(key)),
        petname: key === this.identity.key ? 'self' : table.petnameOf(key),
        trusted: key === this.identity.key || table.has(key),
        sessions: sessions.map((s) => ({ session: s.session, state: s.state, name: s.name, cwd: s.cwd, git_root: s.git_root, summary: s.summary, age_ms: s.age_ms })),
      })),
    };
  }

  setSummary(summary: string) {
    this.presence.setSummary(summary);
    return { summary };
  }

  /** `goodbye: false` leaves this session on the rosters (away), so peers can still address it. */
  async close(options: { goodbye?: boolean } = {}): Promise<void> {
    this.closing.abort();
    await this.succession?.stop();
    await this.notifier?.stop();
    this.outbound.stop();
    this.pairing.stop();
    this.inbound.close();
    await this.receipts.close();
    if (options.goodbye !== false) await this.presence.goodbye().catch(() => undefined);
    else this.presence.stop();
    for (const relay of this.relays) relay.close();
    await Promise.all([this.mailbox.close(), this.outbox.close(), this.replayIndex.close()]);
  }
}

