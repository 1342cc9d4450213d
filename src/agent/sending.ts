/**
 * Sending from one session: sign in call order with a strictly increasing timestamp,
 * commit to the outbox, hand to the outbound loop; and what a sender may ask of its own
 * unsent messages (DESIGN.md "The agent: one session").
 */
import { setTimeout as delay } from 'node:timers/promises';
import { unsafeNameReason } from '../config/paths.js';
import { MAX_TEXT_BYTES, newMsgId, wireOf, type Envelope, type Status } from '../envelope/envelope.js';
import { signEnvelope } from '../envelope/sign.js';
import { formatRoute, parseRoute } from '../envelope/route.js';
import { InterlinkError, isInterlinkError } from '../errors.js';
import type { Identity } from '../identity/identity.js';
import type { Mailbox } from '../mailbox/mailbox.js';
import type { SendClock } from '../outbox/clock.js';
import { intentOf, outboundState, type AddGroupResult, type AddResult, type OutboundState, type Outbox, type OutboxGroup, type OutboxRecord, type Unrouted } from '../outbox/outbox.js';
import type { RelayClient } from '../link/client.js';
import { MAX_PAYLOAD_BYTES } from '../wire/frames.js';
import { untrustedNote } from '../link/reach.js';
import type { Outbound } from './outbound.js';
import type { PeerWatch } from './peer-watch.js';
import type { Presence, RosterView } from './presence.js';
import { taskFields } from './reading.js';
import { awaitingNote } from './awaiting.js';
import { storedSightings } from './known-sessions.js';
import { awaitsRoster, chooseSession, PAIRING_SESSION, type RouteDecision } from './routing.js';
import { recipientNames } from './groups.js';
import { Turns, type Turn } from './turns.js';

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

/** One recipient of a message to several. */
export interface Recipient {
  petname: string;
  key: string;
  clear?: true;
}

/** What one recipient's copy of a group became at the send. */
export interface CopyReceipt {
  to: string;
  msg_id?: string;
  session?: string;
  state: OutboundState | 'not_sent';
  note?: string;
  /** Why no copy went to this recipient (`not_sent`). */
  error?: { code: string; message: string };
}

export interface GroupReceipt {
  group_id: string;
  /** The recipients as named: an audience's name, or the list. */
  to: string | string[];
  recipients: CopyReceipt[];
  duplicate: boolean;
  relays: { connected: number; configured: number };
  note?: string;
}

/** The body of a group's copies; `in_reply_to` may differ per recipient (a cancellation answers each copy). */
export interface GroupBody {
  text: string;
  task_id?: string;
  status?: Status;
  in_reply_to?: string;
  idempotency_key?: string;
}

const SESSION_WITH_GROUP = '`session` names a session of a single peer; a message to several goes to each one\'s usual session';

/** The arguments every send checks before it takes a turn: the session id in NFC, a text that says something, a session id that can exist. */
function checkedArgs<T extends { text: string; session?: string }>(input: T): T {
  // A session id that enters is kept in NFC, as every name (config/name-characters.ts).
  const args = input.session === undefined ? input : { ...input, session: input.session.normalize('NFC') };
  // A blank message wakes the receiver for nothing; refused here so every surface
  // (tool, CLI, a future caller) gets the same typed error.
  if (args.text.trim() === '') throw new InterlinkError('empty_text', 'the text is empty or only whitespace; a message must say something');
  // A session id no session can have would be refused by every relay, forever.
  const badSession = args.session === undefined ? undefined : unsafeNameReason(args.session);
  if (badSession !== undefined) throw new InterlinkError('invalid_session', `no session can be called that: ${badSession}`);
  return args;
}

const NO_RELAY_NOTE = 'no relay is connected: the message waits in the outbox and goes out when a relay answers (see list_pending)';

/**
 * How long after start a send waits for roster answers before routing without the peer
 * on a roster: the relays, and a peer that started at the same moment, answer and
 * announce within a second or two of starting.
 */
export const FIRST_ROSTER_WAIT_MS = 5_000;
const ROSTER_POLL_MS = 250;

