/**
 * `npm run bench`: runs every benchmark in one process, prints each as it finishes and
 * rewrites docs/PERFORMANCE.md from the results. A new benchmark is a new file exporting
 * a `Benchmark`, added to BENCHMARKS below.
 *
 *   node dist/scripts/bench/run.js [--only <id>[,<id>…]] [--no-write] [--profile DIR]
 *
 * `--only` runs a subset and never writes the document, which must show one whole run.
 * `--profile DIR` runs the processes a benchmark starts (serve, relay) under
 * `node --cpu-prof`, one .cpuprofile per process in DIR; the document is not written.
 */
import { readFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { cpus, loadavg, release, totalmem, type } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { capacityCurve } from './capacity.js';
import { makeScratch, type Mount } from './disk.js';
import { endToEnd } from './end-to-end.js';
import { relayMemory } from './relay-memory.js';
import { relayThroughput } from './relay-throughput.js';
import { relayFlood } from './relay-flood.js';
import { relayStores } from './relay-stores.js';
import { userPath } from './user-path.js';
import { sealingCost } from './sealing.js';
import { wakeLatency } from './wake.js';
import { groupCommit } from './group-commit.js';
import { mailboxCommit } from './mailbox.js';
import { renderConsole, renderMarkdown, type Benchmark, type MachineInfo, type Section } from './report.js';
import { signatures } from './signatures.js';
import { loadSqlite, SQLITE_MISSING, type SqliteBaseline } from './sqlite.js';

const COMMAND = 'npm run bench';

/** dist/scripts/bench/run.js → the project root. */
const PROJECT_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const DOCUMENT = join(PROJECT_ROOT, 'docs', 'PERFORMANCE.md');
const BENCHMARKS: readonly Benchmark[] = [signatures, mailboxCommit, groupCommit, endToEnd(PROJECT_ROOT), relayMemory(PROJECT_ROOT), relayThroughput(PROJECT_ROOT), relayFlood(PROJECT_ROOT), wakeLatency(PROJECT_ROOT), userPath(PROJECT_ROOT), sealingCost(PROJECT_ROOT), relayStores(PROJECT_ROOT), capacityCurve(PROJECT_ROOT)];

function packageVersion(name: string): string {
  try {
    const text = readFileSync(join(PROJECT_ROOT, 'node_modules', name, 'package.json'), 'utf8');
    const data: unknown = JSON.parse(text);
    return typeof data === 'object' && data !== null && 'version' in data ? String(data.version) : 'unknown';
  } catch {
    return 'not installed';
  }
}

function describeDisk(mount: Mount | undefined): string {
  if (mount === undefined) return 'unknown filesystem';
  return `${mount.type} on ${mount.device} (mounted at ${mount.mountPoint}); temp dirs are created there and removed after the run`;
}

function loadNow(): string {
  return loadavg()[0]!.toFixed(2);
}

function machineInfo(mount: Mount | undefined, loadAtStart: string, sqlite: SqliteBaseline | undefined): MachineInfo {
  const cpu = cpus();
  const speed = cpu[0]?.speed ?? 0;
  return {
    cpu: `${cpu[0]?.model.trim() ?? 'unknown'}${speed > 0 ? ` @ ${speed} MHz` : ''}`,
    cores: cpu.length,
    memory: `${(totalmem() / 2 ** 30).toFixed(1)} GiB`,
    os: `${type()} ${release()}`,
    node: process.version,
    disk: describeDisk(mount),
    libraries: [
      `@noble/ed25519 ${packageVersion('@noble/ed25519')}`,
      `@noble/hashes ${packageVersion('@noble/hashes')}`,
      sqlite === undefined ? 'better-sqlite3 not installed (SQLite baseline skipped)' : `better-sqlite3 ${packageVersion('better-sqlite3')} (SQLite ${sqlite.sqliteVersion})`,
      `OpenSSL ${process.versions.openssl ?? 'unknown'}`,
    ].join(', '),
    load: `${loadAtStart} at the start, ${loadNow()} at the end (${cpu.length} cores)`,
  };
}

function selectBenchmarks(only: string | undefined): readonly Benchmark[] {
  if (only === undefined) return BENCHMARKS;
  const ids = only.split(',').map((s) => s.trim());
  const unknown = ids.filter((id) => !BENCHMARKS.some((b) => b.id === id));
  if (unknown.length > 0) {
    throw new Error(`unknown benchmark ${unknown.join(', ')}; choose from ${BENCHMARKS.map((b) => b.id).join(', ')}`);
  }
  return BENCHMARKS.filter((b) => ids.includes(b.id));
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { only: { type: 'string' }, 'no-write': { type: 'boolean', default: false }, profile: { type: 'string' } } });
  const selected = selectBenchmarks(values.only);
  const loadAtStart = loadNow();
  const scratch = await makeScratch(PROJECT_ROOT);
  console.log(`interlink benchmarks: Node ${process.version}, load average ${loadAtStart}`);
  console.log(`scratch: ${scratch.path} (${describeDisk(scratch.mount)})`);
  const sqlite = await loadSqlite();
  if (sqlite === undefined) console.log(`SQLite baseline: skipped, ${SQLITE_MISSING}`);

  const started = performance.now();
  const sections: Section[] = [];
  try {
    for (const benchmark of selected) {
      const section = await benchmark.run({
        scratch: scratch.path,
        progress: (message) => process.stderr.write(`  … ${message}\n`),
        ...(values.profile !== undefined && { profileDir: resolve(values.profile) }),
      });
      console.log(renderConsole(section));
      sections.push(section);
    }
  } finally {
    await scratch.remove();
  }
  const seconds = (performance.now() - started) / 1000;
  const machine = machineInfo(scratch.mount, loadAtStart, sqlite);
  console.log(`\n${machine.cpu} × ${machine.cores}; load average ${machine.load}`);

  const checks = sections.flatMap((s) => s.checks);
  const failed = checks.filter((c) => c.pass === false).length;
  const skipped = checks.filter((c) => c.pass === 'skipped').length;
  const met = checks.length - failed - skipped;
  console.log(`\n${met} of ${checks.length} targets met${skipped > 0 ? `, ${skipped} skipped` : ''}; ${seconds.toFixed(1)} s in total.`);
  if (selected.length === BENCHMARKS.length && !values['no-write'] && values.profile === undefined) {
    const date = new Date().toISOString().slice(0, 10);
    await writeFile(DOCUMENT, renderMarkdown(sections, machine, date, COMMAND, seconds));
    console.log(`wrote ${DOCUMENT}`);
  }
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? (err.stack ?? err.message) : String(err));
  process.exitCode = 1;
});
