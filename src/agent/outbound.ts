/**
 * Drains the outbox: each route's pending messages are offered in the order they were
 * sent, by the order rule (agent/route-order.ts): the oldest pending message of a route
 * goes to every connected relay that holds the route's earlier messages, until one
 * accepts it; then it is `bus_accepted`. Up to PIPELINE_WINDOW follow it on one
 * connection while the route's offers are accepted; after a refusal or a timeout, the
 * next only once the one before was accepted. Routes are offered side by side. A relay reached at several addresses (URLs that
 * pin one key, link/relay-groups.ts) is one relay here: the message is offered to one
 * connected address of it, the one the recipient's session reads through when it can
 * (`sendingMember`), and once one of them accepted it, it is not offered to the others.
 * Runs on every new message, on every acceptance, on every relay (re)connection, once a
 * second while messages are pending, and every 30 s otherwise. A message that every
 * configured relay refuses for a reason that cannot change (too large, a malformed
 * route) leaves the loop as `delivery_failed` with the relays' reason, instead of being
 * offered forever. Refusals are logged once per episode and summarized (refusal-log.ts).
 */
import { wireOf, type Envelope, type WireEnvelope } from '../envelope/envelope.js';
import { log } from '../log.js';
import type { Outbox, OutboxRecord } from '../outbox/outbox.js';
import type { RelayClient } from '../link/client.js';
import type { SendOutcome } from '../link/sends.js';
import { SingleFlight } from '../single-flight.js';
import { messageOf, type RefusalCode } from '../errors.js';
import { crashPoint } from '../store/crash-point.js';
import { sendingMember } from '../link/relay-groups.js';
import { RefusalLog } from './refusal-log.js';
import { offersNow, type RouteMessage } from './route-order.js';

/** While a message waits for a relay to accept it, it is offered again this often. */
const RETRY_MS = 1_000;
/** With nothing pending, a pass every so often still finds what another process left behind. */
const IDLE_PASS_MS = 30_000;
/**
 * With several relays, how long a message accepted by some of them orders the route's
 * later ones (route-order.ts) while the receiver has not reported it: a receiver that
 * has not read for that long finds both in its mailbox, which orders them by `ts`.
 */
const ORDER_BARRIER_MS = 10 * 60_000;
/**
 * How many of a route's messages may be on offer at once while its offers are accepted
 * (route-order.ts); after a refusal or a timeout, one, until the route's backlog is
 * accepted.
 */
const PIPELINE_WINDOW = 16;
/** Refusals that the same bytes will meet again at that relay, however often they are offered. */
const PERMANENT_REFUSALS: ReadonlySet<string> = new Set<RefusalCode>(['too_large', 'bad_frame']);

/** Whether every relay has refused the message for good (pure); a relay is named by RelayClient.relay. */
export function refusedEverywhere(refusedBy: ReadonlySet<string>, relays: readonly string[]): boolean {
  return relays.length > 0 && relays.every((url) => refusedBy.has(url));
}

export class Outbound {
  /** Offers awaiting their answer, as `<relay> <msg_id>` (RelayClient.relay). */
  private readonly inFlight = new Set<string>();
  /**
   * Acceptances not yet in the outbox (its record is committed lazily), msg_id → relays:
   * the order rule offers the route's next message at once instead of after that commit.
   */
  private readonly acceptedHere = new Map<string, Set<string>>();
  /**
   * Each route's messages as the order rule reads them (send order): the last pass's view
   * of the outbox, plus the messages sent since. An acceptance offers the route's next
   * message from here at once: a route waits one relay round trip per message, not a
   * read of the outbox behind its commits as well. Each pass replaces it, so a message
   * dropped by another process is offered at most until the next pass.
   */
  private routes = new Map<string, OutboxRecord[]>();
  /**
   * Routes with a message refused or unanswered since their backlog was last accepted:
   * offered one message at a time (route-order.ts).
   */
  private readonly troubled = new Set<string>();
  /** Messages sent while a pass read the outbox: its view may predate them. */
  private sentDuringPass: OutboxRecord[] | undefined;
  /** msg_id → relays (RelayClient.relay) that refused it for good, with the last reason; memory only (a restart offers it again). */
  private readonly refused = new Map<string, { relays: Set<string>; reason: string }>();
  private readonly refusals = new RefusalLog();
  /** Each configured URL's relay (RelayClient.relay): the outbox names the URL that accepted. */
  private readonly relayOfUrl: Map<string, string>;
  /**
   * A pass RETRY_MS after an offer that was not taken. A send offers its message itself,
   * outside the loop, and the loop may be idle for IDLE_PASS_MS: without this, a message
   * a relay refused for now (its disk failing, a full queue) or did not answer in time
   * would wait that long for its next offer.
   */
  private retryTimer: NodeJS.Timeout | undefined;
  private readonly loop = new SingleFlight(
    () => this.pass(),
    (err) => log.warn('outbound_pass_failed', { error: messageOf(err) }),
  );

