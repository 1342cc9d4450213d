/**
 * The hand-written Prometheus exposition (relay/metrics.ts) and the relay's own metrics
 * (relay/relay-metrics.ts): exact output, escaping checked by an independent parser of
 * the 0.0.4 text format over random strings, cumulative histogram buckets, the summary
 * line's deltas, and expiry counted by a relay with an injected clock.
 */
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { REFUSAL_CODES } from '../../src/errors.js';
import { Counter, escapeHelp, escapeLabelValue, formatValue, Histogram, MetricsRegistry, renderExposition, type MetricFamily } from '../../src/relay/metrics.js';
import { COMMIT_BUCKETS, RelayMetrics, type RelayGauges } from '../../src/relay/relay-metrics.js';
import type { RelayServer } from '../../src/relay/server.js';
import { startTestRelay } from '../helpers/relay-store.js';
import { newReader, TestClient, until } from '../helpers/relay-test-client.js';

interface ParsedSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

interface Parsed {
  help: Map<string, string>;
  type: Map<string, string>;
  samples: ParsedSample[];
}

function unescape(text: string, escapable: string): string {
  let out = '';
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (c !== '\\') {
      out += c;
      continue;
    }
    const next = text[++i];
    if (next === 'n') out += '\n';
    else if (next !== undefined && escapable.includes(next)) out += next;
    else throw new Error(`bad escape \\${next} in ${JSON.stringify(text)}`);
  }
  return out;
}

/** Label pairs `name="value",…` read one character at a time, as the format's grammar says. */
function parseLabels(text: string): Record<string, string> {
  const labels: Record<string, string> = {};
  let i = 0;
  while (i < text.length) {
    const name = /^[a-zA-Z_][a-zA-Z0-9_]*/.exec(text.slice(i))?.[0];
    if (name === undefined || text.slice(i + name.length, i + name.length + 2) !== '="') throw new Error(`bad label at ${JSON.stringify(text.slice(i))}`);
    i += name.length + 2;
    let raw = '';
    while (text[i] !== '"') {
      if (i >= text.length) throw new Error(`unterminated value in ${JSON.stringify(text)}`);
      if (text[i] === '\\') raw += text[i++];
      raw += text[i++];
    }
    i++;
    if (name in labels) throw new Error(`label ${name} twice`);
    labels[name] = unescape(raw, '\\"');
    if (i < text.length && text[i++] !== ',') throw new Error(`expected a comma in ${JSON.stringify(text)}`);
  }
  return labels;
}

function parseValue(text: string): number {
  if (text === '+Inf') return Infinity;
  if (text === '-Inf') return -Infinity;
  if (text === 'NaN') return NaN;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i.test(text)) throw new Error(`not a float: ${text}`);
  return Number(text);
}

/** An independent reader of the text format: every line a comment or a sample, ended by a line feed (a carriage return is text). */
function parseExposition(text: string): Parsed {
  expect(text.endsWith('\n')).toBe(true);
  const parsed: Parsed = { help: new Map(), type: new Map(), samples: [] };
  for (const line of text.slice(0, -1).split('\n')) {
    const comment = /^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$/s.exec(line);
    if (comment) {
      if (comment[1] === 'HELP') parsed.help.set(comment[2]!, unescape(comment[3]!, '\\'));
      else parsed.type.set(comment[2]!, comment[3]!);
      continue;
    }
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/s.exec(line);
    if (!sample) throw new Error(`not a sample line: ${JSON.stringify(line)}`);
    parsed.samples.push({ name: sample[1]!, labels: parseLabels(sample[2] ?? ''), value: parseValue(sample[3]!) });
  }
  return parsed;
}

/** Any character, with the ones the format gives a meaning to drawn often. */
const TRICKY = fc.oneof(fc.constantFrom('\\', '"', '\n', '\r', 'n', '{', '}', ',', '=', ' ', '#'), fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }));

