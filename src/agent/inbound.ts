/**
 * Relay delivery → trust gate → replay claim → mailbox commit → relay acknowledgement.
 *
 * A message is acknowledged to the relay only after the mailbox commit returned, so a
 * crash in between leaves it on the relay, which delivers it again (the mailbox refuses
 * the duplicate). Before the commit a version 2 message is claimed in the identity's
 * replay index (replay/claims.ts): a copy that another session of this identity already
 * admitted is a replay, whatever route it came by (a version 3 message is signed for its
 * session, and the gate refuses it anywhere else). Deliveries from one relay reach the
 * mailbox in the order the relay sent them.
 *
 * Messages the gate rejects are acknowledged too — dropped, with the verdict logged and
 * recorded (rejected.ts) — so garbage is not redelivered forever; a message up to 10
 * minutes ahead of this clock is held instead, and judged again when due. A message the
 * mailbox cannot take (full, damaged, unwritable disk) is not acknowledged and is retried
 * with backoff, and so is a message from an unknown key while peers.json is damaged (it
 * may come from a peer whose entry was lost).
 */
import { parseEnvelope, replyToSession, versionOf, type Envelope, type WireEnvelope } from '../envelope/envelope.js';
import { openEnvelope } from '../envelope/open.js';
import { receiptKey, receiptOf } from '../envelope/receipt.js';
import { decide, type OutstandingRequest, type RejectCode, type Verdict } from '../gate/decide.js';
import type { Identity } from '../identity/identity.js';
import { log } from '../log.js';
import { describeRefusal, type Mailbox } from '../mailbox/mailbox.js';
import type { StoredRecord } from '../mailbox/format.js';
import type { PeerTable } from '../peers/peers.js';
import type { Delivery, RelayClient } from '../link/client.js';
import type { Claim } from '../replay/claims.js';
import type { ClaimOutcome } from '../replay/rules.js';
import type { Rejection } from './rejected.js';
import { type Turn, Turns } from './turns.js';
import { messageOf } from '../errors.js';
import { crashPoint } from '../store/crash-point.js';
import { BEHIND_MS, SenderHolds } from './sender-holds.js';
import { MIN_DEFER_MS } from '../wire/frames.js';
import type { Bound } from '../mailbox/rules.js';

const SEEN_LIMIT = 4096;
/** The mailbox bounds that refuse one sender only (the others' mail is still admitted). */
const SHARE_BOUNDS: ReadonlySet<Bound> = new Set(['sender_records', 'sender_bytes']);
const RECORDS_PER_SECOND = 10;

/** At most `limit` takes in any one-second window (fixed windows: simple, and enough here). */
class PerSecond {
  private windowStart = 0;
  private used = 0;
  constructor(private readonly limit: number) {}
  take(now: number): boolean {
    if (now - this.windowStart >= 1_000) {
      this.windowStart = now;
      this.used = 0;
    }
    if (this.used >= this.limit) return false;
    this.used++;
    return true;
  }
}
const MAX_RETRY_MS = 30_000;
/**
 * A message held while peers.json is damaged is judged again at least this often: the
 * hold ends when a person restores the file, and the mail should follow within seconds,
 * not after a backoff grown during the outage. Each look costs one stat of peers.json.
 */
const HELD_RETRY_MS = 2_000;

/** Thrown by `judge` for a message that may come from a peer whose entry was lost. */
class HeldForDamagedPeers extends Error {}