/** The routing decision and what a receipt says about it. */
interface Routed {
  session: string;
  note?: string;
}

export interface SenderParts {
  identity: Identity;
  session: string;
  /** This session's route: the signed reply route of everything it sends. */
  route: string;
  outbox: Outbox;
  outbound: Outbound;
  relays: readonly RelayClient[];
  presence: Presence;
  peers: PeerWatch;
  /** This session's mailbox: what a session hint is checked against (known-sessions.ts). */
  mailbox: Mailbox;
  /** The session each peer last wrote from (inbound keeps it current; seeded at start from the stores, known-sessions.ts). */
  sticky: ReadonlyMap<string, string>;
  clock: SendClock;
  /** The benchmark's unsealed baseline: sign clear version 3 envelopes. */
  unsealed?: boolean;
}

export class Sender {
  private readonly turns = new Turns();
  /** Until FIRST_ROSTER_WAIT_MS after this, a send waits for the peer to show on a roster. */
  private readonly startedAt = Date.now();

  constructor(private readonly parts: SenderParts) {}

  /**
   * Signs and queues a message. Calls are signed in the order they began (`Turns`), with
   * a strictly increasing timestamp (`SendClock`): that is the order receivers read this
   * session's messages in.
   */
  async send(input: SendArgs): Promise<SendReceipt> {
    const args = checkedArgs(input);
    return this.single(this.turns.take(), args);
  }

  /**
   * send_message: to one peer or "self", or one copy each to several (a list of petnames,
   * or an audience a person defined). The turn is taken when the call begins, before
   * anything is awaited, so calls are signed in the order they came whatever `to` names.
   */
  async sendMessage(input: Omit<SendArgs, 'to'> & { to: string | readonly string[] }): Promise<SendReceipt | GroupReceipt> {
    const args = checkedArgs(input);
    const names = typeof args.to === 'string' ? undefined : recipientNames(args.to);
    if (names !== undefined && args.session !== undefined) throw new InterlinkError('bad_recipients', SESSION_WITH_GROUP);
    const turn = this.turns.take();
    let several: { label: string | string[]; recipients: Recipient[] } | undefined;
    try {
      several = names !== undefined ? { label: names, recipients: await this.resolveAll(names) } : await this.audience(args.to as string);
      if (several !== undefined && args.session !== undefined) throw new InterlinkError('bad_recipients', SESSION_WITH_GROUP);
    } catch (err) {
      turn.done();
      throw err;
    }
    const { to, session: _session, ...body } = args;
    if (several === undefined) return this.single(turn, { ...args, to: to as string });
    return this.group(turn, several.label, several.recipients, body);
  }

  /** Takes this session's next turn to sign (for a caller that must look something up first, in call order). */
  takeTurn(): Turn {
    return this.turns.take();
  }

  /**
   * The recipients `to` names when it names an audience (its members that are peers now);
   * undefined for "self" and a petname, and for a name that is neither (the single send
   * then refuses it as an unknown peer). A petname and an audience never share a name.
   */
  private async audience(to: string): Promise<{ label: string; recipients: Recipient[] } | undefined> {
    if (to === 'self' || (await this.parts.peers.peers()).keyOf(to) !== undefined) return undefined;
    const members = await this.parts.peers.audienceMembers(to);
    if (members === undefined) return undefined;
    if (members.length === 0) throw new InterlinkError('bad_recipients', `audience ${to} has no member that is still a peer; a person adds members with \`interlink-mcp audience add\``);
    return { label: to, recipients: await this.resolveAll(members) };
  }

  private async resolveAll(names: readonly string[]): Promise<Recipient[]> {
    const recipients: Recipient[] = [];
    for (const name of names) {
      const peer = await this.parts.peers.resolve(name);
      recipients.push({ petname: peer.petname ?? name, key: peer.key, ...(peer.clear === true && { clear: true as const }) });
    }
    return recipients;
  }

