/**
 * Who is who in a capacity run, as pure functions of the session's index: its pair, its
 * relay, whether it sends and whether it checks the roster, and which worker runs it.
 * Pairs never span two workers, so both ends of a message are timed by one clock.
 */

/** Session `i`'s pair: 0↔1, 2↔3, … */
export function pairOf(i: number): number {
  return i ^ 1;
}

/** A pair's relay: pairs are dealt over the relays in turn, both ends of a pair on one. */
export function relayOf(i: number, relays: number): number {
  return Math.floor(i / 2) % relays;
}

/**
 * Whether session `i` is among a `fraction` of the sessions, spread evenly over the
 * indices (so over the workers and relays): one in a hundred for 0.01, every one for 1.
 */
export function chosen(i: number, fraction: number): boolean {
  return Math.floor((i + 1) * fraction + 1e-9) > Math.floor(i * fraction + 1e-9);
}

/** `sessions` (even) cut into `workers` blocks of whole pairs, as even as they come. */
export function splitSessions(sessions: number, workers: number): { first: number; count: number }[] {
  const pairs = sessions / 2;
  const blocks: { first: number; count: number }[] = [];
  let first = 0;
  for (let w = 0; w < workers; w++) {
    const count = 2 * (Math.floor(pairs / workers) + (w < pairs % workers ? 1 : 0));
    blocks.push({ first, count });
    first += count;
  }
  return blocks;
}

/** The session id of session `i`: every session has its own key too, so ids need only be readable. */
export function sessionId(i: number): string {
  return `capacity-${i}`;
}
