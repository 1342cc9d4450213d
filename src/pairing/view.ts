/** What `list_pairing_requests` and `pair list` show of a pairing store: pure. */
import { fingerprintOfKey } from './inbound.js';
import type { PairingData } from './rules.js';

export function pairingView(data: PairingData, petnameOf: (key: string) => string | undefined) {
  return {
    incoming: data.incoming.map((i) => {
      const peer = petnameOf(i.from);
      return {
        fingerprint: i.fingerprint,
        key: i.from,
        claimed_name: i.claimed_name,
        session: i.session,
        received_at: i.received_at,
        code: i.code,
        // Already a peer here: it asks again, likely because it removed this identity on its side.
        ...(peer !== undefined && { already_peer: peer }),
      };
    }),
    outgoing: data.outgoing.map((o) => ({
      fingerprint: fingerprintOfKey(o.to),
      key: o.to,
      petname: o.petname,
      session: o.session,
      created_at: o.created_at,
      code: o.code,
      state: outgoingState(o, data),
      ...(o.conflict !== undefined && { conflict: o.conflict }),
    })),
    unsent_control_messages: data.control.length,
    /** Requests dropped because the list was full, since a person last saw this in `pair list`. */
    dropped_requests: data.dropped === undefined ? null : { count: data.dropped.count, since: data.dropped.since, since_iso: new Date(data.dropped.since).toISOString(), last_at: data.dropped.last_at },
  };
}

/** The sentence a person reads about dropped requests: who can still reach them, and how. */
export function droppedSentence(dropped: { count: number; since: number }): string {
  return (
    `${dropped.count} pairing request${dropped.count === 1 ? ' was' : 's were'} dropped since ${new Date(dropped.since).toISOString()} because the list was full ` +
    `(at most 64; the oldest from unknown keys go first). Someone who asked you and is not listed can run \`interlink-mcp pair request\` again: it is sent again.`
  );
}

/** Which step an outgoing request waits on, and on whom. */
function outgoingState(o: PairingData['outgoing'][number], data: PairingData) {
  if (o.conflict !== undefined) return 'accepted_with_conflict' as const;
  if (o.accepted !== undefined) return 'accepted_confirm_needed' as const;
  return data.control.some((c) => c.msg_id === o.request_id) ? ('waiting_for_relay' as const) : ('sent' as const);
}
