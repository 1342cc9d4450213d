/**
 * Relay memory against the payload it holds (issue 38, point 4; DESIGN.md "Bounded by
 * construction"): a relay process on a journal store (`--db`) is filled with N MiB of
 * payload for 16 readers that are away, its VmRSS and VmHWM read from /proc during the
 * fill and after; then it is restarted on the same store and measured again; then the
 * readers come back and every message is delivered and acknowledged. Prints each figure
 * and its growth over the idle relay divided by the queued payload.
 *
 *   npm run build && node dist/scripts/bench/relay-memory-ratio.js [--mib 128,500]
 *     [--non-ascii 0.25] [--small-share 0.5] [--small-bytes 4096] [--memory] [--flag F]...
 *
 * By default half the bytes are in payloads of 4 KiB (a message) and half in payloads of
 * 256 to 512 KiB (a message carrying a file). `--non-ascii` is the share of payloads that
 * hold a character beyond Latin-1 (an em dash), which V8 would keep as a string of two
 * bytes per character. `--memory` measures a relay without `--db` (no restart); `--flag`
 * passes a flag to `relay`. Linux only (/proc).
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { startRelayProcess, type RelayProcess } from './relay-process.js';
import { fillRelayWith, mib } from './relay-fill.js';
import { generateSigningKey, type SigningKey } from '../../src/identity/ed25519.js';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { RelayClient, type Delivery } from '../../src/link/client.js';

const MiB = 1024 * 1024;
const ROUTES = 16;
const IN_FLIGHT = 32;
/** How long the relay is left alone before a figure is read: time for a collection after the work. */
const SETTLE_MS = 2000;

/** VmRSS and VmHWM of a process, in bytes. */
export function memoryOf(pid: number): { rss: number; hwm: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB$`, 'm').exec(status)?.[1] ?? NaN) * 1024;
  return { rss: field('VmRSS'), hwm: field('VmHWM') };
}

/** An envelope-shaped payload of about `bytes` of JSON. */
function payloadOf(bytes: number, nonAscii: boolean): Record<string, unknown> {
  const body = randomBytes(Math.ceil((bytes * 3) / 4)).toString('base64url').slice(0, Math.max(0, bytes - 160));
  return { v: 4, from: 'bench', to_session: 'away', ts: Date.now(), subject: nonAscii ? 'notes — draft' : 'notes - draft', sealed: body };
}

/** Payload sizes adding up to about `total` bytes: `smallShare` of them in payloads of `smallBytes`, the rest in 256–512 KiB ones, interleaved. */
function sizesFor(total: number, smallShare: number, smallBytes: number): number[] {
  const sizes: number[] = [];
  let small = 0;
  let large = 0;
  while (small + large < total) {
    if (large * smallShare < small * (1 - smallShare)) {
      const size = 256 * 1024 + Math.floor(Math.random() * 256 * 1024) - 1024;
      large += size;
      sizes.push(size);
    } else {
      small += smallBytes;
      sizes.push(smallBytes);
    }
  }
  return sizes;
}

async function waitFor(ms: number): Promise<void> {
  await new Promise((r) => setTimeout(r, ms));
}

/** The highest VmRSS seen while `work` runs, sampled every 100 ms. */
async function sampled<T>(pid: number, work: Promise<T>): Promise<{ result: T; peakRss: number }> {
  let peakRss = 0;
  const timer = setInterval(() => (peakRss = Math.max(peakRss, memoryOf(pid).rss)), 100);
  try {
    return { result: await work, peakRss };
  } finally {
    clearInterval(timer);
  }
}

interface Row {
  queued: number;
  messages: number;
  idle: number;
  fillPeak: number;
  afterFill: number;
  restartPeak: number;
  afterRestart: number;
  /** VmHWM once every message was delivered and acknowledged (after the restart, if any) */
  drainPeak: number;
}

function routeOf(key: SigningKey): string {
  return `${encodeBase64url(key.publicKey)}#away`;
}

