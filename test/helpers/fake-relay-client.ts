/**
 * A stand-in for one relay connection (src/link/client.ts), for unit tests of the
 * background loops: just the surface they use. Sends answer from a script (accepted
 * unless told otherwise, `disconnected` while not connected) and are recorded with the
 * envelope as sent; acknowledgements are recorded; `deliver` pushes a delivery the way
 * the relay does.
 */
import { EventEmitter } from 'node:events';
import type { Envelope } from '../../src/envelope/envelope.js';
import type { Delivery, RelayClient } from '../../src/link/client.js';
import type { SendOutcome } from '../../src/link/sends.js';

export type Refusal = Extract<SendOutcome, { accepted: false }>['code'];

export class FakeRelayClient extends EventEmitter {
  connected: boolean;
  /** Whether this address reads the routes (RelayClient.reads). */
  reads = true;
  /** Which relay the address reaches (RelayClient.relay): the pinned key of a shared relay, else the URL. */
  readonly relay: string;
  readonly sent: { route: string; envelope: Envelope }[] = [];
  readonly acks: { route: string; id: number }[] = [];
  private readonly script: (Refusal | 'accept' | 'accept_late')[] = [];
  private nextId = 1;

  constructor(
    readonly url = 'ws://fake',
    options: { connected?: boolean; relay?: string } = {},
  ) {
    super();
    this.connected = options.connected ?? true;
    this.relay = options.relay ?? url;
  }

  read(): void {
    this.reads = true;
  }

  /** What the loops see: this object, typed as the real client. */
  get client(): RelayClient {
    return this as unknown as RelayClient;
  }

  /**
   * The next sends get these answers, in order; after them every send is accepted.
   * `accept_late`: a timeout, then the acceptance, to the send's `late`.
   */
  answer(...outcomes: (Refusal | 'accept' | 'accept_late')[]): void {
    this.script.push(...outcomes);
  }

  async send(route: string, envelope: Envelope, options: { late?: (outcome: SendOutcome) => void } = {}): Promise<SendOutcome> {
    if (!this.connected) return { accepted: false, code: 'disconnected', message: 'not connected' };
    this.sent.push({ route, envelope });
    const next = this.script.shift() ?? 'accept';
    if (next === 'accept') return { accepted: true, id: this.nextId++ };
    if (next === 'accept_late') {
      const id = this.nextId++;
      setTimeout(() => options.late?.({ accepted: true, id }), 10);
      return { accepted: false, code: 'timeout', message: 'no answer in time' };
    }
    return { accepted: false, code: next, message: `refused: ${next}` };
  }

  ack(route: string, ids: number[]): void {
    for (const id of ids) this.acks.push({ route, id });
  }

  /** The ids acknowledged so far, in order. */
  get acked(): number[] {
    return this.acks.map((a) => a.id);
  }

  /** Pushes a delivery as the relay does; returns its id. */
  deliver(route: string, payload: object, id: number = this.nextId++): number {
    this.emit('delivery', { relay: this.url, route, id, payload: payload as Record<string, unknown> } satisfies Delivery);
    return id;
  }

  /** Comes (back) up, as after a reconnect. */
  connect(): void {
    this.connected = true;
    this.emit('connected');
  }

  disconnect(): void {
    this.connected = false;
    this.emit('disconnected');
  }
}
