/**
 * Drains the outbox: every pending message is offered to every relay until one accepts
 * it, then it is `bus_accepted`. A relay reached at several addresses (URLs that pin one
 * key, relay/relay-groups.ts) is one relay here: the message is offered to one connected
 * address of it, the one the recipient's session reads through when it can
 * (`sendingMember`), and once one of them accepted it, it is not offered to the others.
 * Runs on every new message, on every relay (re)connection, once a second while messages
 * are pending, and every 30 s otherwise. A
 * message that every configured relay refuses for a reason that cannot change (too
 * large, a malformed route) leaves the loop as `delivery_failed` with the relays' reason,
 * instead of being offered forever.
 */
import { wireOf, type Envelope, type WireEnvelope } from '../envelope/envelope.js';
import { log } from '../log.js';
import type { Outbox, OutboxRecord } from '../outbox/outbox.js';
import type { RelayClient, SendOutcome } from '../relay/client.js';
import { SingleFlight } from '../single-flight.js';
import { messageOf, type RefusalCode } from '../errors.js';
import { crashPoint } from '../store/crash-point.js';
import { sendingMember } from '../relay/relay-groups.js';

/** While a message waits for a relay to accept it, it is offered again this often. */
const RETRY_MS = 1_000;
/** With nothing pending, a pass every so often still finds what another process left behind. */
const IDLE_PASS_MS = 30_000;
/** Refusals that the same bytes will meet again at that relay, however often they are offered. */
const PERMANENT_REFUSALS: ReadonlySet<string> = new Set<RefusalCode>(['too_large', 'bad_frame']);

/** Whether every relay has refused the message for good (pure); a relay is named by RelayClient.relay. */
export function refusedEverywhere(refusedBy: ReadonlySet<string>, relays: readonly string[]): boolean {
  return relays.length > 0 && relays.every((url) => refusedBy.has(url));
}

export class Outbound {
  private readonly inFlight = new Set<string>();
  /** msg_id → relays (RelayClient.relay) that refused it for good, with the last reason; memory only (a restart offers it again). */
  private readonly refused = new Map<string, { relays: Set<string>; reason: string }>();
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
   * `wire`: what a relay is offered for a stored envelope (envelope.ts `offerable`).
   */
  constructor(
    private readonly outbox: Outbox,
    private readonly groups: readonly (readonly RelayClient[])[],
    private readonly wire: (envelope: Envelope) => WireEnvelope = wireOf,
  ) {}

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

  /** Offers one message at once, without waiting for the next pass. */
  offer(record: OutboxRecord): void {
    for (const group of this.groups) void this.sendVia(group, record);
  }

  /** Offers every pending message soon; resolves when the pass that does it has offered them. */
  kick(): Promise<void> {
    return this.loop.kick();
  }

  private async pass(): Promise<number | undefined> {
    const pending = await this.outbox.pending();
    for (const record of pending) this.offer(record);
    return pending.length > 0 ? RETRY_MS : undefined;
  }

  /** Offers the message to one connected address of the relay `group`, unless one of them has it or is being offered it. */
  private async sendVia(group: readonly RelayClient[], record: OutboxRecord): Promise<void> {
    const relay = sendingMember(group, record.route);
    if (relay === undefined) return;
    const key = `${relay.relay} ${record.envelope.msg_id}`;
    if (this.inFlight.has(key) || group.some((member) => record.accepted_by.includes(member.url))) return;
    this.inFlight.add(key);
    try {
      const outcome = await relay.send(record.route, this.wire(record.envelope), { late: (answer) => void this.answeredLate(relay.url, record, answer) });
      if (outcome.accepted) {
        crashPoint('outbound.after_relay_accept');
        this.refused.delete(record.envelope.msg_id);
        await this.outbox.markAccepted(record.envelope.msg_id, relay.url);
      }
      else if (PERMANENT_REFUSALS.has(outcome.code)) await this.refusedForGood(relay, record, `${outcome.code}: ${outcome.message}`);
      else {
        if (outcome.code !== 'disconnected') log.warn('relay_refused_send', { relay: relay.url, msg_id: record.envelope.msg_id, code: outcome.code, message: outcome.message });
        this.retrySoon();
      }
    } catch (err) {
      log.warn('outbound_failed', { relay: relay.url, msg_id: record.envelope.msg_id, error: messageOf(err) });
      this.retrySoon();
    } finally {
      this.inFlight.delete(key);
    }
  }

  /**
   * A relay answered an offer after it had timed out: one that accepted it has the
   * message, and says so now; without this, a relay slower than the timeout would be
   * offered every message again and again, and each would read `pending` for ever.
   */
  private async answeredLate(url: string, record: OutboxRecord, answer: SendOutcome): Promise<void> {
    if (!answer.accepted) return;
    log.info('relay_accepted_late', { relay: url, msg_id: record.envelope.msg_id });
    try {
      await this.outbox.markAccepted(record.envelope.msg_id, url);
    } catch (err) {
      log.warn('outbound_failed', { relay: url, msg_id: record.envelope.msg_id, error: messageOf(err) });
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
