/**
 * What `status` asks of each listed relay: does it answer, and does it prove a key this
 * user's sessions trust (pinned in INTERLINK_URL, or recorded in relays.json)? A relay
 * client that reads no route makes a session's handshake, so a relay reset with a new key
 * is named as such before any session has met it. Nothing is recorded: `status` only reads.
 */
import { relayEndpoint } from '../config/relay-url.js';
import { generateSigningKey } from '../identity/ed25519.js';
import { RelayClient } from './client.js';
import { keyRefusalSentence, type KeyRefusal } from './key-refusal.js';
import { recordedTrust, type KnownRelaysFile } from './known-relays.js';
import type { ClientTls } from '../wire/tls.js';

/** A refused key as `status --json` shows it: the typed reason, its fields and the sentence. */
export type RefusedKey = KeyRefusal & { code: 'relay_untrusted'; message: string };

export type RelayCheck = { url: string; answers: false; error: string } | { url: string; answers: true; refused?: RefusedKey };

/** Each of `urls` (as configured, pins included), checked at once, each within `timeoutMs`. */
export function checkRelays(urls: readonly string[], known: KnownRelaysFile, timeoutMs: number, tls?: ClientTls): Promise<RelayCheck[]> {
  const trust = recordedTrust(known, urls.map(relayEndpoint));
  // The client reads no route, so its key signs nothing: any key does, and `status` needs no identity.
  const clients = urls.map((url) => new RelayClient({ url, key: generateSigningKey(), routes: [], trust, logOutages: false, ...(tls !== undefined && { tls }) }));
  return Promise.all(clients.map((client) => checkOne(client, timeoutMs)));
}

async function checkOne(client: RelayClient, timeoutMs: number): Promise<RelayCheck> {
  client.start();
  try {
    const url = client.url;
    if (await client.ready(timeoutMs, { failFast: true })) return { url, answers: true };
    const trouble = client.trouble;
    if (trouble?.kind === 'untrusted') return { url, answers: true, refused: { code: 'relay_untrusted', ...trouble.refusal, message: keyRefusalSentence(trouble.refusal) } };
    return { url, answers: false, error: trouble?.error ?? `no answer within ${timeoutMs} ms` };
  } finally {
    client.close();
  }
}