  /** One message in `turn` (which this ends). */
  private async single(turn: Turn, args: SendArgs): Promise<SendReceipt> {
    const { identity, outbox } = this.parts;
    let adding: Promise<AddResult>;
    let session: string;
    let routed: Routed;
    let idempotency: { key: string; intent: string } | undefined;
    try {
      if (Buffer.byteLength(args.text, 'utf8') > MAX_TEXT_BYTES) {
        throw new InterlinkError('too_large', `text is ${Buffer.byteLength(args.text, 'utf8')} bytes; the limit is ${MAX_TEXT_BYTES} bytes of UTF-8`);
      }
      const target = await this.parts.peers.resolve(args.to);
      idempotency =
        args.idempotency_key === undefined
          ? undefined
          : { key: args.idempotency_key, intent: intentOf({ to: target.key, session: args.session, text: args.text, ...taskFields(args) }) };
      if (idempotency) {
        const existing = await outbox.byIdempotencyKey(idempotency.key);
        if (existing) return this.replay(existing, idempotency.intent, args.to);
      }
      routed = await this.route(target.key, args.to, args.session);
      session = routed.session;
      await turn.ready;
      // Sealed to the recipient (version 4); a peer a person marked clear (the Rust
      // Interlink) gets the clear version 2 it reads, whose session is not signed.
      const envelope = signEnvelope(identity.signingKey, {
        to: target.key,
        ...(target.clear !== true && { to_session: session }),
        ...(this.parts.unsealed === true && { version: 3 as const }),
        text: args.text,
        reply_to: this.parts.route,
        ts: this.parts.clock.next(),
        ...taskFields(args),
      });
      if (Buffer.byteLength(JSON.stringify(wireOf(envelope)), 'utf8') > MAX_PAYLOAD_BYTES) {
        throw new InterlinkError('too_large', `the signed message is larger than a relay accepts (${MAX_PAYLOAD_BYTES} bytes)`);
      }
      // Submitted within the turn, so the outbox holds messages in the order they were signed.
      adding = outbox.add(envelope, formatRoute({ key: target.key, session }), idempotency).catch((err: unknown) => {
        // A failed commit is cut back and never sent; one that could not be cut back may be.
        if (!isInterlinkError(err, 'storage_uncertain')) throw err;
        throw new InterlinkError('storage_uncertain', `${err.message}; message_status ${envelope.msg_id} tells whether it was kept`, { msg_id: envelope.msg_id });
      });
    } finally {
      turn.done();
    }
    const result = await adding;
    if (result.outcome !== 'added') return this.replay(result.record, idempotency?.intent, args.to);
    this.parts.outbound.offer(result.record);
    return this.withRelays({ msg_id: result.record.envelope.msg_id, to: args.to, session, state: 'pending', duplicate: false }, routed.note);
  }

