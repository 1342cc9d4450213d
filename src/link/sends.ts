/**
 * The sends of one connection: each awaits the relay's answer (`accepted` or `refused`)
 * until its deadline, and the ones that timed out still take an answer that comes later
 * on the same connection (a slow relay stored the message, though the caller was told it
 * timed out). A send may follow an earlier one of the connection (offer-ledger.ts).
 * Nothing here retries a send: the outbox decides that.
 */
import type { ClientFrame } from '../wire/frames.js';
import { PROTOCOL_VERSION } from '../wire/frames.js';
import type { RefusalCode, SendFailureCode } from '../errors.js';
import { OfferLedger } from './offer-ledger.js';
import { RequestTable, type RequestChannel } from './requests.js';

export type SendOutcome = { accepted: true; id: number } | { accepted: false; code: RefusalCode | SendFailureCode; message: string };

export interface SendOptions {
  /** Told the relay's answer if it comes after the timeout, on the same connection. */
  late?: (outcome: SendOutcome) => void;
  /** Names the send for a later one's `follows`. */
  name?: string;
  /** Names an earlier send on this connection that this one must come after. */
  follows?: string;
}

/** Sends that timed out whose answer may still come, at most this many per connection (the oldest are forgotten). */
const MAX_LATE = 1024;

export class Sends {
  private readonly waiting: RequestTable<SendOutcome>;
  /** Sends that timed out on this connection, by ref: a slow relay's answer still counts. */
  private readonly late = new Map<string, (outcome: SendOutcome) => void>();
  /** This connection's sends by name, for sends that follow them. */
  private readonly offers = new OfferLedger();

  constructor(
    /** The relay's URL, which every failure names. */
    private readonly url: string,
    channel: RequestChannel,
    timeoutMs: number,
    /** The connection's next request ref (sends and roster requests share them). */
    private readonly ref: () => string,
  ) {
    this.waiting = new RequestTable(channel, timeoutMs);
  }

  /** Offers `payload` for the route `to`: RelayClient.send. */
  send(to: string, payload: Record<string, unknown>, options: SendOptions): Promise<SendOutcome> {
    // A sealed envelope leaves only in its wire form (envelope.ts wireOf): its opened body
    // must never reach a relay.
    if (payload.v === 4 && 'text' in payload) throw new Error('a sealed envelope was about to be sent with its opened body; send wireOf(envelope)');
    const following = options.follows === undefined ? {} : this.offers.follow(options.follows);
    if ('refuse' in following) return Promise.resolve({ accepted: false, code: 'out_of_order', message: `relay ${this.url}: ${following.refuse}` });
    const ref = this.ref();
    const fail = (message: string): SendOutcome => ({
      accepted: false,
      code: message === 'disconnected' ? 'disconnected' : 'timeout',
      message: `relay ${this.url}: ${message}`,
    });
    const { name, late } = options;
    // No answer (a timeout) leaves it pending: the relay may still decide it.
    const answered = (outcome: SendOutcome) => {
      if (name === undefined || (!outcome.accepted && (outcome.code === 'timeout' || outcome.code === 'disconnected'))) return;
      this.offers.answered(name, ref, outcome.accepted);
    };
    if (name !== undefined) this.offers.offered(name, ref);
    const frame: ClientFrame = { v: PROTOCOL_VERSION, type: 'send', ref, to, payload, ...following };
    const onLate = () => this.awaitLate(ref, (outcome) => (answered(outcome), late?.(outcome)));
    return this.waiting.ask(ref, frame, fail, onLate).then((outcome) => (answered(outcome), outcome));
  }

  /**
   * The relay's answer to the send `ref`, in time or after its timeout (then passed to its
   * `late`, once). False when no send of this connection awaits an answer under that ref.
   */
  answered(ref: string, outcome: SendOutcome): boolean {
    if (this.waiting.has(ref)) {
      this.waiting.settle(ref, outcome);
      return true;
    }
    const late = this.late.get(ref);
    if (late === undefined) return false;
    this.late.delete(ref);
    late(outcome);
    return true;
  }

  /** The connection is gone: every send awaiting its answer fails with `message`, and no late answer can come. */
  failAll(message: string): void {
    this.late.clear();
    this.offers.clear();
    this.waiting.failAll(() => ({ accepted: false, code: 'disconnected', message: `relay ${this.url}: ${message}` }));
  }

  private awaitLate(ref: string, late: (outcome: SendOutcome) => void): void {
    this.late.set(ref, late);
    if (this.late.size > MAX_LATE) this.late.delete(this.late.keys().next().value!);
  }
}
