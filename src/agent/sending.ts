/**
 * Sending from one session: sign in call order with a strictly increasing timestamp,
 * commit to the outbox, hand to the outbound loop; and what a sender may ask of its own
 * unsent messages (DESIGN.md "The agent: one session").
 */
import { unsafeNameReason } from '../config/paths.js';
import { MAX_TEXT_BYTES, signEnvelope, wireOf, type Status } from '../envelope/envelope.js';
import { formatRoute, parseRoute } from '../envelope/route.js';
import { InterlinkError, isInterlinkError } from '../errors.js';
import type { Identity } from '../identity/identity.js';
import type { SendClock } from '../outbox/clock.js';
import { intentOf, outboundState, type AddResult, type OutboundState, type Outbox, type OutboxRecord } from '../outbox/outbox.js';
import type { RelayClient } from '../relay/client.js';
import { MAX_PAYLOAD_BYTES } from '../relay/frames.js';
import { untrustedNote } from '../relay/reach.js';
import type { Outbound } from './outbound.js';
import type { PeerWatch } from './peer-watch.js';
import type { Presence } from './presence.js';
import { taskFields } from './reading.js';
import { chooseSession, PAIRING_SESSION } from './routing.js';
import { Turns } from './turns.js';

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
  /** The session each peer last wrote from (inbound keeps it current). */
  sticky: ReadonlyMap<string, string>;
  clock: SendClock;
  /** The benchmark's unsealed baseline: sign clear version 3 envelopes. */
  unsealed?: boolean;
}

export class Sender {
  private readonly turns = new Turns();

  constructor(private readonly parts: SenderParts) {}

  /**
   * Signs and queues a message. Calls are signed in the order they began (`Turns`), with
   * a strictly increasing timestamp (`SendClock`): that is the order receivers read this
   * session's messages in.
   */
  async send(args: SendArgs): Promise<SendReceipt> {
    const { identity, outbox } = this.parts;
    // A blank message wakes the receiver for nothing; refused here so every surface
    // (tool, CLI, a future caller) gets the same typed error.
    if (args.text.trim() === '') throw new InterlinkError('empty_text', 'the text is empty or only whitespace; a message must say something');
    // A session id no session can have would be refused by every relay, forever.
    const badSession = args.session === undefined ? undefined : unsafeNameReason(args.session);
    if (badSession !== undefined) throw new InterlinkError('invalid_session', `no session can be called that: ${badSession}`);
    const turn = this.turns.take();
    let adding: Promise<AddResult>;
    let session: string;
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
      session = await this.chooseSession(target.key, args.session);
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
    return this.withRelays({ msg_id: result.record.envelope.msg_id, to: args.to, session, state: 'pending', duplicate: false });
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

  private replay(record: OutboxRecord, intent: string | undefined, to: string): SendReceipt {
    if (record.intent !== intent) {
      throw new InterlinkError('idempotency_conflict', `idempotency key ${record.idempotency_key ?? ''} was used for a different message (${record.envelope.msg_id})`);
    }
    return this.withRelays({ msg_id: record.envelope.msg_id, to, session: parseRoute(record.route)?.session ?? '', state: outboundState(record), duplicate: true });
  }

  /** A receipt says whether anything can carry the message now, so `pending` is not a mystery. */
  private withRelays(receipt: Omit<SendReceipt, 'relays' | 'note'>): SendReceipt {
    const connected = this.parts.relays.filter((r) => r.connected).length;
    const relays = { connected, configured: this.parts.relays.length };
    return connected === 0 && receipt.state === 'pending' ? { ...receipt, relays, note: untrustedNote(this.parts.relays) ?? NO_RELAY_NOTE } : { ...receipt, relays };
  }

  private async chooseSession(key: string, hint: string | undefined): Promise<string> {
    const roster = await this.parts.presence.roster();
    const sessions = roster.filter((r) => r.key === key && !(key === this.parts.identity.key && r.session === this.parts.session));
    const sticky = this.parts.sticky.get(key);
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
}
