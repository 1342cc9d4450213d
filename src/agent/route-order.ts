/**
 * The order rule of the outbound loop (DESIGN.md "Order"; docs/PROTOCOL.md "Order"): which
 * of one route's messages may be offered to which relay now. Pure; `agent/outbound.ts`
 * calls it with what its outbox and its offers in flight say.
 *
 * A relay gives a route's messages ids in the order their sends reach it and delivers
 * them in that order, but it decides each send on its own: with two sends of one route in
 * flight on one connection, the first can be refused (`queue_full`, `storage`,
 * `rate_limited`) or go unanswered while the second is accepted (an acknowledgement
 * frees a share between them; a commit batch fails and the next one does not). So once
 * anything of a route was refused or went unanswered, the route has one message on offer
 * at a time, its oldest pending one (the head), and the next is offered only once a relay
 * accepted the head: the rest wait behind the refusal instead of overtaking it
 * (`window` 1). While its offers are accepted (the caller passes a larger `window`), the
 * messages behind the head are pipelined to one relay, on the connection that carries
 * the head, so a route is not held to one relay round trip per message. Each of those
 * names the one before it (`after`, relay/send-chain.ts): a relay refuses it
 * `out_of_order` unless the one before was accepted, so a refusal that comes while later
 * messages are already on their way stops them too.
 * Sends to other routes are offered side by side.
 *
 * With several relays, a message accepted by one is in that relay's queue only: a later
 * message offered to another relay could be delivered first. So the head goes only to a
 * relay that holds every older message of the route, except those the receiver already
 * reported (a signed receipt: they reached its mailbox) and those held only by relays not
 * connected now or no longer configured. Those cannot be delivered before their relay is
 * back, and waiting for it would stop the route for as long as it is away: the route goes
 * on through the relays that answer, and the receiver's mailbox orders what it has not
 * read by the signed `ts` (a receiver reading while that relay is away sees the message
 * late, once it is back).
 */

/** One message of a route, as the rule sees it. */
export interface RouteMessage {
  msgId: string;
  /** The relays (RelayClient.relay) that accepted it; none while it is pending. */
  acceptedBy: readonly string[];
  /** Whether the receiver reported it in a signed receipt. */
  reported: boolean;
}

export interface Offer {
  msgId: string;
  relay: string;
}

/**
 * `messages`: one route's messages in send order (signed `ts`): the pending ones, and
 * before them the accepted ones that may still order them (DESIGN.md "Order").
 * `relays`: the configured relays, each with whether an address of it is connected.
 * `offered(relay, msgId)`: whether an offer of that message to that relay awaits its answer.
 * `window`: how many of the route's pending messages may be on offer at once (1 after a
 * refusal or a timeout).
 */
export function offersNow(
  messages: readonly RouteMessage[],
  relays: readonly { relay: string; connected: boolean }[],
  offered: (relay: string, msgId: string) => boolean,
  window = 1,
): Offer[] {
  const head = messages.findIndex((m) => m.acceptedBy.length === 0);
  if (head < 0) return [];
  const msgId = messages[head]!.msgId;
  const connected = new Set(relays.filter((r) => r.connected).map((r) => r.relay));
  const barriers = messages.slice(0, head).filter((m) => !m.reported && m.acceptedBy.some((relay) => connected.has(relay)));
  const eligible = relays.filter((r) => r.connected && barriers.every((m) => m.acceptedBy.includes(r.relay))).map((r) => r.relay);
  const offers = eligible.filter((relay) => !offered(relay, msgId)).map((relay) => ({ msgId, relay }));
  // Behind the head: to the first relay that carries it, each message after the one before it.
  const pipe = eligible[0];
  if (pipe === undefined) return offers;
  // Only the pending run right behind the head: a message accepted past it (a late answer) orders what follows.
  const after = messages.slice(head + 1);
  const run = after.findIndex((m) => m.acceptedBy.length > 0);
  const behind = (run < 0 ? after : after.slice(0, run)).slice(0, window - 1);
  for (const m of behind) if (!offered(pipe, m.msgId)) offers.push({ msgId: m.msgId, relay: pipe });
  return offers;
}