  /**
   * `groups`: the session's relays, each the addresses of one relay (RelayGroups.groups; a
   * relay at one address is a group of one; `sendingMember` orders them for each message).
   * `wire`: what a relay is offered for a stored envelope (envelope/sign.ts `offerable`).
   */
  constructor(
    private readonly outbox: Outbox,
    private readonly groups: readonly (readonly RelayClient[])[],
    private readonly wire: (envelope: Envelope) => WireEnvelope = wireOf,
  ) {
    this.relayOfUrl = new Map(groups.flat().map((member) => [member.url, member.relay]));
    outbox.onEnded((msgId) => this.forget(msgId));
  }

  start(): void {
    for (const relay of this.groups.flat()) relay.on('connected', this.onConnected);
    this.loop.start(IDLE_PASS_MS);
  }

  /** No pass starts after this; resolves when the one under way is done. */
  stop(): Promise<void> {
    clearTimeout(this.retryTimer);
    // An ended session's outbound loop stops while the relays run on (agent/succession.ts).
    for (const relay of this.groups.flat()) relay.off('connected', this.onConnected);
    return this.loop.stop();
  }

  private readonly onConnected = (): void => void this.kick();

  /** Whether an offer of this message to some relay is on its way now. */
  offering(msgId: string): boolean {
    return [...this.inFlight].some((key) => key.endsWith(` ${msgId}`));
  }

  /**
   * A message was just added: its route's messages are offered as the order rule allows,
   * now rather than at the next pass (the message itself waits behind older ones).
   */
  offer(record: OutboxRecord): void {
    this.sentDuringPass?.push(record);
    this.remember(record);
    this.offerRoute(record.route);
  }

  /** A message this process ended (dropped, or failed everywhere): never offered again from memory. */
  private forget(msgId: string): void {
    for (const [route, records] of this.routes) this.routes.set(route, records.filter((r) => r.envelope.msg_id !== msgId));
  }

  /** Offers every pending message soon; resolves when the pass that does it has offered them. */
  kick(): Promise<void> {
    return this.loop.kick();
  }

  private async pass(): Promise<number | undefined> {
    // With one relay, every accepted message is in its queue: only pending ones matter.
    const since = this.groups.length > 1 ? Date.now() - ORDER_BARRIER_MS : Number.POSITIVE_INFINITY;
    const sent: OutboxRecord[] = [];
    this.sentDuringPass = sent;
    const records = await this.outbox.unsettled(since).finally(() => (this.sentDuringPass = undefined));
    this.routes = new Map();
    for (const record of [...records, ...sent]) this.remember(record);
    this.forgetCommitted(records);
    for (const route of this.routes.keys()) this.offerRoute(route);
    return records.some((r) => this.routeMessage(r).acceptedBy.length === 0) ? RETRY_MS : undefined;
  }

  /** Adds a message to its route's view, in send order, once. */
  private remember(record: OutboxRecord): void {
    const records = this.routes.get(record.route) ?? [];
    if (records.some((r) => r.envelope.msg_id === record.envelope.msg_id)) return;
    let at = records.length;
    while (at > 0 && records[at - 1]!.envelope.ts > record.envelope.ts) at--;
    records.splice(at, 0, record);
    this.routes.set(record.route, records);
  }

  /** Offers what the order rule allows of one route now. */
  private offerRoute(route: string): void {
    let records = this.routes.get(route);
    if (records === undefined) return;
    // With one relay, an accepted message orders nothing (it is in that relay's queue).
    if (this.groups.length === 1) {
      const head = records.findIndex((r) => this.routeMessage(r).acceptedBy.length === 0);
      if (head < 0) {
        this.routes.delete(route);
        return;
      }
      records = records.slice(head);
      this.routes.set(route, records);
    }
    const relays = this.groups.map((group) => ({ relay: group[0]!.relay, connected: group.some((member) => member.connected) }));
    const offered = (relay: string, msgId: string) => this.inFlight.has(`${relay} ${msgId}`);
    const window = this.troubled.has(route) ? 1 : PIPELINE_WINDOW;
    const messages = records.map((record) => this.routeMessage(record));
    for (const offer of offersNow(messages, relays, offered, window)) {
      const group = this.groups.find((g) => g[0]!.relay === offer.relay)!;
      const at = messages.findIndex((m) => m.msgId === offer.msgId);
      // Pipelined behind a message still pending: the relay decides it only after that one (relay/send-chain.ts).
      const before = messages[at - 1];
      void this.sendVia(group, records[at]!, before !== undefined && before.acceptedBy.length === 0 ? before.msgId : undefined);
    }
  }

