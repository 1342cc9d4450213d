/**
 * The session's side of `after` (relay/send-chain.ts; docs/PROTOCOL.md "Sending": "Order
 * through refusals"): the sends of the current connection, by the caller's name for them
 * (a msg_id), with their ref and whether the relay answered. A send that follows another
 * names that one's ref while it awaits its answer, goes without a condition once it was
 * accepted, and is not sent at all when it was refused or never offered on this
 * connection: the relay could not order it after that one.
 *
 * Cleared on every new connection: refs name sends of one connection only.
 */

/** Offers of one connection remembered by name. */
const MAX_OFFERS = 1_024;

type Answer = 'pending' | 'accepted' | 'refused';

/** How a send that follows another goes out. */
export type Following = { after?: string } | { refuse: string };

export class OfferLedger {
  private readonly offers = new Map<string, { ref: string; answer: Answer }>();

  offered(name: string, ref: string): void {
    this.offers.delete(name);
    this.offers.set(name, { ref, answer: 'pending' });
    if (this.offers.size > MAX_OFFERS) this.offers.delete(this.offers.keys().next().value!);
  }

  /** The relay's answer to the send `ref` (a timeout is no answer: the relay may still decide). */
  answered(name: string, ref: string, accepted: boolean): void {
    const offer = this.offers.get(name);
    if (offer?.ref === ref) offer.answer = accepted ? 'accepted' : 'refused';
  }

  /** What a send that follows the one named `name` carries, or why it cannot go. */
  follow(name: string): Following {
    const offer = this.offers.get(name);
    if (offer === undefined) return { refuse: `the message it follows (${name}) is not on offer on this connection` };
    if (offer.answer === 'refused') return { refuse: `the message it follows (${name}) was refused on this connection` };
    return offer.answer === 'pending' ? { after: offer.ref } : {};
  }

  clear(): void {
    this.offers.clear();
  }
}
