/**
 * The relay's memory of one connection's sends, for sends that name the one they follow
 * (`after`, docs/PROTOCOL.md "Sending": "Order through refusals").
 *
 * A client pipelines a route's messages on one connection. The relay decides each send on
 * its own: the first can be refused (its share full, a commit that failed) while the second
 * is accepted (an acknowledgement freed the share between them; the next commit batch
 * worked), and the second would then be delivered first. A send that names the ref of the
 * send before it is decided only after that one, and only if that one was accepted;
 * otherwise it is refused `out_of_order`, and the client offers the earlier one again
 * before it. So a route's commits on one connection follow one another, and a refusal
 * stops what was behind it instead of letting it through.
 *
 * Bounded: the outcomes of the last MAX_REMEMBERED sends are kept; an older ref is
 * unknown, and a send after an unknown ref is refused (never guessed accepted).
 */

/** Sends of one connection whose outcome a later send may name. */
export const MAX_REMEMBERED = 1_024;

/** What a later send learns of the one it follows. */
export type Preceding = 'accepted' | 'refused' | 'unknown';

export class SendChain {
  /** ref → whether the relay accepted it (a promise while its commit is under way). */
  private readonly outcomes = new Map<string, Promise<boolean>>();

  /**
   * Records a send under `ref` before anything decides it; the returned function settles
   * it once (accepted or not). A ref used again replaces the earlier one.
   */
  begin(ref: string): (accepted: boolean) => void {
    let settle!: (accepted: boolean) => void;
    const outcome = new Promise<boolean>((resolve) => (settle = resolve));
    this.outcomes.delete(ref);
    this.outcomes.set(ref, outcome);
    if (this.outcomes.size > MAX_REMEMBERED) this.outcomes.delete(this.outcomes.keys().next().value!);
    let settled = false;
    return (accepted) => {
      if (settled) return;
      settled = true;
      settle(accepted);
    };
  }

  /** Resolves once the send `ref` is decided. */
  preceding(ref: string): Promise<Preceding> {
    const outcome = this.outcomes.get(ref);
    if (outcome === undefined) return Promise.resolve('unknown');
    return outcome.then((accepted) => (accepted ? 'accepted' : 'refused'));
  }
}

/** The refusal of a send whose predecessor was not accepted (pure). */
export function outOfOrderMessage(after: string, preceding: Exclude<Preceding, 'accepted'>): string {
  return preceding === 'refused'
    ? `the send this one follows on this connection (ref ${after}) was refused: offer that one again first, then this one`
    : `the send this one follows (ref ${after}) is not known on this connection (never sent here, or too long ago): offer them again in order`;
}
