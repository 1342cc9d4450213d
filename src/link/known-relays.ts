/**
 * Which relay keys this user's sessions trust, per URL (DESIGN.md "The relay's key"):
 * a key pinned in INTERLINK_URL, else the key recorded the first time the URL answered
 * (`<state>/relays.json`, trust on first use). The decision is pure (`decideRelayKey`);
 * `KnownRelays` reads and records under the file's lock, so sessions that meet a relay at
 * the same moment record one key.
 *
 * A relay that forwards another's challenge can present that relay's key as its own; it
 * cannot sign for it, but a live forwarder can pass the other's signature on. So a key is
 * refused on an unpinned URL when another listed URL pins or has recorded it: one of the
 * two forwards to the other, and the one already known keeps it. A URL that pins the key
 * it presents is trusted whatever the other URLs hold: when a person pins one key on
 * several URLs, those URLs are one relay with several addresses (relays sharing one
 * database, docs/SCALING.md), and the session uses them as one (relay-groups.ts).
 */
import { z } from 'zod';
import { relayEndpoint, type RelayEndpoint } from '../config/relay-url.js';
import { log } from '../log.js';
import { keyRefusalSentence, type KeyRefusal } from './key-refusal.js';
import { peekJson, updateJson } from '../store/json-store.js';

const recordSchema = z.object({ key: z.string(), first_seen: z.number() });
const refusalSchema = z.object({ key: z.string(), at: z.number(), message: z.string() });
const fileSchema = z.object({
  format: z.literal('interlink-known-relays'),
  version: z.literal(1),
  /** The trusted key of each URL, recorded on first use. */
  relays: z.record(z.string(), recordSchema),
  /** The last key each URL presented and was refused, for `status` (cleared when it is trusted again). */
  refused: z.record(z.string(), refusalSchema),
});
export type KnownRelaysFile = z.infer<typeof fileSchema>;
export type RelayRecord = z.infer<typeof recordSchema>;
export type RelayRefusal = z.infer<typeof refusalSchema>;

const empty = (): KnownRelaysFile => ({ format: 'interlink-known-relays', version: 1, relays: {}, refused: {} });

export type RelayKeyVerdict = { trusted: true; firstUse: boolean } | { trusted: false; refusal: KeyRefusal };

/** Trusts `key` on `endpoint` or says why not, given the other listed relays and what is recorded. */
export function decideRelayKey(endpoint: RelayEndpoint, key: string, others: readonly RelayEndpoint[], records: Readonly<Record<string, RelayRecord>>): RelayKeyVerdict {
  const { url, pin } = endpoint;
  if (pin !== undefined && key !== pin) return { trusted: false, refusal: { reason: 'not_pinned_key', url, key, pinned: pin } };
  // A person named this key for this URL: trusted, even where another URL pins it too.
  if (pin !== undefined) return { trusted: true, firstUse: false };
  const claimant = others.find((o) => o.url !== url && (o.pin === key || (o.pin === undefined && records[o.url]?.key === key)));
  if (claimant !== undefined) return { trusted: false, refusal: { reason: 'other_relays_key', url, key, claimant: claimant.url } };
  const known = records[url];
  if (known !== undefined && known.key !== key) {
    return { trusted: false, refusal: { reason: 'key_changed', url, key, recorded: known.key, since: known.first_seen } };
  }
  return { trusted: true, firstUse: known === undefined };
}

/** How a relay client asks whether to trust the key a relay proved it holds. */
export interface RelayTrust {
  admit(endpoint: RelayEndpoint, key: string): Promise<RelayKeyVerdict>;
}

/** Pins only: what a client with no state root checks. */
export const PINS_ONLY: RelayTrust = {
  admit: (endpoint, key) => Promise.resolve(decideRelayKey(endpoint, key, [], {})),
};

/** What a session would decide now, recording nothing: what `status` asks (relay-check.ts). */
export function recordedTrust(file: KnownRelaysFile, listed: readonly RelayEndpoint[]): RelayTrust {
  return { admit: (endpoint, key) => Promise.resolve(decideRelayKey(endpoint, key, listed, file.relays)) };
}

export class KnownRelays implements RelayTrust {
  private readonly listed: RelayEndpoint[];

  /** `listed`: the relay URLs of this session as configured (with their pins). */
  constructor(
    readonly path: string,
    listed: readonly string[],
  ) {
    this.listed = listed.map(relayEndpoint);
  }

  /** Decides under the lock; records a key on first use and a refusal for `status`, durably, before answering. */
  async admit(endpoint: RelayEndpoint, key: string): Promise<RelayKeyVerdict> {
    const { verdict } = await updateJson(this.path, fileSchema, empty, (file) => {
      const verdict = decideRelayKey(endpoint, key, this.listed, file.relays);
      return { next: nextFile(file, endpoint, key, verdict), result: { verdict } };
    });
    if (verdict.trusted && verdict.firstUse) log.info('relay_key_recorded', { relay: endpoint.url, key, file: this.path });
    return verdict;
  }
}

/** The file after a verdict, or undefined when nothing changes (no write). */
function nextFile(file: KnownRelaysFile, { url, pin }: RelayEndpoint, key: string, verdict: RelayKeyVerdict): KnownRelaysFile | undefined {
  if (!verdict.trusted) {
    const previous = file.refused[url];
    const message = keyRefusalSentence(verdict.refusal);
    if (previous?.key === key && previous.message === message) return undefined;
    return { ...file, refused: { ...file.refused, [url]: { key, at: Date.now(), message } } };
  }
  const record = verdict.firstUse && pin === undefined;
  if (!record && file.refused[url] === undefined) return undefined;
  const { [url]: _cleared, ...refused } = file.refused;
  return { ...file, relays: record ? { ...file.relays, [url]: { key, first_seen: Date.now() } } : file.relays, refused };
}

/** What `status` shows: the records and the refusals, without repairing anything. */
export async function readKnownRelays(path: string): Promise<KnownRelaysFile> {
  const read = await peekJson(path, fileSchema);
  return read.kind === 'ok' ? read.value : empty();
}

/** A person accepts a relay's new key: its record and refusal go, and the next key it presents is recorded. */
export async function forgetRelay(path: string, url: string): Promise<boolean> {
  return (
    await updateJson(path, fileSchema, empty, (file) => {
      if (file.relays[url] === undefined && file.refused[url] === undefined) return { next: undefined, result: { forgotten: false } };
      const { [url]: _record, ...relays } = file.relays;
      const { [url]: _refusal, ...refused } = file.refused;
      return { next: { ...file, relays, refused }, result: { forgotten: true } };
    })
  ).forgotten;
}
