/**
 * `interlink-mcp relay --metrics` as an operator meets it: a relay process with --db,
 * scraped over HTTP after real sends, deliveries, acknowledgements and refusals, with
 * every count checked exactly; the relay_summary line at the default log level; and the
 * flags' refusals.
 */
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runCli, expectOneLine } from '../helpers/cli.js';
import { tempDir } from '../helpers/fixtures.js';
import { reapAll } from '../helpers/process.js';
import { newReader, TestClient, until } from '../helpers/relay-test-client.js';
import { startRelay, type RelayProcess } from '../helpers/spawn-relay.js';
import { sharedStore } from '../helpers/relay-store.js';

const LISTENING = /^interlink relay listening on ws:\/\/127\.0\.0\.1:\d+ \(durable: .*\)$/;
const METRICS = /^metrics on (http:\/\/127\.0\.0\.1:\d+\/metrics)$/;

let dir: { path: string; remove: () => Promise<void> };
const clients: TestClient[] = [];
beforeEach(async () => (dir = await tempDir('interlink-relay-metrics-')));
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.terminate()));
  await reapAll();
  await dir.remove();
});
afterAll(reapAll);

async function connect(url: string, options: { autoAck?: boolean } = {}): Promise<TestClient> {
  const client = await TestClient.connect(url, options);
  clients.push(client);
  return client;
}

/** The relay with metrics on a free loopback port and a summary every second, at the default log level. */
async function relayWithMetrics(): Promise<{ relay: RelayProcess; metricsUrl: string }> {
  const relay = await startRelay({ db: join(dir.path, 'db'), args: ['--metrics', '127.0.0.1:0', '--summary-every', '1s'], env: { INTERLINK_LOG: '' } });
  // The listening line, the relay's key, then the metrics address.
  await relay.child.waitForLines(3);
  expect(relay.child.lines[0]).toMatch(LISTENING);
  const metricsUrl = METRICS.exec(relay.child.lines[2]!)?.[1];
  if (metricsUrl === undefined) throw new Error(`unexpected third line ${JSON.stringify(relay.child.lines[2])}`);
  return { relay, metricsUrl };
}

/** Every unlabelled sample, and the labelled ones under `name{labels}`, from one scrape. */
async function scrape(url: string): Promise<Map<string, number>> {
  const res = await fetch(url);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
  const samples = new Map<string, number>();
  for (const line of (await res.text()).split('\n')) {
    const match = /^([a-z_]+(?:\{[^}]*\})?) (\S+)$/.exec(line);
    if (match) samples.set(match[1]!, Number(match[2]!.replace('+Inf', 'Infinity')));
  }
  return samples;
}

/** Scrapes until `check` holds, or fails at the deadline. */
async function scrapeUntil(url: string, what: string, check: (samples: Map<string, number>) => boolean, timeoutMs = 10_000): Promise<Map<string, number>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const samples = await scrape(url);
    if (check(samples)) return samples;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify([...samples])}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The relay_summary lines on stderr so far, as objects. */
function summaries(relay: RelayProcess): Record<string, number>[] {
  return relay.child
    .stderr()
    .split('\n')
    .filter((line) => line.includes('"relay_summary"'))
    .map((line) => JSON.parse(line) as Record<string, number>);
}

function summed(lines: Record<string, number>[], key: string): number {
  return lines.reduce((sum, line) => sum + (line[key] ?? 0), 0);
}

