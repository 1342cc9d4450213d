/**
 * The pairing control outbox: signed pair_request and pair_accept messages waiting in the
 * pairing store until a relay accepts them. Each one is offered to every connected relay
 * at once after a relay connects or a message is queued, every 2 s while any wait, and
 * the store is looked at every 10 s when none does. Each offer is signed again with a
 * fresh timestamp and the same msg_id: a message that waited longer than the receiver's
 * 24 h freshness window is still fresh when it leaves, and the receiver sees one message
 * however often it was signed. Accepted by one relay, it leaves the queue.
 */
import { wireOf } from '../envelope/envelope.js';
import { signEnvelope } from '../envelope/sign.js';
import { formatRoute } from '../envelope/route.js';
import type { Identity } from '../identity/identity.js';
import { log } from '../log.js';
import type { RelayClient } from '../link/client.js';
import { SingleFlight } from '../single-flight.js';
import { controlDone, type ControlJob } from './rules.js';
import type { PairingStore } from './store.js';
import { messageOf } from '../errors.js';

const PASS_MS = 2_000;
/** With nothing queued, a pass every so often still finds what another process queued. */
const IDLE_PASS_MS = 10_000;
const FLUSH_POLL_MS = 100;

export interface ControlOutboxOptions {
  identity: Identity;
  /** `<key>#<session>`: where answers to these messages go. */
  route: string;
  store: PairingStore;
  relays: readonly RelayClient[];
}

export class ControlOutbox {
  private readonly inFlight = new Set<string>();
  private readonly loop = new SingleFlight(
    () => this.pass(),
    (err) => log.warn('pairing_control_failed', { error: messageOf(err) }),
  );

  constructor(private readonly options: ControlOutboxOptions) {}

  start(): void {
    for (const relay of this.options.relays) relay.on('connected', () => void this.kick());
    this.loop.start(IDLE_PASS_MS);
  }

  /** No pass starts after this; resolves when the one under way is done. */
  stop(): Promise<void> {
    return this.loop.stop();
  }

  /** Offers every queued message soon; resolves when the pass that does it is done. */
  kick(): Promise<void> {
    return this.loop.kick();
  }

  /** Offers everything now and again until the queue is empty or the deadline passes; returns how many are left. */
  async flush(timeoutMs: number): Promise<number> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      await this.loop.settled();
      await this.pass();
      const left = (await this.options.store.read()).control.length;
      if (left === 0 || Date.now() >= deadline) return left;
      await new Promise((resolve) => setTimeout(resolve, FLUSH_POLL_MS));
    }
  }

  private async pass(): Promise<number | undefined> {
    const { control } = await this.options.store.read();
    await Promise.all(control.flatMap((job) => this.options.relays.map((relay) => this.offer(relay, job))));
    return control.length > 0 ? PASS_MS : undefined;
  }

  private async offer(relay: RelayClient, job: ControlJob): Promise<void> {
    const key = `${relay.url} ${job.msg_id}`;
    if (!relay.connected || this.inFlight.has(key)) return;
    this.inFlight.add(key);
    try {
      const envelope = signEnvelope(this.options.identity.signingKey, {
        to: job.to,
        to_session: job.session,
        kind: job.kind,
        text: job.text,
        msg_id: job.msg_id,
        reply_to: this.options.route,
        ...(job.in_reply_to !== undefined && { in_reply_to: job.in_reply_to }),
      });
      const outcome = await relay.send(formatRoute({ key: job.to, session: job.session }), wireOf(envelope));
      if (outcome.accepted) await this.options.store.update((d) => controlDone(d, job.msg_id));
      else if (outcome.code !== 'disconnected') log.warn('relay_refused_send', { relay: relay.url, msg_id: job.msg_id, code: outcome.code, message: outcome.message });
    } finally {
      this.inFlight.delete(key);
    }
  }
}