describe('exposition text', () => {
  it('writes numbers as Go reads them', () => {
    const cases: [number, string][] = [
      [0, '0'],
      [42, '42'],
      [-3, '-3'],
      [0.0005, '0.0005'],
      [1.5e-7, '1.5e-7'],
      [2 ** 53, '9007199254740992'],
      [Infinity, '+Inf'],
      [-Infinity, '-Inf'],
      [NaN, 'NaN'],
    ];
    for (const [value, text] of cases) {
      expect(formatValue(value)).toBe(text);
      expect(Object.is(parseValue(text), value)).toBe(true);
    }
  });

  it('escapes backslash, double quote and line feed in label values, and only backslash and line feed in help', () => {
    expect(escapeLabelValue('plain é ✓')).toBe('plain é ✓');
    expect(escapeLabelValue('a\\b"c\nd')).toBe('a\\\\b\\"c\\nd');
    expect(escapeLabelValue('\\n')).toBe('\\\\n');
    expect(escapeLabelValue('tab\tcr\r')).toBe('tab\tcr\r');
    expect(escapeHelp('say "hi"\\\nbye')).toBe('say "hi"\\\\\\nbye');
  });

  it('renders each family as HELP, TYPE and its samples, exactly', () => {
    const families: MetricFamily[] = [
      { name: 'a_total', help: 'A "count".', type: 'counter', samples: [{ labels: { code: 'x"y' }, value: 2 }] },
      { name: 'b', help: 'B\nline', type: 'gauge', samples: [{ labels: {}, value: 1.5 }] },
      { name: 'c_seconds', help: 'C.', type: 'histogram', buckets: [{ le: 0.5, count: 1 }, { le: Infinity, count: 3 }], sum: 2.25, count: 3 },
    ];
    expect(renderExposition(families)).toBe(
      [
        '# HELP a_total A "count".',
        '# TYPE a_total counter',
        'a_total{code="x\\"y"} 2',
        '# HELP b B\\nline',
        '# TYPE b gauge',
        'b 1.5',
        '# HELP c_seconds C.',
        '# TYPE c_seconds histogram',
        'c_seconds_bucket{le="0.5"} 1',
        'c_seconds_bucket{le="+Inf"} 3',
        'c_seconds_sum 2.25',
        'c_seconds_count 3',
        '',
      ].join('\n'),
    );
    expect(renderExposition([])).toBe('');
  });

  it('gives back any label value and help text through an independent parser', () => {
    fc.assert(
      fc.property(fc.string({ unit: TRICKY }), fc.string({ unit: TRICKY }), fc.nat(), (value, help, count) => {
        const registry = new MetricsRegistry();
        registry.counter('x_total', help, ['v']).inc({ v: value }, count);
        const parsed = parseExposition(registry.render());
        expect(parsed.help.get('x_total')).toBe(help);
        expect(parsed.samples).toEqual([{ name: 'x_total', labels: { v: value }, value: count }]);
      }),
      { numRuns: 1_000 },
    );
  });
});

describe('counters, gauges and histograms', () => {
  it('counts per label set, in a stable order, and starts a counter without labels at 0', () => {
    const registry = new MetricsRegistry();
    const plain = registry.counter('plain_total', 'p');
    const byCode = registry.counter('by_total', 'b', ['code', 'kind']);
    byCode.inc({ kind: 'k', code: 'z' });
    byCode.inc({ code: 'a', kind: 'k' }, 2);
    byCode.inc({ code: 'z', kind: 'k' });
    registry.gauge('g', 'g').set(-4);
    const samples = parseExposition(registry.render()).samples;
    expect(samples).toEqual([
      { name: 'plain_total', labels: {}, value: 0 },
      { name: 'by_total', labels: { code: 'a', kind: 'k' }, value: 2 },
      { name: 'by_total', labels: { code: 'z', kind: 'k' }, value: 2 },
      { name: 'g', labels: {}, value: -4 },
    ]);
    expect(byCode.get({ code: 'z', kind: 'k' })).toBe(2);
    expect(byCode.total()).toBe(4);
    expect(plain.get()).toBe(0);
  });

  it('refuses what the format cannot carry: bad names, wrong labels, a counter going down, bad buckets, a name twice', () => {
    const registry = new MetricsRegistry();
    const counter = registry.counter('ok_total', 'ok', ['code']);
    expect(() => counter.inc({})).toThrow(/takes the labels/);
    expect(() => counter.inc({ code: 'a', other: 'b' })).toThrow(/takes the labels/);
    expect(() => counter.inc({ code: 'a' }, -1)).toThrow(/only goes up/);
    expect(() => counter.inc({ code: 'a' }, NaN)).toThrow(/only goes up/);
    expect(() => registry.counter('ok_total', 'again')).toThrow(/twice/);
    for (const name of ['', '1abc', 'a-b', 'a b', 'é']) expect(() => new Counter(name, 'h'), name).toThrow(/metric name/);
    for (const label of ['le', '__name', '1a', 'a-b', '']) expect(() => new Counter('c_total', 'h', [label]), label).toThrow(/label name/);
    for (const bounds of [[], [1, 1], [2, 1], [0.5, Infinity], [NaN]]) expect(() => new Histogram('h', 'h', bounds), String(bounds)).toThrow(/bucket bounds/);
  });

  it('counts an observation in the first bucket whose bound is at least it, and renders the buckets cumulative', () => {
    const histogram = new Histogram('h_seconds', 'h', [0.1, 1]);
    for (const v of [0.1, 0.05, 0.5, 1, 3, NaN]) histogram.observe(v);
    expect(histogram.family()).toEqual({ name: 'h_seconds', help: 'h', type: 'histogram', buckets: [{ le: 0.1, count: 2 }, { le: 1, count: 4 }, { le: Infinity, count: 5 }], sum: 4.65, count: 5 });
  });

  it('keeps every bucket equal to the observations at or under its bound (random observations)', () => {
    fc.assert(
      fc.property(fc.array(fc.double({ min: 0, max: 3, noNaN: true })), (values) => {
        const histogram = new Histogram('h', 'h', COMMIT_BUCKETS);
        for (const v of values) histogram.observe(v);
        const family = histogram.family();
        if (family.type !== 'histogram') throw new Error('not a histogram');
        expect(family.buckets.map((b) => b.le)).toEqual([...COMMIT_BUCKETS, Infinity]);
        for (const bucket of family.buckets) expect(bucket.count).toBe(values.filter((v) => v <= bucket.le).length);
        expect(family.count).toBe(values.length);
        expect(family.sum).toBeCloseTo(values.reduce((a, b) => a + b, 0), 9);
      }),
      { numRuns: 300 },
    );
  });
});

