/**
 * Relay resident memory with 10,000 messages queued for a reader that is away, durable
 * and in memory, beside the same relay idle.
 */
import { mkdtemp } from 'node:fs/promises';
import { join } from 'node:path';
import { startRelayProcess } from './relay-process.js';
import { fillRelay, mib } from './relay-fill.js';
import type { BenchContext, Benchmark, Section } from './report.js';
import { wireOf } from '../../src/envelope/envelope.js';
import { makeEnvelopes, newCorrespondents } from './records.js';
import { formatCount } from './stats.js';

const QUEUED = 10_000;
const IN_FLIGHT = 64;

export function relayMemory(projectRoot: string): Benchmark {
  return {
    id: 'relay-memory',
    async run(context: BenchContext): Promise<Section> {
      const who = newCorrespondents();
      const payloads = makeEnvelopes(who, QUEUED).map((e) => wireOf(e) as unknown as Record<string, unknown>);
      const route = `${who.recipient}#away`;
      const rows: string[][] = [];
      const measured: Record<string, number> = {};
      for (const mode of ['durable', 'in memory'] as const) {
        context.progress(`relay memory: ${mode}`);
        const db = mode === 'durable' ? await mkdtemp(join(context.scratch, 'relay-mem-')) : undefined;
        // One connection fills the queue: its fair share (5,000 messages by default) is raised to hold them all.
        const relay = await startRelayProcess(projectRoot, db, { flags: ['--max-per-connection', String(QUEUED)] });
        try {
          const idle = relay.rss();
          await fillRelay(relay.url, route, payloads, IN_FLIGHT);
          const loaded = relay.rss();
          measured[mode] = loaded;
          rows.push([mode, mib(idle), mib(loaded), mib(loaded - idle), formatCount(Math.round((loaded - idle) / QUEUED))]);
        } finally {
          await relay.stop();
        }
      }
      return {
        title: 'Relay memory with 10,000 queued messages',
        measures: `Resident set size (VmRSS) of a relay process, idle and after ${formatCount(QUEUED)} signed envelopes of about 1 KiB were accepted for one route whose reader is away. Durable (--db) and in memory.`,
        tables: [{ headers: ['Relay:', 'Idle MiB', 'With 10,000 queued MiB', 'Growth MiB', 'Bytes per queued message'], rows }],
        checks: [],
        notes: [`Durable / in memory, resident with 10,000 queued: ${(measured['durable']! / measured['in memory']!).toFixed(2)}×.`],
      };
    },
  };
}