  /**
   * Signs one copy per recipient, sealed to each and routed as a single send would be,
   * sharing a fresh group id, and commits them together (all or none). A recipient none of
   * whose sessions can be named gets no copy and is reported `not_sent` with the reason;
   * the others go out. Signed in `turn` (which this ends), so each route keeps this
   * session's order.
   */
  async group(turn: Turn, label: string | string[], recipients: readonly Recipient[], body: GroupBody, options: { group?: string; replyTo?: ReadonlyMap<string, string> } = {}): Promise<GroupReceipt> {
    const { identity, outbox } = this.parts;
    const followUp = options.group !== undefined;
    let adding: Promise<AddGroupResult>;
    let idempotency: { key: string; intent: string } | undefined;
    const notes = new Map<string, string | undefined>();
    const signed = new Set<string>();
    let unroutedNow: Unrouted[] = [];
    try {
      if (body.text.trim() === '') throw new InterlinkError('empty_text', 'the text is empty or only whitespace; a message must say something');
      if (Buffer.byteLength(body.text, 'utf8') > MAX_TEXT_BYTES) {
        throw new InterlinkError('too_large', `text is ${Buffer.byteLength(body.text, 'utf8')} bytes; the limit is ${MAX_TEXT_BYTES} bytes of UTF-8`);
      }
      // The whole group is one intent: the same recipients, in the same order, and the same body.
      idempotency =
        body.idempotency_key === undefined
          ? undefined
          : { key: body.idempotency_key, intent: intentOf({ to: `group ${recipients.map((r) => r.key).join(' ')}`, session: undefined, text: body.text, ...taskFields(body) }) };
      if (idempotency) {
        const existing = await outbox.byIdempotencyKey(idempotency.key);
        if (existing) return this.replayGroup(existing, idempotency.intent, label);
      }
      const routed = await Promise.all(
        recipients.map(async (r) => {
          try {
            return { recipient: r, routed: await this.route(r.key, r.petname, undefined) };
          } catch (err) {
            if (!(err instanceof InterlinkError)) throw err;
            return { recipient: r, error: err };
          }
        }),
      );
      const unrouted: Unrouted[] = routed.flatMap((r) => (r.error === undefined ? [] : [{ to: r.recipient.key, code: r.error.code, reason: r.error.message }]));
      unroutedNow = unrouted;
      if (unrouted.length === recipients.length) {
        throw new InterlinkError('no_route', `no copy could be addressed: ${routed.map((r) => `${r.recipient.petname}: ${r.error?.message ?? ''}`).join('; ')}`);
      }
      await turn.ready;
      const group = options.group ?? newMsgId();
      const copies: { envelope: Envelope; route: string }[] = [];
      for (const { recipient, routed: route } of routed) {
        if (route === undefined) continue;
        notes.set(recipient.key, route.note);
        const inReplyTo = options.replyTo?.get(recipient.key) ?? body.in_reply_to;
        // A peer marked clear (the Rust Interlink) reads version 2, which has no group: its copy goes without.
        const envelope = signEnvelope(identity.signingKey, {
          to: recipient.key,
          ...(recipient.clear !== true && { to_session: route.session }),
          ...(this.parts.unsealed === true && { version: 3 as const }),
          ...(recipient.clear !== true && this.parts.unsealed !== true && { group }),
          text: body.text,
          reply_to: this.parts.route,
          ts: this.parts.clock.next(),
          ...taskFields({ ...body, in_reply_to: inReplyTo }),
        });
        if (Buffer.byteLength(JSON.stringify(wireOf(envelope)), 'utf8') > MAX_PAYLOAD_BYTES) {
          throw new InterlinkError('too_large', `the signed message is larger than a relay accepts (${MAX_PAYLOAD_BYTES} bytes)`);
        }
        copies.push({ envelope, route: formatRoute({ key: recipient.key, session: route.session }) });
        signed.add(envelope.msg_id);
      }
      adding = outbox.addGroup({ id: group, ...(followUp && { follow_up: true as const }), copies, unrouted }, idempotency).catch((err: unknown) => {
        if (!isInterlinkError(err, 'storage_uncertain')) throw err;
        throw new InterlinkError('storage_uncertain', `${err.message}; message_status with group_id ${group} tells whether it was kept`, { group_id: group });
      });
    } finally {
      turn.done();
    }
    const result = await adding;
    if (result.outcome === 'conflict') throw this.conflict(result.group.records[0]!);
    if (result.outcome === 'duplicate') return this.groupReceipt(result.group, label, true);
    const added = result.group.records.filter((r) => signed.has(r.envelope.msg_id));
    for (const record of added) this.parts.outbound.offer(record);
    return this.groupReceipt({ ...result.group, records: added, unrouted: unroutedNow }, label, false, notes);
  }

  cancelTask(args: { to: string; task_id: string; reason?: string; session?: string }): Promise<SendReceipt> {
    return this.send({ to: args.to, text: args.reason?.trim() ? args.reason : 'canceled', task_id: args.task_id, status: 'canceled', ...(args.session !== undefined && { session: args.session }) });
  }