  /** A record as the order rule sees it, with the acceptances not yet committed to the outbox. */
  private routeMessage(record: OutboxRecord): RouteMessage {
    const acceptedBy = new Set(record.accepted_by.map((url) => this.relayOfUrl.get(url) ?? url));
    for (const relay of this.acceptedHere.get(record.envelope.msg_id) ?? []) acceptedBy.add(relay);
    return { msgId: record.envelope.msg_id, acceptedBy: [...acceptedBy], reported: (record.remote?.length ?? 0) > 0 };
  }

  /** Acceptances the outbox now records itself, or of messages no route holds, need no longer be remembered here. */
  private forgetCommitted(records: readonly OutboxRecord[]): void {
    const committed = new Set(records.filter((r) => r.accepted_by.length > 0).map((r) => r.envelope.msg_id));
    const held = new Set([...this.routes.values()].flat().map((r) => r.envelope.msg_id));
    for (const msgId of this.acceptedHere.keys()) if (committed.has(msgId) || !held.has(msgId)) this.acceptedHere.delete(msgId);
  }

  /** Offers the message to one connected address of the relay `group`, unless one of them has it or is being offered it. */
  private async sendVia(group: readonly RelayClient[], record: OutboxRecord, follows: string | undefined): Promise<void> {
    const relay = sendingMember(group, record.route);
    if (relay === undefined) return;
    const msgId = record.envelope.msg_id;
    const key = `${relay.relay} ${msgId}`;
    if (this.inFlight.has(key) || group.some((member) => record.accepted_by.includes(member.url))) return;
    this.inFlight.add(key);
    try {
      const late = (answer: SendOutcome) => void this.answeredLate(relay, record, answer);
      const outcome = await relay.send(record.route, this.wire(record.envelope), { late, name: msgId, follows });
      if (outcome.accepted) {
        crashPoint('outbound.after_relay_accept');
        this.accepted(relay, record);
        await this.outbox.markAccepted(msgId, relay.url);
      }
      else {
        this.troubled.add(record.route);
        if (PERMANENT_REFUSALS.has(outcome.code)) await this.refusedForGood(relay, record, `${outcome.code}: ${outcome.message}`);
        else {
          // out_of_order follows a refusal already logged (or a message not offered here yet).
          if (outcome.code !== 'disconnected' && outcome.code !== 'out_of_order') this.refusals.refused(relay.url, outcome.code, { msg_id: msgId, message: outcome.message });
          this.retrySoon();
        }
      }
    } catch (err) {
      this.troubled.add(record.route);
      this.refusals.refused(relay.url, 'error', { msg_id: msgId, message: messageOf(err) });
      this.retrySoon();
    } finally {
      this.inFlight.delete(key);
    }
  }

  /** A relay took the message: the route's next one is offered now (route-order.ts). */
  private accepted(relay: RelayClient, record: OutboxRecord): void {
    const msgId = record.envelope.msg_id;
    this.refused.delete(msgId);
    this.refusals.accepted(relay.url);
    const relays = this.acceptedHere.get(msgId) ?? new Set<string>();
    relays.add(relay.relay);
    this.acceptedHere.set(msgId, relays);
    // The backlog behind a refusal is accepted: the route is pipelined again.
    const backlog = this.routes.get(record.route) ?? [];
    if (backlog.every((r) => this.routeMessage(r).acceptedBy.length > 0)) this.troubled.delete(record.route);
    this.offerRoute(record.route);
  }

  /**
   * A relay answered an offer after it had timed out: one that accepted it has the
   * message, and says so now; without this, a relay slower than the timeout would be
   * offered every message again and again, and each would read `pending` for ever.
   */
  private async answeredLate(relay: RelayClient, record: OutboxRecord, answer: SendOutcome): Promise<void> {
    if (!answer.accepted) return;
    const msgId = record.envelope.msg_id;
    log.info('relay_accepted_late', { relay: relay.url, msg_id: msgId });
    this.accepted(relay, record);
    try {
      await this.outbox.markAccepted(msgId, relay.url);
    } catch (err) {
      this.refusals.refused(relay.url, 'error', { msg_id: msgId, message: messageOf(err) });
    }
  }

  private retrySoon(): void {
    if (this.retryTimer !== undefined) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      void this.kick();
    }, RETRY_MS);
    this.retryTimer.unref();
  }

  private async refusedForGood(relay: RelayClient, record: OutboxRecord, reason: string): Promise<void> {
    const msgId = record.envelope.msg_id;
    const seen = this.refused.get(msgId) ?? { relays: new Set<string>(), reason };
    if (!seen.relays.has(relay.relay)) log.warn('relay_refused_send', { relay: relay.url, msg_id: msgId, reason, permanent: true });
    seen.relays.add(relay.relay);
    seen.reason = reason;
    this.refused.set(msgId, seen);
    if (!refusedEverywhere(seen.relays, this.groups.map((group) => group[0]!.relay))) return;
    this.refused.delete(msgId);
    const { ended } = await this.outbox.end(msgId, 'delivery_failed', `every relay refused it: ${reason}`);
    if (ended) log.warn('send_failed', { msg_id: msgId, reason });
  }
}