export interface InboundDeps {
  me: Identity;
  /** This session: what a version 3 envelope must be signed for, and what claims are made for. */
  session: string;
  /** Claims a message in the per-identity replay index (durable before it resolves). */
  claim: (claim: Claim) => Promise<ClaimOutcome>;
  mailbox: Mailbox;
  trust: () => Promise<{ table: PeerTable; damaged: boolean }>;
  /** Pairing requests this session has open (which pair_accept the gate may admit). */
  outstanding: () => Promise<OutstandingRequest[]>;
  /** Takes an admitted pairing message; throws if it could not be stored (not acknowledged then). */
  pairing: (envelope: Envelope, admission: 'pair_request' | 'pair_accept') => Promise<void>;
  /** The sender's session from its last admitted message: where replies go by default. */
  sticky: Map<string, string>;
  onStored?: (record: StoredRecord) => void;
  /** Applies an admitted receipt to the outbox; throws if it could not be stored (not acknowledged then). */
  receipt?: (envelope: Envelope) => Promise<void>;
  /** The benchmark's unsealed baseline (INTERLINK_BENCH_UNSEALED): clear envelopes from every peer and this identity are admitted. */
  admitClear?: boolean;
  /** Tells senders what became of their messages (agent/receipts.ts). */
  reports?: { stored: (envelope: Envelope) => void; refused: (wire: WireEnvelope, code: RejectCode) => Promise<void> };
  /** Records what the gate refused (rejected.ts); throws if it could not (not acknowledged then). */
  rejected?: (entry: Rejection) => Promise<void>;
}

export class Inbound {
  /** Admitted in this process; the mailbox remembers the rest across restarts. */
  private readonly seen = new Set<string>();
  private readonly retries = new Map<string, NodeJS.Timeout>();
  private readonly handling = new Set<Promise<void>>();
  private readonly recordBudget = new PerSecond(RECORDS_PER_SECOND);
  /** Senders whose share is full: their mail is deferred on the relays, in their order (sender-holds.ts). */
  private readonly holds = new SenderHolds<{ relay: RelayClient; delivery: Delivery }>();
  private closed = false;

  constructor(private readonly deps: InboundDeps) {}

  /**
   * Takes the relay's deliveries to `route` (one connection may read several: this
   * session's and those of ended sessions it took, agent/succession.ts). Returns the
   * detach.
   */
  attach(relay: RelayClient, route: string): () => void {
    const turns = new Turns();
    const listener = (delivery: Delivery) => {
      if (delivery.route === route) this.track(relay, delivery, 0, turns);
    };
    relay.on('delivery', listener);
    return () => relay.off('delivery', listener);
  }

  /**
   * Deliveries are judged concurrently but reach the mailbox in the order the relay sent
   * them (a turn taken on arrival), so arrival order there follows the relay's order and
   * concurrent arrivals still share one commit.
   */
  private track(relay: RelayClient, delivery: Delivery, attempt: number, turns: Turns): void {
    const handled = this.handle(relay, delivery, attempt, turns, turns.take()).finally(() => this.handling.delete(handled));
    this.handling.add(handled);
  }

  /** Resolves when every delivery received so far has been handled (stored, or dropped). */
  async settled(): Promise<void> {
    while (this.handling.size > 0) await Promise.all([...this.handling]);
  }

  close(): void {
    this.closed = true;
    for (const timer of this.retries.values()) clearTimeout(timer);
    this.retries.clear();
  }

  private async handle(relay: RelayClient, delivery: Delivery, attempt: number, turns: Turns, turn: Turn): Promise<void> {
    try {
      await this.handleInTurn(relay, delivery, attempt, turns, turn);
    } finally {
      turn.done();
    }
  }

