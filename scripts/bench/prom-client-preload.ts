/**
 * Loaded into a relay process with `node --import` by prometheus.ts, to make it the relay
 * it would be on prom-client: loads prom-client, registers the relay's metric set in a
 * registry of its own (prom-client-relay.ts), counts every event into it as well, and
 * serves it on /metrics instead of the hand-written exposition. Benchmark only: nothing in
 * src/ knows of it.
 */
import { RelayMetrics, type RelayGauges } from '../../src/relay/relay-metrics.js';
import type { RefusalCode } from '../../src/errors.js';
import { loadPromClient, PROM_CLIENT_MISSING, promRelayRegistry } from './prom-client-relay.js';

const client = await loadPromClient();
if (client === undefined) throw new Error(PROM_CLIENT_MISSING);
const idle: RelayGauges = { connections: 0, routes: 0, messages: 0, bytes: 0 };
const prom = promRelayRegistry(client, new RelayMetrics().render(idle), []);
const own = RelayMetrics.prototype;
const inc = (name: string, by = 1, labels: Record<string, string> = {}) => prom.metric(name).inc!(labels, by);

/** Each counting method of RelayMetrics, doing its own counting and then prom-client's. */
function also<K extends 'accepted' | 'delivered' | 'acknowledged' | 'expired' | 'refused' | 'storeRead' | 'storeUp' | 'committed'>(key: K, count: (...args: Parameters<RelayMetrics[K]>) => void): void {
  const original = own[key] as (this: RelayMetrics, ...args: Parameters<RelayMetrics[K]>) => void;
  (own[key] as unknown) = function (this: RelayMetrics, ...args: Parameters<RelayMetrics[K]>): void {
    original.apply(this, args);
    count(...args);
  };
}
also('accepted', () => inc('accepted_total'));
also('delivered', () => inc('delivered_total'));
also('acknowledged', (count: number) => inc('acknowledged_total', count));
also('expired', (count: number) => inc('expired_total', count));
also('refused', (code: RefusalCode) => inc('refused_total', 1, { code }));
also('storeRead', () => inc('store_reads_total'));
also('storeUp', (up: boolean) => {
  prom.metric('store_up').set!({}, up ? 1 : 0);
  if (!up) inc('store_outages_total');
});
also('committed', (seconds: number) => prom.metric('commit_seconds').observe!(seconds));
// The scrape path awaits what the render gives (server.ts scrapeMetrics is async), so a
// promise of the text serves; nothing else in a benchmark's relay renders.
own.render = function (now: RelayGauges): string {
  return prom.render(now) as unknown as string;
};