describe('relay --metrics', () => {
  it('counts what the relay did, exactly, and logs it in relay_summary lines at the default level', async () => {
    const { relay, metricsUrl } = await relayWithMetrics();
    const reader = newReader();
    const sender = await connect(relay.url);
    const payloads = [{ n: 1 }, { n: 2, text: 'two' }, { n: 3, text: 'é' }];
    for (const payload of payloads) expect(await sender.send(reader.route, payload)).toMatchObject({ type: 'accepted' });
    sender.raw('not json');
    sender.ack(reader.route, [1]);
    await sender.when('two refusals', () => (sender.refusals().length === 2 ? true : undefined));
    expect(sender.refusals().map((r) => r.code)).toEqual(['bad_frame', 'not_authenticated']);

    const queued = await scrape(metricsUrl);
    const bytes = payloads.reduce((sum, p) => sum + Buffer.byteLength(JSON.stringify(p)), 0);
    expect(Object.fromEntries([...queued].filter(([name]) => /_(connections|routes|queued_messages|queued_bytes|accepted_total)$/.test(name)))).toEqual({
      interlink_relay_connections: 1,
      interlink_relay_routes: 1,
      interlink_relay_queued_messages: 3,
      interlink_relay_queued_bytes: bytes,
      interlink_relay_accepted_total: 3,
    });

    const readerClient = await connect(relay.url, { autoAck: true });
    expect(await readerClient.auth(reader)).toMatchObject({ type: 'auth_ok' });
    await readerClient.waitForDeliveries(3);
    const after = await scrapeUntil(metricsUrl, 'three acknowledgements committed', (s) => s.get('interlink_relay_acknowledged_total') === 3);
    expect(after.get('interlink_relay_connections')).toBe(2);
    expect(after.get('interlink_relay_routes')).toBe(0);
    expect(after.get('interlink_relay_queued_messages')).toBe(0);
    expect(after.get('interlink_relay_queued_bytes')).toBe(0);
    expect(after.get('interlink_relay_accepted_total')).toBe(3);
    expect(after.get('interlink_relay_delivered_total')).toBe(3);
    expect(after.get('interlink_relay_acknowledged_total')).toBe(3);
    expect(after.get('interlink_relay_expired_total')).toBe(0);
    const refused = Object.fromEntries([...after].filter(([name]) => name.startsWith('interlink_relay_refused_total{')));
    expect(refused).toEqual({
      'interlink_relay_refused_total{code="auth_failed"}': 0,
      'interlink_relay_refused_total{code="bad_frame"}': 1,
      'interlink_relay_refused_total{code="not_authenticated"}': 1,
      'interlink_relay_refused_total{code="out_of_order"}': 0,
      'interlink_relay_refused_total{code="queue_full"}': 0,
      'interlink_relay_refused_total{code="rate_limited"}': 0,
      'interlink_relay_refused_total{code="storage"}': 0,
      'interlink_relay_refused_total{code="too_large"}': 0,
    });
    // Three sends and at least one acknowledgement were committed (the journal: with an
    // fdatasync, and the expiry pass at start; PostgreSQL commits no expiry that removes nothing).
    const commits = after.get('interlink_relay_commit_seconds_count')!;
    expect(commits).toBeGreaterThanOrEqual(sharedStore ? 4 : 5);
    expect(after.get('interlink_relay_commit_seconds_bucket{le="+Inf"}')).toBe(commits);
    expect(after.get('interlink_relay_resident_memory_bytes')).toBeGreaterThan(0);
    expect(after.get('interlink_relay_uptime_seconds')).toBeGreaterThan(0);

    // The summary lines, at the default level, add up to the same counts.
    const lines = await until('relay_summary lines that add up', () => {
      const all = summaries(relay);
      return summed(all, 'acknowledged') === 3 ? all : undefined;
    });
    expect(summed(lines, 'accepted')).toBe(3);
    expect(summed(lines, 'delivered')).toBe(3);
    expect(summed(lines, 'refused')).toBe(2);
    expect(summed(lines, 'expired')).toBe(0);
    expect(lines.at(-1)).toMatchObject({ level: 'info', connections: 2, routes: 0, messages: 0, bytes: 0 });
  });

  it('serves GET /metrics only', async () => {
    const { metricsUrl } = await relayWithMetrics();
    expect((await fetch(metricsUrl.replace('/metrics', '/'))).status).toBe(404);
    expect((await fetch(metricsUrl.replace('/metrics', '/metrics/x'))).status).toBe(404);
    const post = await fetch(metricsUrl, { method: 'POST', body: 'x' });
    expect(post.status).toBe(405);
    expect(post.headers.get('allow')).toBe('GET, HEAD');
    expect((await fetch(`${metricsUrl}?x=1`)).status).toBe(200);
  });

  it('refuses a taken metrics address, a malformed one and a summary interval that is not a duration, in one line', async () => {
    const { metricsUrl } = await relayWithMetrics();
    const taken = new URL(metricsUrl).host;
    const env = { ...process.env, INTERLINK_LOG: '' };
    const busy = await runCli(['relay', '--addr', '127.0.0.1:0', '--metrics', taken], env);
    expect(expectOneLine(busy, 1)).toContain(`--metrics ${taken}: address in use`);
    expect(busy.stdout).toBe('');
    for (const [args, says] of [
      [['--metrics', 'nonsense'], '--metrics "nonsense": expected HOST:PORT'],
      [['--summary-every', '0'], '--summary-every "0" is not a duration'],
    ] as const) {
      expect(expectOneLine(await runCli(['relay', '--addr', '127.0.0.1:0', ...args], env), 64, args.join(' '))).toContain(says);
    }
  });
});