  private async handleInTurn(relay: RelayClient, delivery: Delivery, attempt: number, turns: Turns, turn: Turn): Promise<void> {
    if (this.closed) return;
    let wire: WireEnvelope;
    try {
      wire = parseEnvelope(delivery.payload);
    } catch (err) {
      log.warn('inbound_rejected', { relay: relay.url, code: 'bad_envelope', reason: messageOf(err) });
      relay.ack(delivery.route, [delivery.id]);
      return;
    }
    try {
      const verdict = await this.judge(wire);
      if (!verdict.ok && verdict.due !== undefined) {
        // A little ahead of this clock: not refused, not acknowledged; judged again when due.
        log.info('inbound_held', { relay: relay.url, from: wire.from, msg_id: wire.msg_id, due: verdict.due });
        this.again(relay, delivery, attempt, turns, Math.max(0, verdict.due - Date.now()));
        return;
      }
      if (!verdict.ok) {
        // A redelivery to this same session is routine (a reconnect, a second relay): quiet.
        if (verdict.code !== 'replay') {
          await this.refused(relay, wire, verdict.code, verdict.reason);
          // Owed durably before the relay forgets the message; a failure retries the delivery.
          await this.deps.reports?.refused(wire, verdict.code);
        }
        this.askAgain(this.holds.settled(wire.from, wire.msg_id));
        relay.ack(delivery.route, [delivery.id]);
        return;
      }
      const envelope = verdict.envelope;
      if (verdict.admission === 'receipt') {
        // A report on my own messages: applied to the outbox (durably) before the relay
        // forgets it; never mail, never a notice, never receipted.
        turn.done();
        await this.deps.receipt?.(envelope);
        crashPoint('inbound.receipt.after_commit');
        relay.ack(delivery.route, [delivery.id]);
        return;
      }
      if (await this.admittedElsewhere(relay, envelope)) {
        relay.ack(delivery.route, [delivery.id]);
        return;
      }
      if (verdict.admission === 'pair_request' || verdict.admission === 'pair_accept') {
        // Pairing has its own store and notices; committed there before the relay forgets it.
        // Not mailbox mail, so later deliveries need not wait for it.
        turn.done();
        await this.deps.pairing(envelope, verdict.admission);
        relay.ack(delivery.route, [delivery.id]);
        return;
      }
      crashPoint('inbound.after_gate');
      await turn.ready;
      // An earlier message of this sender is held (its share is full): this one waits behind it.
      if (relay.defers && this.holds.behind(envelope.from, envelope.msg_id, envelope.ts, Date.now(), { relay, delivery })) {
        relay.defer(delivery.route, [delivery.id], BEHIND_MS);
        return;
      }
      const storing = this.deps.mailbox.store(envelope, verdict.petname !== undefined ? { peer: verdict.petname } : {});
      // While its sender has mail held, the next delivery waits for this one's outcome: admitted, the rest are tried in order.
      if (this.holds.held(envelope.from) === 0) turn.done();
      const stored = await storing;
      if (stored.outcome === 'full' && SHARE_BOUNDS.has(stored.reason) && relay.defers) {
        // Its sender holds its share: the relay keeps it back, and other senders' mail flows past it.
        relay.defer(delivery.route, [delivery.id], this.holds.refused(envelope.from, envelope.msg_id, envelope.ts, Date.now(), { relay, delivery }));
        return;
      }
      if (stored.outcome === 'full') throw new Error(describeRefusal(stored));
      this.askAgain(this.holds.settled(envelope.from, envelope.msg_id));
      this.remember(envelope);
      relay.ack(delivery.route, [delivery.id]);
      crashPoint('inbound.after_ack');
      if (stored.outcome === 'stored') {
        this.deps.onStored?.(stored.record);
        this.deps.reports?.stored(envelope);
      }
    } catch (err) {
      this.retryLater(relay, delivery, attempt, turns, err);
    }
  }

  /**
   * Whether another session of this identity admitted this message (a replay, refused and
   * recorded here). A version 3 envelope is signed for one session, which the gate has
   * checked: no other session can admit it, so it takes no claim — and no commit to the
   * shared index on every arrival. A version 2 envelope names no session, so the
   * identity's replay index decides; the claim is durable before the mailbox commit.
   */
  private async admittedElsewhere(relay: RelayClient, envelope: Envelope): Promise<boolean> {
    if (versionOf(envelope) !== 2) return false;
    const claimed = await this.deps.claim({ from: envelope.from, msg_id: envelope.msg_id, ts: envelope.ts, session: this.deps.session });
    if (claimed.outcome === 'full') throw new Error('the replay index is full of messages still inside the freshness window');
    if (claimed.outcome !== 'taken') return false;
    await this.refused(relay, envelope, 'replay', `already admitted by session ${JSON.stringify(claimed.session)} of this identity`);
    return true;
  }

