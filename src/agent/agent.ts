/**
 * One session of one identity, running: its mailbox and outbox, its relay connections
 * and the loops that move messages (inbound, outbound, presence). The MCP tools and the
 * CLI call the operations here; each returns plain data or throws an InterlinkError.
 */
import { readdir, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { mailboxPath, outboxPath, pairingPath, rejectedPath, replayPath } from '../config/layout.js';
import { checkSafeName, unsafeNameReason } from '../config/paths.js';
import { ReplayIndex } from '../replay/claims.js';
import { FailedDeliveries } from '../codex/failed.js';
import { MAX_TEXT_BYTES, signEnvelope, type Envelope, type Status } from '../envelope/envelope.js';
import { receiptOf, type Receipt } from '../envelope/receipt.js';
import { formatRoute, parseRoute } from '../envelope/route.js';
import { InterlinkError, isInterlinkError } from '../errors.js';
import { fingerprintOf, parsePublicKey, type Identity } from '../identity/identity.js';
import { log } from '../log.js';
import { Mailbox } from '../mailbox/mailbox.js';
import type { StoredRecord } from '../mailbox/format.js';
import { currentState } from '../mailbox/state.js';
import { SendClock } from '../outbox/clock.js';
import { Outbox, intentOf, outboundState, type AddResult, type OutboundState, type OutboxRecord } from '../outbox/outbox.js';
import { PeerTable, addPeer, loadPeers, removePeer } from '../peers/peers.js';
import { RelayClient } from '../relay/client.js';
import { MAX_PAYLOAD_BYTES } from '../relay/frames.js';
import { Notifier, type NoticeSink } from '../notices/notifier.js';
import { Pairing } from '../pairing/pairing.js';
import { PairingStore } from '../pairing/store.js';
import { Inbound } from './inbound.js';
import { recordRejection } from './rejected.js';
import { Outbound } from './outbound.js';
import { Presence, type PresenceInfo, type RosterSession } from './presence.js';
import { chooseSession, PAIRING_SESSION } from './routing.js';
import { Turns } from './turns.js';

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
  /** Called after each new message is committed to the mailbox (receiver_stored). */
  onStored?: (record: StoredRecord) => void;
}

export interface SendArgs {
  to: string;
  text: string;
  session?: string;
  task_id?: string;
  status?: Status;
  in_reply_to?: string;
  idempotency_key?: string;
}

export interface SendReceipt {
  msg_id: string;
  to: string;
  session: string;
  state: OutboundState;
  duplicate: boolean;
  /** How many of the configured relays this session is connected to right now. */
  relays: { connected: number; configured: number };
  /** Present when no relay is connected: where the message waits. */
  note?: string;
}

const NO_RELAY_NOTE = 'no relay is connected: the message waits in the outbox and goes out when a relay answers (see list_pending)';

export interface InboxMessage {
  sender: string;
  peer?: string;
  msg_id: string;
  text: string;
  ts: number;
  task_id?: string;
  status?: Status;
  in_reply_to?: string;
  reply_to?: string;
  receipt: Receipt;
}

export class Agent {
  readonly route: string;
  private peerCache: { stamp: string; table: PeerTable; damaged: boolean } | undefined;
  private notifier: Notifier | undefined;
  /** The session id Claude's hooks use for this session's inbox (see bindClaudeSession). */
  private hostSession: string;
  private readonly closing = new AbortController();
  private readonly sendTurns = new Turns();

  private constructor(
    readonly options: AgentOptions,
    readonly mailbox: Mailbox,
    readonly outbox: Outbox,
    readonly relays: RelayClient[],
    private readonly inbound: Inbound,
    private readonly outbound: Outbound,
    readonly presence: Presence,
    readonly pairing: Pairing,
    /** The session each peer last wrote from (inbound keeps it current). */
    private readonly sticky: Map<string, string>,
    private readonly sendClock: SendClock,
    private readonly replayIndex: ReplayIndex,
  ) {
    this.route = formatRoute({ key: options.identity.key, session: options.session });
    this.hostSession = options.session;
  }