/** Each reader comes back, reads its route and acknowledges every message; resolves with how many came, once `expected` did. */
async function drain(url: string, readers: readonly SigningKey[], expected: number): Promise<number> {
  let received = 0;
  const clients = readers.map((key) => new RelayClient({ url, key, routes: [routeOf(key)] }));
  try {
    await new Promise<void>((resolve) => {
      for (const client of clients) {
        client.on('delivery', (delivery: Delivery) => {
          client.ack(delivery.route, [delivery.id]);
          if (++received === expected) resolve();
        });
        client.start();
      }
    });
    // Acknowledgements still in flight are committed before the figure is read.
    await waitFor(SETTLE_MS);
    return received;
  } finally {
    for (const client of clients) client.close();
  }
}

/** What one measurement fills the relay with. */
export interface FillShape {
  /** payload bytes in all */
  total: number;
  /** the share of payloads holding a character beyond Latin-1 */
  nonAscii: number;
  /** the share of the bytes in small payloads, and their size */
  smallShare: number;
  smallBytes: number;
  /** with `--db` (and a restart on it), or in memory */
  durable: boolean;
  /** more `relay` flags */
  flags: readonly string[];
}

/** Fills a fresh relay as `shape` says, then (durable) restarts it, then delivers everything. */
async function measure(root: string, shape: FillShape): Promise<Row> {
  const db = shape.durable ? await mkdtemp(join(tmpdir(), 'relay-memory-ratio-')) : undefined;
  const options = { flags: ['--max-per-connection', '100000', ...shape.flags] };
  let relay: RelayProcess | undefined;
  try {
    relay = await startRelayProcess(root, db, options);
    const idle = memoryOf(relay.pid).rss;
    const sizes = sizesFor(shape.total, shape.smallShare, shape.smallBytes);
    const readers = Array.from({ length: ROUTES }, () => generateSigningKey());
    const routes = readers.map(routeOf);
    let i = 0;
    /** The payload's JSON as the client sends it: what the relay counts. */
    let queued = 0;
    const next = () => {
      if (i >= sizes.length) return undefined;
      const n = i++;
      const payload = payloadOf(sizes[n]!, Math.random() < shape.nonAscii);
      queued += Buffer.byteLength(JSON.stringify(payload));
      return { route: routes[n % ROUTES]!, payload };
    };
    const fill = await sampled(relay.pid, fillRelayWith(relay.url, next, IN_FLIGHT));
    await waitFor(SETTLE_MS);
    const filled = memoryOf(relay.pid);
    let restarted = { rss: NaN, hwm: NaN };
    if (db !== undefined) {
      await relay.stop();
      relay = await startRelayProcess(root, db, options);
      await waitFor(SETTLE_MS);
      restarted = memoryOf(relay.pid);
    }
    const delivered = await drain(relay.url, readers, sizes.length);
    if (delivered !== sizes.length) throw new Error(`${delivered} of ${sizes.length} messages came back`);
    return { queued, messages: sizes.length, idle, fillPeak: Math.max(filled.hwm, fill.peakRss), afterFill: filled.rss, restartPeak: restarted.hwm, afterRestart: restarted.rss, drainPeak: memoryOf(relay.pid).hwm };
  } finally {
    await relay?.stop();
    if (db !== undefined) await rm(db, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const args = parseArgs({
    options: {
      mib: { type: 'string', default: '128,500' },
      'non-ascii': { type: 'string', default: '0.25' },
      'small-share': { type: 'string', default: '0.5' },
      'small-bytes': { type: 'string', default: '4096' },
      memory: { type: 'boolean', default: false },
      flag: { type: 'string', multiple: true, default: [] },
    },
  });
  const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
  const { values } = args;
  const shape = { nonAscii: Number(values['non-ascii']), smallShare: Number(values['small-share']), smallBytes: Number(values['small-bytes']), durable: !values.memory, flags: values.flag };
  console.log(`relay ${shape.durable ? 'with --db' : 'in memory'}; MiB, and (figure - idle) / queued payload`);
  console.log('queued (messages) | idle | fill peak | after fill | restart peak | after restart | peak when all was delivered');
  for (const size of values.mib.split(',').map(Number)) {
    const row = await measure(root, { ...shape, total: size * MiB });
    const cell = (bytes: number) => (Number.isNaN(bytes) ? '-' : `${mib(bytes)} (${((bytes - row.idle) / row.queued).toFixed(2)})`);
    console.log([`${mib(row.queued)} (${row.messages})`, mib(row.idle), cell(row.fillPeak), cell(row.afterFill), cell(row.restartPeak), cell(row.afterRestart), cell(row.drainPeak)].join(' | '));
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main();
