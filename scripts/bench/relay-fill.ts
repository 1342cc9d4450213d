/**
 * Fills a relay process for the memory benchmarks (relay-memory.ts, relay-memory-ratio.ts,
 * prometheus.ts): one client sends every payload to its route over `inFlight` lanes,
 * offering a payload again while the relay refuses it `rate_limited`, with `alongside` (a
 * scraper, say) running meanwhile.
 */
import { generateSigningKey } from '../../src/identity/ed25519.js';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { RelayClient } from '../../src/link/client.js';

export async function fillRelay(url: string, route: string, payloads: readonly Record<string, unknown>[], inFlight: number, alongside?: () => Promise<unknown>): Promise<void> {
  let next = 0;
  const take = () => (next < payloads.length ? { route, payload: payloads[next++]! } : undefined);
  await fillRelayWith(url, take, inFlight, alongside);
}

/** One send to make: where, and what. */
export interface Fill {
  route: string;
  payload: Record<string, unknown>;
}

/** As `fillRelay`, with each send made by `next` when a lane is free (undefined: none left), so a big fill is never all in memory. */
export async function fillRelayWith(url: string, next: () => Fill | undefined, inFlight: number, alongside?: () => Promise<unknown>): Promise<void> {
  // The sender proves its own route's key without reading it: a relay closes a connection that proves no key within 10 s.
  const key = generateSigningKey();
  const client = new RelayClient({ url, key, routes: [`${encodeBase64url(key.publicKey)}#fill`], readOnConnect: false });
  client.start();
  await new Promise<void>((resolve) => client.once('connected', () => resolve()));
  const lane = async () => {
    for (let fill = next(); fill !== undefined; fill = next()) {
      for (;;) {
        const outcome = await client.send(fill.route, fill.payload);
        if (outcome.accepted) break;
        if (outcome.code !== 'rate_limited') throw new Error(`relay refused: ${outcome.code} ${outcome.message}`);
      }
    }
  };
  try {
    await Promise.all([...Array.from({ length: inFlight }, lane), ...(alongside === undefined ? [] : [alongside()])]);
  } finally {
    client.close();
  }
}

/** Bytes as MiB with one decimal. */
export function mib(bytes: number): string {
  return (bytes / (1024 * 1024)).toFixed(1);
}