  static async start(options: AgentOptions): Promise<Agent> {
    const { identity, session, stateDir } = options;
    const mailbox = await Mailbox.open(mailboxPath(stateDir, identity.key, session));
    const outbox = await Outbox.open(outboxPath(stateDir, identity.key, session));
    const replay = await ReplayIndex.open(replayPath(stateDir, identity.key));
    const route = formatRoute({ key: identity.key, session });
    const relays = options.relayUrls.map((url) => new RelayClient({ url, key: identity.signingKey, routes: [route], ...(options.logOutages !== undefined && { logOutages: options.logOutages }) }));
    const presence = new Presence(identity.signingKey, session, relays, options.presence, options.announceIntervalMs);
    const pairing = new Pairing({
      identity,
      session,
      store: new PairingStore(pairingPath(stateDir, identity.key, session)),
      peersPath: options.peersPath,
      relays,
      roster: () => presence.roster({ fresh: true }),
      name: options.presence.name,
    });
    const sticky = new Map<string, string>();
    let agent: Agent | undefined;
    const inbound = new Inbound({
      me: identity,
      session,
      claim: (claim) => replay.claim(claim),
      mailbox,
      trust: () => agent!.trust(),
      outstanding: () => pairing.outstanding(),
      pairing: (envelope, admission) => pairing.handle(envelope, admission),
      sticky,
      onStored: (record) => {
        agent?.notifier?.kick();
        options.onStored?.(record);
      },
      rejected: (entry) => recordRejection(rejectedPath(stateDir, identity.key, session), entry),
    });
    const outbound = new Outbound(outbox, relays);
    agent = new Agent(options, mailbox, outbox, relays, inbound, outbound, presence, pairing, sticky, new SendClock(await outbox.lastTimestamp()), replay);
    // Read peers.json once now, so a damaged one is reported (and moved aside) at start, not at the first message.
    await agent.trust().catch((err: unknown) => log.warn('peers_unreadable', { error: (err as Error).message }));
    for (const relay of relays) {
      inbound.attach(relay);
      relay.start();
    }
    presence.start();
    outbound.start();
    pairing.start();
    return agent;
  }

  /** Starts waking the host through `sink` (the Claude inbox, a channel, or Codex). */
  startNotices(sink: NoticeSink): void {
    this.notifier = new Notifier({
      mailbox: this.mailbox,
      identity: this.identity.key,
      session: this.session,
      sink,
      senderName: async (key) => (key === this.identity.key ? 'self' : ((await this.peers()).petnameOf(key) ?? fingerprintOf(parsePublicKey(key)))),
    });
    this.notifier.start();
    // Pairing notices are not mail: they go to the host once, when the request arrives.
    this.pairing.notify = async (notice) => {
      await sink.deliver({ notification_id: notice.id, session: this.session, count: 0, senders: [], at: Date.now(), kind: 'pairing' }, notice.text);
    };
  }

  /** Waits until every delivery the relays pushed before answering a roster request has been handled. */
  async drain(): Promise<void> {
    await this.presence.roster({ fresh: true });
    await this.inbound.settled();
  }

  /** Where Claude's listener looks for this session's notices. */
  get claudeSession(): string {
    return this.hostSession;
  }

  /**
   * Called by the plugin's hooks with the session id Claude gives them. After /clear,
   * --resume or a fork that id changes while this server keeps its spawn-time id (and
   * its mailbox and route); notices follow the hooks' id. The current reservation is
   * reset so the notice it may have left in the old inbox is sent again to the new one.
   */
  async bindClaudeSession(sessionId: string): Promise<{ session_id: string; mailbox_session: string; changed: boolean }> {
    checkSafeName(sessionId, 'session id');
    const changed = sessionId !== this.hostSession;
    if (changed) {
      this.hostSession = sessionId;
      await this.mailbox.resetNotice();
      this.notifier?.kick();
    }
    return { session_id: sessionId, mailbox_session: this.session, changed };
  }

  /** Aborted when the session closes: work started for a tool call (a `codex queue` retry) stops with it. */
  get closingSignal(): AbortSignal {
    return this.closing.signal;
  }