const STATE: RelayGauges = { connections: 2, routes: 1, messages: 3, bytes: 30 };

describe('the relay metrics', () => {
  it('name every refusal code from the start, and render the state, counts, commit latency and process figures', () => {
    const metrics = new RelayMetrics({ uptimeSeconds: () => 12.5, rssBytes: () => 1_000_000 });
    metrics.accepted();
    metrics.accepted();
    metrics.delivered();
    metrics.acknowledged(2);
    metrics.expired(4);
    metrics.refused('queue_full');
    metrics.committed(0.003);
    metrics.storeRead();
    const idle = parseExposition(new RelayMetrics().render(STATE));
    const parsed = parseExposition(metrics.render(STATE));
    // A fixed set of series, whatever was counted (DESIGN.md "Bounded by construction").
    expect(parsed.samples.map((s) => [s.name, s.labels])).toEqual(idle.samples.map((s) => [s.name, s.labels]));
    expect(parsed.samples).toHaveLength(35);
    const value = (name: string, labels: Record<string, string> = {}) => parsed.samples.find((s) => s.name === name && JSON.stringify(s.labels) === JSON.stringify(labels))?.value;
    expect(value('interlink_relay_connections')).toBe(2);
    expect(value('interlink_relay_routes')).toBe(1);
    expect(value('interlink_relay_queued_messages')).toBe(3);
    expect(value('interlink_relay_queued_bytes')).toBe(30);
    expect(value('interlink_relay_accepted_total')).toBe(2);
    expect(value('interlink_relay_delivered_total')).toBe(1);
    expect(value('interlink_relay_acknowledged_total')).toBe(2);
    expect(value('interlink_relay_expired_total')).toBe(4);
    expect(value('interlink_relay_store_reads_total')).toBe(1);
    for (const code of REFUSAL_CODES) expect(value('interlink_relay_refused_total', { code }), code).toBe(code === 'queue_full' ? 1 : 0);
    expect(value('interlink_relay_commit_seconds_bucket', { le: '0.0025' })).toBe(0);
    expect(value('interlink_relay_commit_seconds_bucket', { le: '0.005' })).toBe(1);
    expect(value('interlink_relay_commit_seconds_count')).toBe(1);
    expect(value('interlink_relay_resident_memory_bytes')).toBe(1_000_000);
    expect(value('interlink_relay_uptime_seconds')).toBe(12.5);
    expect([value('interlink_relay_store_up'), value('interlink_relay_store_outages_total')]).toEqual([1, 0]);
    metrics.storeUp(false);
    expect(parseExposition(metrics.render(STATE)).samples.filter((s) => s.name.startsWith('interlink_relay_store_') && !s.name.includes('reads')).map((s) => s.value)).toEqual([0, 1]);
    // Every sample belongs to a family that has HELP and TYPE.
    for (const sample of parsed.samples) {
      const family = sample.name.replace(/_(bucket|sum|count)$/, '');
      expect(parsed.type.has(sample.name) || parsed.type.get(family) === 'histogram', sample.name).toBe(true);
      expect(parsed.help.has(sample.name) || parsed.help.has(family), sample.name).toBe(true);
    }
  });

  it('summarize what was counted since the previous line, and say nothing when nothing moved', () => {
    const metrics = new RelayMetrics();
    expect(metrics.summary(STATE)).toEqual({ ...STATE, accepted: 0, delivered: 0, acknowledged: 0, expired: 0, refused: 0 });
    expect(metrics.summary(STATE)).toBeUndefined();
    metrics.accepted();
    metrics.refused('bad_frame');
    metrics.refused('too_large');
    expect(metrics.summary(STATE)).toEqual({ ...STATE, accepted: 1, delivered: 0, acknowledged: 0, expired: 0, refused: 2 });
    expect(metrics.summary(STATE)).toBeUndefined();
    // A connection closing moves the state: that is worth a line.
    expect(metrics.summary({ ...STATE, connections: 1 })).toEqual({ ...STATE, connections: 1, accepted: 0, delivered: 0, acknowledged: 0, expired: 0, refused: 0 });
    metrics.delivered();
    metrics.acknowledged(3);
    metrics.expired(5);
    expect(metrics.summary({ ...STATE, connections: 1 })).toMatchObject({ delivered: 1, acknowledged: 3, expired: 5, refused: 0 });
  });
});