  /**
   * Drops a message no relay has accepted yet: it leaves the send loop, recorded as
   * `canceled`. A relay may still take an offer already on its way; the result says so.
   */
  async cancelPending(msgId: string): Promise<{ msg_id: string; state: OutboundState; offer_in_flight: boolean }> {
    const { ended, record } = await this.parts.outbox.end(msgId, 'canceled', 'dropped by cancel_pending');
    if (record === undefined) throw new InterlinkError('unknown_message', `no message ${msgId} in this session's outbox`);
    if (!ended) throw new InterlinkError('not_pending', `message ${msgId} is ${outboundState(record)}, not pending; only a message no relay has accepted can be dropped`);
    return { msg_id: msgId, state: 'canceled', offer_in_flight: this.parts.outbound.offering(msgId) };
  }

  async listPending(): Promise<{ msg_id: string; to: string; session: string; created_at: number; task_id?: string }[]> {
    const table = await this.parts.peers.peers();
    return (await this.parts.outbox.pending()).map((r) => ({
      msg_id: r.envelope.msg_id,
      to: table.petnameOf(r.envelope.to) ?? (r.envelope.to === this.parts.identity.key ? 'self' : r.envelope.to),
      session: parseRoute(r.route)?.session ?? '',
      created_at: r.created_at,
      ...(r.envelope.task_id !== undefined && { task_id: r.envelope.task_id }),
    }));
  }

  private conflict(record: OutboxRecord): InterlinkError {
    const what = record.group === undefined ? `message (${record.envelope.msg_id})` : `message (group ${record.group.id})`;
    return new InterlinkError('idempotency_conflict', `idempotency key ${record.idempotency_key ?? ''} was used for a different ${what}`);
  }

  private async replayGroup(record: OutboxRecord, intent: string, label: string | string[]): Promise<GroupReceipt> {
    const group = record.group === undefined ? undefined : await this.parts.outbox.group(record.group.id);
    if (group === undefined || record.intent !== intent) throw this.conflict(record);
    return this.groupReceipt(group, label, true);
  }

  /**
   * The receipt of a group: each copy's state now, and each recipient no copy went to. A
   * replayed group shows its copies, not the follow-ups sent to it since.
   */
  private async groupReceipt(group: OutboxGroup, label: string | string[], duplicate: boolean, notes?: ReadonlyMap<string, string | undefined>): Promise<GroupReceipt> {
    const table = await this.parts.peers.peers();
    const name = (key: string) => table.petnameOf(key) ?? key;
    const records = duplicate ? group.records.filter((r) => r.group?.follow_up !== true) : group.records;
    const recipients: CopyReceipt[] = [
      ...records.map((r) => {
        const note = notes?.get(r.envelope.to);
        return { to: name(r.envelope.to), msg_id: r.envelope.msg_id, session: parseRoute(r.route)?.session ?? '', state: outboundState(r), ...(note !== undefined && { note }) };
      }),
      ...group.unrouted.map((u) => ({ to: name(u.to), state: 'not_sent' as const, error: { code: u.code, message: u.reason } })),
    ];
    return { group_id: group.id, to: label, recipients, duplicate, ...this.relaysNow(recipients.some((r) => r.state === 'pending')) };
  }

  private replay(record: OutboxRecord, intent: string | undefined, to: string): SendReceipt {
    if (record.intent !== intent) throw this.conflict(record);
    return this.withRelays({ msg_id: record.envelope.msg_id, to, session: parseRoute(record.route)?.session ?? '', state: outboundState(record), duplicate: true });
  }

  /** A receipt says whether anything can carry the message now, so `pending` is not a mystery. */
  private withRelays(receipt: Omit<SendReceipt, 'relays' | 'note'>, routeNote?: string): SendReceipt {
    return { ...receipt, ...this.relaysNow(receipt.state === 'pending', routeNote) };
  }

  /** How many relays are connected now, and the note that says where a pending message waits when none is. */
  private relaysNow(pending: boolean, routeNote?: string): { relays: SendReceipt['relays']; note?: string } {
    const connected = this.parts.relays.filter((r) => r.connected).length;
    const relays = { connected, configured: this.parts.relays.length };
    const notes = [routeNote, connected === 0 && pending ? (untrustedNote(this.parts.relays) ?? NO_RELAY_NOTE) : undefined].filter((n) => n !== undefined);
    return notes.length > 0 ? { relays, note: notes.join('; ') } : { relays };
  }

