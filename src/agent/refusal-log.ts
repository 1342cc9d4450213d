/**
 * What a session logs while a relay refuses its sends or its offers fail: the first
 * refusal of an episode, then a summary with counts every SUMMARY_MS while it lasts, then
 * one line when that relay accepts again. A message waiting out an outage is offered
 * again every second; one warning per offer wrote tens of thousands of lines in a minute
 * (issue 35). `noteRefusal` decides (pure); `RefusalLog` keeps the episodes and logs.
 */
import { log } from '../log.js';

/** How often a relay that keeps refusing is summarized while it does. */
export const SUMMARY_MS = 30_000;

/** One relay's run of refusals and failed offers, since its last acceptance. */
export interface Episode {
  since: number;
  /** Refusals (by code, or `error` for an offer that failed here) since the last line logged. */
  counts: Record<string, number>;
  total: number;
  loggedAt: number;
}

/** What to log for a refusal: nothing, the first line, or a summary of the refusals counted since the last line. */
export type Say = { say: 'first' } | { say: 'summary'; counts: Record<string, number> } | { say: 'nothing' };

/** The episode after one more refusal at `now`, and what to log for it (pure). */
export function noteRefusal(episode: Episode | undefined, now: number, code: string): { episode: Episode; line: Say } {
  if (episode === undefined) return { episode: { since: now, counts: {}, total: 1, loggedAt: now }, line: { say: 'first' } };
  const counts = { ...episode.counts, [code]: (episode.counts[code] ?? 0) + 1 };
  const total = episode.total + 1;
  if (now - episode.loggedAt < SUMMARY_MS) return { episode: { ...episode, counts, total }, line: { say: 'nothing' } };
  return { episode: { since: episode.since, counts: {}, total, loggedAt: now }, line: { say: 'summary', counts } };
}

export class RefusalLog {
  /** By relay URL. */
  private readonly episodes = new Map<string, Episode>();

  constructor(private readonly now: () => number = Date.now) {}

  /** A relay refused an offer for now (`code`), or the offer failed here (`error`). */
  refused(relay: string, code: string, fields: { msg_id: string; message: string }): void {
    const now = this.now();
    const { episode, line } = noteRefusal(this.episodes.get(relay), now, code);
    if (line.say === 'first') {
      log.warn(code === 'error' ? 'outbound_failed' : 'relay_refused_send', {
        relay,
        code,
        ...fields,
        note: `further refusals are counted and summarized every ${SUMMARY_MS / 1000} s until the relay accepts again`,
      });
    } else if (line.say === 'summary') {
      log.warn('relay_still_refusing', { relay, since: new Date(episode.since).toISOString(), outage_ms: now - episode.since, refusals: line.counts, total: episode.total, last: fields.message });
    }
    this.episodes.set(relay, episode);
  }

  /** The relay accepted a message: an episode of refusals, if one was running, ends. */
  accepted(relay: string): void {
    const episode = this.episodes.get(relay);
    if (episode === undefined) return;
    this.episodes.delete(relay);
    log.warn('relay_accepting_again', { relay, outage_ms: this.now() - episode.since, refusals: episode.total });
  }
}