describe('a relay counts', () => {
  const DAY = 86_400_000;
  const open: { close: () => Promise<unknown> }[] = [];
  afterEach(async () => {
    for (const thing of open.splice(0).reverse()) await thing.close();
  });

  it('messages that expire, with an injected clock', async () => {
    let now = 1_900_000_000_000;
    const relay = await startTestRelay({ now: () => now, maxAgeMs: 8 * DAY, expireEveryMs: 20 });
    open.push(relay);
    const sender = await TestClient.connect(relay.url);
    open.push(sender);
    const reader = newReader();
    for (let i = 0; i < 3; i++) expect(await sender.send(reader.route, { n: i })).toMatchObject({ type: 'accepted' });
    const expired = () => /^interlink_relay_expired_total (\d+)$/m.exec(relay.renderMetrics())?.[1];
    expect(expired()).toBe('0');
    now += 8 * DAY + 1;
    await until('the expiry counted', () => (expired() === '3' ? true : undefined));
    expect(relay.renderMetrics()).toMatch(/^interlink_relay_queued_messages 0$/m);
  });

  const shared = process.env.INTERLINK_TEST_RELAY_STORE === 'postgres';
  it(`${shared ? 'no store read' : 'one store read per message'} for a reader that keeps up: an acknowledgement reads nothing`, async () => {
    const relay = await startTestRelay();
    open.push(relay);
    const sender = await TestClient.connect(relay.url);
    open.push(sender);
    const receiver = await TestClient.connect(relay.url);
    open.push(receiver);
    const reader = newReader();
    expect(await receiver.auth(reader)).toMatchObject({ type: 'auth_ok' });
    const reads = () => Number(/^interlink_relay_store_reads_total (\d+)$/m.exec(relay.renderMetrics())?.[1]);
    const acknowledged = () => Number(/^interlink_relay_acknowledged_total (\d+)$/m.exec(relay.renderMetrics())?.[1]);
    const count = 40;
    // The reader's first read (at its auth) found the route empty.
    await until('the auth read', () => (reads() === 1 ? true : undefined));
    for (let i = 0; i < count; i++) {
      expect(await sender.send(reader.route, { n: i })).toMatchObject({ type: 'accepted' });
      const [delivered] = (await receiver.waitForDeliveries(i + 1, reader.route)).slice(i);
      receiver.ack(reader.route, [delivered!.id]);
      await until(`acknowledgement ${i} committed`, () => (acknowledged() === i + 1 ? true : undefined));
    }
    expect(receiver.deliveries(reader.route).map((d) => d.payload)).toEqual(Array.from({ length: count }, (_, n) => ({ n })));
    // In process: one read per arrival (each delivering its message), and none for the
    // acknowledgements (before, each acknowledgement read twice: when the window opened, and
    // after the commit). On PostgreSQL a reader that was sent everything before a message
    // is sent that message as its commit returns, unread (DESIGN.md "Where the queues live").
    expect(reads()).toBe(shared ? 1 : 1 + count);
  });
});
