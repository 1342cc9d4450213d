/**
 * One session of one identity, running: its mailbox and outbox, its relay connections
 * and the loops that move messages (inbound, outbound, presence). compose.ts makes these
 * parts and wires them together; the agent starts them, closes them, and holds the
 * operations the MCP tools and the CLI call (each returns plain data or throws an
 * InterlinkError). Sending (sending.ts), reading (reading.ts) and the peer table
 * (peer-watch.ts) live beside it.
 */
import type { Receipt } from '../envelope/receipt.js';
import type { ReceiptSender } from './receipts.js';
import { fingerprintOf, parsePublicKey, type Identity } from '../identity/identity.js';
import { log } from '../log.js';
import type { Mailbox } from '../mailbox/mailbox.js';
import { Notifier, type NoticeSink } from '../notices/notifier.js';
import type { Outbox } from '../outbox/outbox.js';
import type { Pairing } from '../pairing/pairing.js';
import type { PeerTable } from '../peers/peers.js';
import type { RelayClient } from '../link/client.js';
import type { Unanswered } from '../link/reach.js';
import type { ReplayIndex } from '../replay/claims.js';
import { composeSession, type AgentOptions, type SessionParts } from './compose.js';
import type { Inbound } from './inbound.js';
import type { Outbound } from './outbound.js';
import type { PeerWatch } from './peer-watch.js';
import type { Presence, RosterSession } from './presence.js';
import { conversation, inboxMessage, messageStatus, type InboxMessage } from './reading.js';
import { Sender, type GroupReceipt, type SendArgs, type SendReceipt } from './sending.js';
import { groupPanel, groupThread, type GroupStores } from './group-views.js';
import { stillWorking } from './groups.js';
import { isInterlinkError, messageOf } from '../errors.js';
import { clampFetchLimit, MAX_FETCH_LIMIT } from '../mailbox/rules.js';
import { acknowledgeWhereHeld, presentTogether } from './inherited.js';
import type { Succession } from './succession.js';

export type { InboxMessage } from './reading.js';
export type { SendArgs, SendReceipt } from './sending.js';

export class Agent {
  readonly route: string;
  readonly mailbox: Mailbox;
  readonly outbox: Outbox;
  readonly relays: RelayClient[];
  readonly presence: Presence;
  readonly pairing: Pairing;
  private notifier: Notifier | undefined;
  private readonly closing = new AbortController();
  private readonly sender: Sender;
  private readonly inbound: Inbound;
  private readonly outbound: Outbound;
  private readonly peerWatch: PeerWatch;
  private readonly replayIndex: ReplayIndex;
  private readonly receipts: ReceiptSender;
  private readonly succession: Succession | undefined;

  private constructor(readonly options: AgentOptions, parts: SessionParts) {
    const { route, mailbox, outbox, relays, presence, pairing, inbound, outbound, peerWatch, replay, receipts, succession, sticky, clock } = parts;
    this.route = route;
    this.mailbox = mailbox;
    this.outbox = outbox;
    this.relays = relays;
    this.presence = presence;
    this.pairing = pairing;
    this.inbound = inbound;
    this.outbound = outbound;
    this.peerWatch = peerWatch;
    this.replayIndex = replay;
    this.receipts = receipts;
    this.succession = succession;
    this.sender = new Sender({ identity: options.identity, session: options.session, route: this.route, outbox, mailbox, outbound, relays, presence, peers: peerWatch, sticky, clock, unsealed: options.unsealed === true });
  }

  /** Opens the session's stores, makes its parts (compose.ts), and starts them. */
  static async start(options: AgentOptions): Promise<Agent> {
    let agent: Agent | undefined;
    const parts = await composeSession(options, { stored: () => agent?.notifier?.kick(), senderName: (key) => agent!.senderName(key) });
    agent = new Agent(options, parts);
    const { route, relays, groups, inbound, presence, outbound, pairing, succession } = parts;
    // Read peers.json once now, so a damaged one is reported (and moved aside) at start, not at the first message.
    await parts.peerWatch.trust().catch((err: unknown) => log.warn('peers_unreadable', { error: messageOf(err) }));
    groups.start();
    for (const relay of relays) {
      inbound.attach(relay, route);
      relay.start();
    }
    presence.start();
    outbound.start();
    pairing.start();
    await succession?.start(parts.registered);
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

  /** One message to a peer or "self". */
  send(args: SendArgs): Promise<SendReceipt> {
    return this.sender.send(args);
  }

  /** send_message: one message to a peer or "self", or one copy each to several (a list, or an audience; groups.ts). */
  sendMessage(args: Omit<SendArgs, 'to'> & { to: string | readonly string[] }): Promise<SendReceipt | GroupReceipt> {
    return this.sender.sendMessage(args);
  }

  /** The stores a group may be in: this session's, then those of the ended sessions it took. */
  private groupStores(): GroupStores[] {
    return [{ outbox: this.outbox, mailbox: this.mailbox }, ...(this.succession?.taken() ?? []).map((t) => ({ outbox: t.outbox, mailbox: t.mailbox, session: t.session }))];
  }

  /** The panel of a group this session sent: each recipient's delivery and answer. */
  async groupStatus(groupId: string) {
    return groupPanel(this.groupStores(), groupId, await this.peers(), () => this.presence.sighting());
  }

  /** A group's thread: its copies, follow-ups and the answers linked to them, oldest first. */
  async groupHistory(groupId: string, limit = 20, consume = false) {
    const result = await groupThread(this.groupStores(), groupId, await this.peers(), limit, consume);
    if (consume) await this.reportAcknowledged(result.messages.flatMap((m) => (m.receipt === undefined ? [] : [m.receipt])));
    return result;
  }

  cancelTask(args: { to: string; task_id: string; reason?: string; session?: string }): Promise<SendReceipt> {
    return this.sender.cancelTask(args);
  }

  /**
   * Cancels a group's task at every recipient still expected to answer: each gets a
   * "canceled" message answering its copy, with the group's id and task id. Recipients that
   * answered, refused, or got no copy are left alone and listed.
   */
  async cancelGroup(groupId: string, reason?: string) {
    // The turn is taken at the call, so the cancellation is signed in the order the calls came.
    const turn = this.sender.takeTurn();
    let panel: Awaited<ReturnType<Agent['groupStatus']>>;
    let table: PeerTable;
    try {
      panel = await this.groupStatus(groupId);
      table = await this.peers();
    } catch (err) {
      turn.done();
      throw err;
    }
    const working = panel.recipients.filter((r) => stillWorking(r.outcome) && r.msg_id !== undefined);
    const left = panel.recipients.filter((r) => !working.includes(r)).map((r) => ({ to: r.to, outcome: r.outcome }));
    if (working.length === 0) {
      turn.done();
      return { group_id: groupId, canceled: [], left_alone: left };
    }
    const recipients = working.map((r) => ({ petname: r.to, key: r.key, ...(table.clear.has(r.key) && { clear: true as const }) }));
    const receipt = await this.sender.group(
      turn,
      working.map((r) => r.to),
      recipients,
      { text: reason?.trim() ? reason : 'canceled', status: 'canceled', ...(panel.task_id !== undefined && { task_id: panel.task_id }) },
      { group: groupId, replyTo: new Map(working.map((r) => [r.key, r.msg_id!])) },
    );
    return { group_id: groupId, canceled: receipt.recipients, left_alone: left, relays: receipt.relays, ...(receipt.note !== undefined && { note: receipt.note }) };
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

  listAudiences() {
    return this.peerWatch.audiences();
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

