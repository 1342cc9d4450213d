/**
 * Fills a relay process for the memory benchmarks (relay-memory.ts, prometheus.ts): one
 * client sends every payload to one route over `inFlight` lanes, offering a payload again
 * while the relay refuses it `rate_limited`, with `alongside` (a scraper, say) running
 * meanwhile.
 */
import { generateSigningKey } from '../../src/identity/ed25519.js';
import { RelayClient } from '../../src/link/client.js';

export async function fillRelay(url: string, route: string, payloads: readonly Record<string, unknown>[], inFlight: number, alongside?: () => Promise<unknown>): Promise<void> {
  const client = new RelayClient({ url, key: generateSigningKey(), routes: [] });
  client.start();
  await new Promise<void>((resolve) => client.once('connected', () => resolve()));
  let next = 0;
  const lane = async () => {
    while (next < payloads.length) {
      const payload = payloads[next++]!;
      for (;;) {
        const outcome = await client.send(route, payload);
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