  /**
   * Logs a refusal and records it before the relay may forget the message: no refusal is
   * silent (rejected.ts). Not a bad signature (its sender is unproven), and at most
   * RECORDS_PER_SECOND, so a flood of refusals costs the disk a bounded rate; the log still
   * names every one.
   */
  private async refused(relay: RelayClient, envelope: WireEnvelope, code: RejectCode, reason: string): Promise<void> {
    log.warn('inbound_rejected', { relay: relay.url, code, reason, from: envelope.from, msg_id: envelope.msg_id });
    if (code !== 'bad_signature' && this.recordBudget.take(Date.now())) {
      await this.deps.rejected?.({ from: envelope.from, msg_id: envelope.msg_id, code, reason, at: Date.now(), ts: envelope.ts });
    }
  }

  private async judge(envelope: WireEnvelope): Promise<Verdict> {
    const { table, damaged } = await this.deps.trust();
    const key = receiptKey(receiptOf(envelope));
    const inMailbox = this.seen.has(key) || (await this.deps.mailbox.has(envelope.from, envelope.msg_id));
    const signingKey = this.deps.me.signingKey;
    const verdict = decide(envelope, {
      me: this.deps.me.key,
      session: this.deps.session,
      peers: new Map(table.peers.map((p) => [p.key, p.petname])),
      clear: this.deps.admitClear === true ? { has: (key) => key === this.deps.me.key || table.has(key) } : table.clear,
      open: (sealed) => openEnvelope(signingKey, sealed),
      outstandingRequests: envelope.kind === 'pair_accept' ? await this.deps.outstanding() : [],
      now: Date.now(),
      seen: () => inMailbox,
    });
    // A clear message from a key not marked clear may be from a peer marked so whose entry was lost.
    if (!verdict.ok && (verdict.code === 'not_allowlisted' || verdict.code === 'unsealed') && damaged) {
      throw new HeldForDamagedPeers('peers.json was damaged and moved aside; holding messages from unknown keys until a person restores it');
    }
    return verdict;
  }

  private remember(envelope: Envelope): void {
    this.seen.add(receiptKey(receiptOf(envelope)));
    if (this.seen.size > SEEN_LIMIT) this.seen.delete(this.seen.values().next().value!);
    const session = replyToSession(envelope);
    if (session !== undefined) this.deps.sticky.set(envelope.from, session);
  }

  /** A sender's earliest held message was admitted: the rest of its held mail is asked for now, each from its relay. */
  private askAgain(held: readonly { relay: RelayClient; delivery: Delivery }[]): void {
    const byRoute = new Map<RelayClient, Map<string, number[]>>();
    for (const { relay, delivery } of held) {
      const routes = byRoute.get(relay) ?? new Map<string, number[]>();
      routes.set(delivery.route, [...(routes.get(delivery.route) ?? []), delivery.id]);
      byRoute.set(relay, routes);
    }
    for (const [relay, routes] of byRoute) {
      for (const [route, ids] of routes) for (let i = 0; i < ids.length; i += 1_024) relay.defer(route, ids.slice(i, i + 1_024), MIN_DEFER_MS);
    }
  }

  private retryLater(relay: RelayClient, delivery: Delivery, attempt: number, turns: Turns, err: unknown): void {
    const delay = Math.min(err instanceof HeldForDamagedPeers ? HELD_RETRY_MS : MAX_RETRY_MS, 250 * 2 ** attempt);
    log.warn('inbound_storage_failed', { relay: relay.url, route: delivery.route, id: delivery.id, retry_ms: delay, error: messageOf(err) });
    this.again(relay, delivery, attempt + 1, turns, delay);
  }

  /** Handles the delivery again after `delay`, on the same connection (a new one redelivers anyway). */
  private again(relay: RelayClient, delivery: Delivery, attempt: number, turns: Turns, delay: number): void {
    const key = `${delivery.relay} ${delivery.route} ${delivery.id}`;
    clearTimeout(this.retries.get(key));
    const timer = setTimeout(() => {
      this.retries.delete(key);
      // After a reconnect the relay redelivers on its own; retry only while the connection
      // reads (an address of a relay listed at several may have handed reading on).
      if (relay.connected && relay.reads) this.track(relay, delivery, attempt, turns);
    }, delay);
    timer.unref();
    this.retries.set(key, timer);
  }
}
