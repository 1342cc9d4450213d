/**
 * Why a session reads nothing at a relay that answers (DESIGN.md "The relay's key"): the
 * verdict as a value, and the one wording every surface gives it — the session's
 * `relay_key_refused` log line, `status`, every `pair` command's error and
 * `send_message`'s note. A relay reset on purpose (a fresh --db) and a relay replaced by
 * another look the same from here: the words name both keys and what a person does.
 */

export type KeyRefusal =
  /** The URL presented another key before (trust on first use, `<state>/relays.json`). */
  | { reason: 'key_changed'; url: string; key: string; recorded: string; since: number }
  /** INTERLINK_URL pins another key for the URL. */
  | { reason: 'not_pinned_key'; url: string; key: string; pinned: string }
  /** Another listed URL pins or recorded this key: one of the two may forward to the other. */
  | { reason: 'other_relays_key'; url: string; key: string; claimant: string }
  /** Its welcome does not verify under the key its challenge names. */
  | { reason: 'unproven'; url: string; key: string }
  /** It does not open with a challenge: a relay older than relay keys. */
  | { reason: 'no_challenge'; url: string }
  /** relays.json could not be read or written. */
  | { reason: 'unchecked'; url: string; error: string };

/** What the relay at `url` did and what a person does about it, without naming the URL first. */
export function keyRefusalText(refusal: KeyRefusal): string {
  const refused = 'refused, nothing is read there';
  switch (refusal.reason) {
    case 'key_changed':
      return (
        `answers with a NEW key ${refusal.key} (recorded ${refusal.recorded} since ${new Date(refusal.since).toISOString()}): ${refused} (it may be another relay); ` +
        `if the relay was reset on purpose, run \`interlink-mcp relay forget ${refusal.url}\``
      );
    case 'not_pinned_key':
      return `answers with the key ${refusal.key}, not the key ${refusal.pinned} pinned in INTERLINK_URL: ${refused} (it is another relay, or one passing on another's challenge); if the relay was reset on purpose, pin its new key in INTERLINK_URL instead`;
    case 'other_relays_key':
      return (
        `answers with the key of ${refusal.claimant} (${refusal.key}): ${refused} (one of the two may pass the other's challenge on); ` +
        `if they are one relay (several relays on one database), pin that key on both URLs in INTERLINK_URL (#key=${refusal.key}), else pin each relay's own key to say which is which`
      );
    case 'unproven':
      return `answers, but does not prove the key ${refusal.key} its challenge names (its welcome signature does not verify): ${refused}`;
    case 'no_challenge':
      return `answers without a challenge naming its key: an older relay, which cannot prove who it is; upgrade it. Until then ${refused}`;
    case 'unchecked':
      return `answers, but its key cannot be checked (${refusal.error}): ${refused}`;
  }
}

/** The whole sentence: "relay ws://… answers with a NEW key …". */
export function keyRefusalSentence(refusal: KeyRefusal): string {
  return `relay ${refusal.url} ${keyRefusalText(refusal)}`;
}