  /** Codex notices that were not taken, saved for recovery (failed_deliveries). */
  failedDeliveries(): FailedDeliveries {
    return FailedDeliveries.forSession(this.options.stateDir, this.identity.key, this.session);
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
  async reach(timeoutMs: number): Promise<{ answered: string[]; unanswered: { url: string; error: string | undefined }[] }> {
    const results = await Promise.all(this.relays.map(async (r) => ({ relay: r, ready: await r.ready(timeoutMs, { failFast: true }) })));
    return {
      answered: results.filter((r) => r.ready).map((r) => r.relay.url),
      unanswered: results.filter((r) => !r.ready).map((r) => ({ url: r.relay.url, error: r.relay.unreachable })),
    };
  }

  /** peers.json, read again whenever it changed on disk, so removals apply at once. */
  async peers(): Promise<PeerTable> {
    return (await this.trust()).table;
  }

  /**
   * The peer table and whether it can be trusted to be complete. When peers.json was
   * found damaged (and moved aside), the table is empty until a person writes it again;
   * meanwhile a message from an unknown key may come from a peer whose entry was lost,
   * so inbound holds such messages on the relay instead of dropping them. "Damaged" is
   * read from the disk (an aside newer than peers.json), so every session of the
   * identity, and a restarted one, agrees.
   */
  async trust(): Promise<{ table: PeerTable; damaged: boolean }> {
    const path = this.options.peersPath;
    const stampOf = async () => {
      const [file, dir] = await Promise.all([stat(path).catch(() => undefined), stat(dirname(path)).catch(() => undefined)]);
      return `${file ? `${file.ino}:${file.size}:${file.mtimeMs}` : 'absent'}|${dir?.mtimeMs ?? 0}`;
    };
    if (this.peerCache?.stamp !== (await stampOf())) {
      const { table } = await loadPeers(path);
      // Loading may itself have moved a damaged file aside: stamp what is there now.
      this.peerCache = { stamp: await stampOf(), table, damaged: await peersDamaged(path) };
    }
    return { table: this.peerCache.table, damaged: this.peerCache.damaged };
  }

  private async resolvePeer(to: string): Promise<{ key: string; petname?: string }> {
    if (to === 'self') return { key: this.identity.key };
    const { table, damaged } = await this.trust();
    const key = table.keyOf(to);
    if (key === undefined && damaged) {
      throw new InterlinkError('unknown_peer', `no peer is called ${to} because peers.json was damaged and moved aside; a person must restore it (the server log says where the original is)`);
    }
    if (key === undefined) throw new InterlinkError('unknown_peer', `no peer is called ${to}`, undefined, { hint: { tool: 'see list_peers; a person adds peers', cli: 'see `interlink-mcp peers list`' } });
    return { key, petname: to };
  }

  /**
   * Signs and queues a message. Calls are signed in the order they began (`Turns`), with
   * a strictly increasing timestamp (`SendClock`): that is the order receivers read this
   * session's messages in.
   */
  async send(args: SendArgs): Promise<SendReceipt> {
    // A blank message wakes the receiver for nothing; refused here so every surface
    // (tool, CLI, a future caller) gets the same typed error.
    if (args.text.trim() === '') throw new InterlinkError('empty_text', 'the text is empty or only whitespace; a message must say something');
    // A session id no session can have would be refused by every relay, forever.
    const badSession = args.session === undefined ? undefined : unsafeNameReason(args.session);
    if (badSession !== undefined) throw new InterlinkError('invalid_session', `no session can be called that: ${badSession}`);
    const turn = this.sendTurns.take();
    let adding: Promise<AddResult>;
    let session: string;
    let idempotency: { key: string; intent: string } | undefined;
    try {
      if (Buffer.byteLength(args.text, 'utf8') > MAX_TEXT_BYTES) {
        throw new InterlinkError('too_large', `text is ${Buffer.byteLength(args.text, 'utf8')} bytes; the limit is ${MAX_TEXT_BYTES} bytes of UTF-8`);
      }
      const target = await this.resolvePeer(args.to);
      idempotency =
        args.idempotency_key === undefined
          ? undefined
          : { key: args.idempotency_key, intent: intentOf({ to: target.key, session: args.session, text: args.text, ...optional(args) }) };
      if (idempotency) {
        const existing = await this.outbox.byIdempotencyKey(idempotency.key);
        if (existing) return this.replay(existing, idempotency.intent, args.to);
      }
      session = await this.chooseSession(target.key, args.session);
      await turn.ready;
      const envelope = signEnvelope(this.identity.signingKey, {
        to: target.key,
        to_session: session,
        text: args.text,
        reply_to: this.route,
        ts: this.sendClock.next(),
        ...optional(args),
      });
      if (Buffer.byteLength(JSON.stringify(envelope), 'utf8') > MAX_PAYLOAD_BYTES) {
        throw new InterlinkError('too_large', `the signed message is larger than a relay accepts (${MAX_PAYLOAD_BYTES} bytes)`);
      }
      // Submitted within the turn, so the outbox holds messages in the order they were signed.
      adding = this.outbox.add(envelope, formatRoute({ key: target.key, session }), idempotency).catch((err: unknown) => {
        // A failed commit is cut back and never sent; one that could not be cut back may be.
        if (!isInterlinkError(err, 'storage_uncertain')) throw err;
        throw new InterlinkError('storage_uncertain', `${err.message}; message_status ${envelope.msg_id} tells whether it was kept`, { msg_id: envelope.msg_id });
      });
    } finally {
      turn.done();
    }
    const result = await adding;
    if (result.outcome !== 'added') return this.replay(result.record, idempotency?.intent, args.to);
    this.outbound.offer(result.record);
    return this.withRelays({ msg_id: result.record.envelope.msg_id, to: args.to, session, state: 'pending', duplicate: false });
  }

  private replay(record: OutboxRecord, intent: string | undefined, to: string): SendReceipt {
    if (record.intent !== intent) {
      throw new InterlinkError('idempotency_conflict', `idempotency key ${record.idempotency_key ?? ''} was used for a different message (${record.envelope.msg_id})`);
    }
    return this.withRelays({ msg_id: record.envelope.msg_id, to, session: parseRoute(record.route)?.session ?? '', state: outboundState(record), duplicate: true });
  }

  /** A receipt says whether anything can carry the message now, so `pending` is not a mystery. */
  private withRelays(receipt: Omit<SendReceipt, 'relays' | 'note'>): SendReceipt {
    const connected = this.relays.filter((r) => r.connected).length;
    const relays = { connected, configured: this.relays.length };
    return connected === 0 && receipt.state === 'pending' ? { ...receipt, relays, note: NO_RELAY_NOTE } : { ...receipt, relays };
  }

  private async chooseSession(key: string, hint: string | undefined): Promise<string> {
    const roster = await this.presence.roster();
    const sessions = roster.filter((r) => r.key === key && !(key === this.identity.key && r.session === this.session));
    const sticky = this.sticky.get(key);
    const decision = chooseSession({ sessions, ...(hint !== undefined && { hint }), ...(sticky !== undefined && { sticky }) });
    if (decision.ok) return decision.session;
    const list = decision.candidates.map((c) => `${c.session} (${c.state})`).join(', ');
    const reasons = {
      no_session: 'no agent session of that peer is on any relay roster; pass `session` to queue for a known session id',
      ambiguous: `several sessions could be meant: ${list}; pass \`session\``,
      pairing_session: `session ${PAIRING_SESSION} belongs to the \`interlink-mcp pair\` command and reads no mail; pass the session id of an agent`,
    };
    throw new InterlinkError('no_route', reasons[decision.reason], { candidates: decision.candidates });
  }

  async cancelTask(args: { to: string; task_id: string; reason?: string; session?: string }): Promise<SendReceipt> {
    return this.send({ to: args.to, text: args.reason?.trim() ? args.reason : 'canceled', task_id: args.task_id, status: 'canceled', ...(args.session !== undefined && { session: args.session }) });
  }

  async messageStatus(msgId: string): Promise<{ msg_id: string; direction: 'outbound' | 'inbound'; state: string; history: { state: string; at: number }[] }> {
    const outbound = await this.outbox.get(msgId);
    if (outbound) return { msg_id: msgId, direction: 'outbound', state: outboundState(outbound), history: outbound.states };
    const inbound = await this.mailbox.findByMsgId(msgId);
    if (inbound) return { msg_id: msgId, direction: 'inbound', state: currentState(inbound), history: inbound.states };
    throw new InterlinkError('unknown_message', `no message ${msgId} in this session's outbox or mailbox`);
  }

  /**
   * Drops a message no relay has accepted yet: it leaves the send loop, recorded as
   * `canceled`. A relay may still take an offer already on its way; the result says so.
   */
  async cancelPending(msgId: string): Promise<{ msg_id: string; state: OutboundState; offer_in_flight: boolean }> {
    const { ended, record } = await this.outbox.end(msgId, 'canceled', 'dropped by cancel_pending');
    if (record === undefined) throw new InterlinkError('unknown_message', `no message ${msgId} in this session's outbox`);
    if (!ended) throw new InterlinkError('not_pending', `message ${msgId} is ${outboundState(record)}, not pending; only a message no relay has accepted can be dropped`);
    return { msg_id: msgId, state: 'canceled', offer_in_flight: this.outbound.offering(msgId) };
  }

  async listPending(): Promise<{ msg_id: string; to: string; session: string; created_at: number; task_id?: string }[]> {
    const table = await this.peers();
    return (await this.outbox.pending()).map((r) => ({
      msg_id: r.envelope.msg_id,
      to: table.petnameOf(r.envelope.to) ?? (r.envelope.to === this.identity.key ? 'self' : r.envelope.to),
      session: parseRoute(r.route)?.session ?? '',
      created_at: r.created_at,
      ...(r.envelope.task_id !== undefined && { task_id: r.envelope.task_id }),
    }));
  }

  async receive(limit?: number, resetNotice = false): Promise<{ messages: InboxMessage[]; more: boolean }> {
    if (resetNotice) {
      await this.mailbox.resetNotice();
      this.notifier?.kick();
    }
    const { messages, more } = await this.mailbox.fetch(limit);
    return { messages: messages.map(inboxMessage), more };
  }

  async acknowledge(receipts: { sender: string; msg_id: string }[]) {
    const counts = await this.mailbox.acknowledge(receipts);
    // The reservation may have ended; anything that arrived meanwhile gets its notice now.
    this.notifier?.kick();
    return counts;
  }

  /** Both directions with one peer, oldest first; `consume` acknowledges exactly the inbound ones returned. */
  async history(peer: string, limit = 20, consume = false) {
    const { key } = await this.resolvePeer(peer);
    const inbound = await this.mailbox.history(key, { limit });
    const outbound = (await this.outbox.all()).filter((r) => r.envelope.to === key).slice(-limit);
    const merged = [
      ...inbound.map((r) => ({ direction: 'inbound' as const, envelope: r.envelope, state: currentState(r) })),
      ...outbound.map((r) => ({ direction: 'outbound' as const, envelope: r.envelope, state: outboundState(r) })),
    ]
      .sort((a, b) => a.envelope.ts - b.envelope.ts)
      .slice(-limit);
    if (consume) {
      const receipts = merged.filter((m) => m.direction === 'inbound' && m.state !== 'receiver_acknowledged').map((m) => ({ sender: m.envelope.from, msg_id: m.envelope.msg_id }));
      if (receipts.length > 0) await this.mailbox.acknowledge(receipts);
      for (const m of merged) if (m.direction === 'inbound') m.state = 'receiver_acknowledged';
    }
    return {
      messages: merged.map((m) => ({
        direction: m.direction,
        msg_id: m.envelope.msg_id,
        text: m.envelope.text,
        ts: m.envelope.ts,
        state: m.state,
        ...optional(m.envelope),
        ...(m.direction === 'inbound' && { receipt: receiptOf(m.envelope) }),
      })),
    };
  }

  async listPeers() {
    const table = await this.peers();
    return { peers: table.peers.map((p) => ({ petname: p.petname, key: p.key, fingerprint: fingerprintOf(parsePublicKey(p.key)) })) };
  }

  async addPeer(petname: string, key: string) {
    const result = await addPeer(this.options.peersPath, petname, key, this.identity.key);
    return { petname, key, outcome: result.outcome };
  }

  async removePeer(petname: string) {
    const result = await removePeer(this.options.peersPath, petname);
    return { petname, key: result.key, outcome: 'removed' as const };
  }

  async discover(peer?: string) {
    const roster = await this.presence.roster({ fresh: true });
    const table = await this.peers();
    const only = peer === undefined ? undefined : (await this.resolvePeer(peer)).key;
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
    await this.notifier?.stop();
    this.outbound.stop();
    this.pairing.stop();
    this.inbound.close();
    if (options.goodbye !== false) await this.presence.goodbye().catch(() => undefined);
    else this.presence.stop();
    for (const relay of this.relays) relay.close();
    await Promise.all([this.mailbox.close(), this.outbox.close(), this.replayIndex.close()]);
  }
}

function optional(fields: Pick<Envelope, 'task_id' | 'status' | 'in_reply_to'> | SendArgs) {
  return {
    ...(fields.task_id !== undefined && { task_id: fields.task_id }),
    ...(fields.status !== undefined && { status: fields.status }),
    ...(fields.in_reply_to !== undefined && { in_reply_to: fields.in_reply_to }),
  };
}


function inboxMessage(record: StoredRecord): InboxMessage {
  const e = record.envelope;
  return {
    sender: e.from,
    ...(record.peer !== undefined && { peer: record.peer }),
    msg_id: e.msg_id,
    text: e.text,
    ts: e.ts,
    ...optional(e),
    ...(e.reply_to !== undefined && { reply_to: e.reply_to }),
    receipt: receiptOf(e),
  };
}

/** True while a damaged peers.json moved aside is newer than the peers.json in place (if any). */
async function peersDamaged(path: string): Promise<boolean> {
  const prefix = `${basename(path)}.corrupt-`;
  const asides = (await readdir(dirname(path)).catch(() => [] as string[])).filter((name) => name.startsWith(prefix));
  if (asides.length === 0) return false;
  // A rename keeps the file's mtime but sets its ctime: the ctime says when it was moved aside.
  const movedAt = await Promise.all(asides.map(async (name) => (await stat(join(dirname(path), name)).catch(() => undefined))?.ctimeMs ?? 0));
  const current = await stat(path).catch(() => undefined);
  return current === undefined || current.mtimeMs < Math.max(...movedAt);
}
