/**
 * The `send` frame (docs/PROTOCOL.md "Relay frames": "Sending" and "Refusal codes"): the
 * payload is committed before `accepted` is sent and before it is delivered to anyone
 * (delivery.ts); a send naming `after` waits for that send's outcome (send-chain.ts); a
 * bound past which nothing is stored is refused with what the sender holds.
 */
import { log } from '../log.js';
import { messageOf } from '../errors.js';
import { MAX_PAYLOAD_BYTES, PROTOCOL_VERSION } from '../wire/frames.js';
import type { Connection } from './connection.js';
import type { Delivery } from './delivery.js';
import type { QueueLimits, Share } from './limits.js';
import type { Origin, QueueStore } from './queue-store.js';
import type { EnqueueResult } from './queues.js';
import type { RelayMetrics } from './relay-metrics.js';
import type { RepeatedEvents } from './repeated-log.js';
import { outOfOrderMessage } from './send-chain.js';

/** Payload bytes one connection may have waiting for a commit; beyond it sends are refused `rate_limited`. */
export const MAX_UNCOMMITTED_BYTES = 32 * 1024 * 1024;

function shareText(share: Share): string {
  return `${share.messages} messages or ${share.bytes} bytes of payload`;
}

type Held = { address: Share; connection: Share };

/**
 * What the sender holds is read when the refusal is written, after the commit that decided
 * it (undefined: the store could not say).
 */
function queueFullMessage(route: string, result: Extract<EnqueueResult, { outcome: 'queue_full' }>, limits: QueueLimits, held: Held | undefined, keyed: boolean): string {
  const holds = (share: Share | undefined) => (share === undefined ? '' : `it holds ${shareText(share)} queued; `);
  switch (result.limit) {
    case 'perConnection':
      // The share is the proven key's, or the pool of the network's connections without one (sender-keys.ts): reconnecting renews neither.
      return `${keyed ? "the share of the key this connection proved" : "the share of your network's connections that have no key of their own (prove one with auth)"} is full (${holds(held?.connection)}its share is ${shareText(limits.perConnection!)}); reconnecting does not renew it; try again once they are read or expire`;
    case 'perAddress':
      return `your address's share of the relay is full (${holds(held?.address)}its share is ${shareText(limits.perAddress!)}); try again once they are read or expire`;
    case 'routeMessages':
      return `the queue of ${route} is full (${limits.routeMessages} messages waiting for its reader); try again later`;
    case 'messages':
      return `the relay is full (${limits.messages} messages queued); try again later`;
    case 'bytes':
      return `the relay is full (${limits.bytes} bytes of payload queued); try again later`;
  }
}

export class Sends {
  /** `track` keeps work under way until the relay has settled (dispatch.ts); `failures` logs store failures with counts. */
  constructor(
    private readonly storage: QueueStore,
    private readonly delivery: Delivery,
    private readonly metrics: RelayMetrics | undefined,
    private readonly track: (work: Promise<unknown>) => void,
    private readonly failures: RepeatedEvents,
  ) {}

  /**
   * A send naming `after` waits for that send's outcome and goes on only if it was
   * accepted (send-chain.ts): a refusal stops what was pipelined behind it.
   */
  onSend(conn: Connection, ref: string, to: string, payload: string, after: string | undefined): void {
    const settle = conn.sends.begin(ref);
    const bytes = Buffer.byteLength(payload, 'utf8');
    if (bytes > MAX_PAYLOAD_BYTES) {
      settle(false);
      return conn.refuse(ref, 'too_large', `the payload is ${bytes} bytes of JSON; the limit is ${MAX_PAYLOAD_BYTES} bytes (512 KiB)`);
    }
    if (conn.uncommittedBytes + bytes > MAX_UNCOMMITTED_BYTES) {
      settle(false);
      return conn.refuse(ref, 'rate_limited', `the relay is still storing ${conn.uncommittedBytes} bytes from this connection; wait for their replies`);
    }
    // Held while it waits for the send it follows, as while it commits.
    conn.uncommittedBytes += bytes;
    const release = () => (conn.uncommittedBytes -= bytes);
    const store = () => {
      const origin: Origin = { address: conn.address, connection: conn.shareHolder };
      const commit = this.storage.enqueue(to, payload, origin);
      void commit.finally(release).catch(() => undefined);
      return commit.then(
        (result) => {
          settle(result.outcome === 'enqueued');
          return this.afterEnqueue(conn, ref, to, payload, result, origin);
        },
        (err: unknown) => {
          settle(false);
          this.failures.note('error', 'relay_commit_failed', { error: messageOf(err) });
          conn.refuse(ref, 'storage', `the relay could not store the message (${messageOf(err)}); send it again`);
        },
      );
    };
    if (after === undefined) return void this.track(store());
    this.track(
      conn.sends.preceding(after).then((preceding) => {
        if (preceding === 'accepted') return store();
        release();
        settle(false);
        conn.refuse(ref, 'out_of_order', outOfOrderMessage(after, preceding));
      }),
    );
  }

  private async afterEnqueue(conn: Connection, ref: string, route: string, payload: string, result: EnqueueResult, origin: Origin): Promise<void> {
    if (result.outcome === 'enqueued') {
      this.metrics?.accepted();
      conn.send({ v: PROTOCOL_VERSION, type: 'accepted', ref, id: result.id });
      if (result.follows === undefined) this.delivery.pumpRoute(route);
      else this.delivery.committed(route, { id: result.id, payload }, result.follows);
    } else if (result.outcome === 'queue_full') {
      const share = result.limit === 'perAddress' || result.limit === 'perConnection';
      const held = share ? await Promise.resolve(this.storage.held(origin)).catch(() => undefined) : undefined;
      conn.refuse(ref, 'queue_full', queueFullMessage(route, result, this.storage.limits, held, origin.connection.startsWith('key:')));
    } else {
      log.error('relay_id_reused', { result });
      conn.refuse(ref, 'storage', 'the relay could not store the message (internal id conflict); send it again');
    }
  }
}
