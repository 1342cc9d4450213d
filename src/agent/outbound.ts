/**
 * Drains the outbox: every pending message is offered to every connected relay until
 * one accepts it, then it is `bus_accepted`. Runs on every new message, on every relay
 * (re)connection, and once a second to catch the rest.
 */
import { log } from '../log.js';
import type { Outbox, OutboxRecord } from '../outbox/outbox.js';
import type { RelayClient } from '../relay/client.js';

const PASS_INTERVAL_MS = 1_000;

export class Outbound {
  private readonly inFlight = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private again = false;

  constructor(
    private readonly outbox: Outbox,
    private readonly relays: readonly RelayClient[],
  ) {}

  start(): void {
    for (const relay of this.relays) relay.on('connected', () => this.kick());
    this.timer = setInterval(() => this.kick(), PASS_INTERVAL_MS);
    this.timer.unref();
    this.kick();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** Offers one message at once, without waiting for the next pass. */
  offer(record: OutboxRecord): void {
    for (const relay of this.relays) void this.sendVia(relay, record);
  }

  kick(): void {
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.pass()
      .catch((err: unknown) => log.warn('outbound_pass_failed', { error: (err as Error).message }))
      .finally(() => {
        this.running = undefined;
        if (this.again) {
          this.again = false;
          this.kick();
        }
      });
  }

  private async pass(): Promise<void> {
    const pending = await this.outbox.pending();
    for (const record of pending) this.offer(record);
  }

  private async sendVia(relay: RelayClient, record: OutboxRecord): Promise<void> {
    const key = `${relay.url} ${record.envelope.msg_id}`;
    if (!relay.connected || this.inFlight.has(key) || record.accepted_by.includes(relay.url)) return;
    this.inFlight.add(key);
    try {
      const outcome = await relay.send(record.route, record.envelope);
      if (outcome.accepted) await this.outbox.markAccepted(record.envelope.msg_id, relay.url);
      else if (outcome.code !== 'disconnected') log.warn('relay_refused_send', { relay: relay.url, msg_id: record.envelope.msg_id, code: outcome.code, message: outcome.message });
    } catch (err) {
      log.warn('outbound_failed', { relay: relay.url, msg_id: record.envelope.msg_id, error: (err as Error).message });
    } finally {
      this.inFlight.delete(key);
    }
  }
}