  /** The target session, after waiting (in the first seconds only) for the rosters to say where the peer is. */
  private async route(key: string, to: string, hint: string | undefined): Promise<Routed> {
    const { decision, view } = await this.decide(key, hint);
    if (decision.ok) return { session: decision.session, ...(await this.routeNote(decision, view, key, to)) };
    const list = decision.candidates.map((c) => `${c.session} (${c.state})`).join(', ');
    const reasons = {
      no_session: 'no agent session of that peer is on any relay roster; pass `session` to queue for a known session id',
      no_relay: `no relay answers (${this.unanswered()}), and no session of that peer is known from this session's messages; pass \`session\` to queue for a known session id, or send again when a relay answers`,
      ambiguous: `several sessions could be meant: ${list}; pass \`session\``,
      pairing_session: `session ${PAIRING_SESSION} belongs to the \`interlink-mcp pair\` command and reads no mail; pass the session id of an agent`,
    };
    throw new InterlinkError('no_route', reasons[decision.reason], { candidates: decision.candidates });
  }

  /**
   * The routing rule over the roster as the relays answer it. Until FIRST_ROSTER_WAIT_MS
   * after start, while a relay may still answer, a decision `awaitsRoster` calls early
   * (no roster answer yet, or none of the peer's sessions on it) is made again as answers
   * come.
   */
  private async decide(key: string, hint: string | undefined): Promise<{ decision: RouteDecision; view: RosterView }> {
    const { presence, identity } = this.parts;
    const deadline = this.startedAt + FIRST_ROSTER_WAIT_MS;
    for (let fresh = false; ; fresh = true) {
      const view = await presence.rosterView({ fresh });
      const sessions = view.entries.filter((r) => r.key === key && !(key === identity.key && r.session === this.parts.session));
      const sticky = this.parts.sticky.get(key);
      const decision = chooseSession({ sessions, answered: view.answered > 0, ...(hint !== undefined && { hint }), ...(sticky !== undefined && { sticky }) });
      const left = deadline - Date.now();
      if (!awaitsRoster(decision, view.answered > 0) || left <= 0 || !presence.reaching()) return { decision, view };
      await delay(Math.min(ROSTER_POLL_MS, left));
    }
  }

  /** What the receipt says about a route the rosters did not confirm. */
  private async routeNote(decision: RouteDecision & { ok: true }, view: RosterView, key: string, to: string): Promise<{ note?: string }> {
    const { session, reason } = decision;
    if (reason === 'sticky_unanswered') {
      return { note: `no relay answers (${this.unanswered()}): the message goes to session ${session}, the one ${to} last used with this session, when a relay answers` };
    }
    if (reason === 'sticky_gone') return { note: `${to} was last met at session ${session}: ${awaitingNote(session)}` };
    if (reason !== 'offline_exact') return {};
    const answered = view.answered > 0;
    if (await this.knownSession(key, session)) return answered ? { note: awaitingNote(session) } : {};
    const rosters = answered ? 'it is on no relay roster' : 'no relay answers to say whether it is on a roster';
    return { note: `session ${session} of ${to} was never seen: ${rosters}, and none of this session's messages came from or went to it; the relay keeps the message for that exact id until a session of that id, or one taking its mail, reads it (check the id)` };
  }

  /** Whether this session has met the peer's session: on a roster since start, or in its mailbox or outbox. */
  private async knownSession(key: string, session: string): Promise<boolean> {
    const route = formatRoute({ key, session });
    if (this.parts.sticky.get(key) === session || this.parts.presence.lastSeen(route) !== undefined) return true;
    return (await storedSightings(this.parts.mailbox, this.parts.outbox)).some((s) => s.key === key && s.session === session);
  }

  /** Why the relays do not answer, for a refusal's sentence. */
  private unanswered(): string {
    return this.parts.relays.map((r) => `${r.url}: ${r.unreachable ?? r.untrusted ?? 'no roster answer'}`).join('; ');
  }
}
