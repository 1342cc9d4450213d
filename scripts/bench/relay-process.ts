/** A relay in its own process, as users run it: durable (`--db`) or in memory. */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { cpuSeconds, rssBytes } from './proc.js';

export interface RelayProcess {
  url: string;
  /** The relay's key, as it prints it at start. */
  key: string;
  pid: number;
  /** Resident memory of the relay process, in bytes (Linux /proc). */
  rss(): number;
  /** CPU seconds the relay process used so far (Linux /proc). */
  cpu(): number;
  /** One sample of `interlink_relay_<name>` from its /metrics (started with `metrics: true`). */
  metric(name: string): Promise<number>;
  /** Its /metrics URL, when started with `metrics: true`. */
  metricsUrl: string | undefined;
  stop(): Promise<void>;
}

export interface RelayProcessOptions {
  /** Serve /metrics on a free loopback port. */
  metrics?: boolean;
  /** More `relay` flags. */
  flags?: readonly string[];
  /** Flags for node itself, before the program (e.g. `--import` of a module to preload). */
  nodeArgs?: readonly string[];
  /** Run it under `node --cpu-prof`, writing the profile here when it exits. */
  profileDir?: string;
  /** The profile's file name in `profileDir` (Node's default: CPU.<date>.<pid>…). */
  profileName?: string;
}

/**
 * Node's flags that write a CPU profile into `dir` when the process exits. Named profiles
 * (the per-message budget's) sample every 2 ms instead of every 1 ms: with 33 processes
 * on two cores, the profiler's own interrupts otherwise cost more than the work measured.
 */
export function profileArgs(dir: string | undefined, name?: string): string[] {
  if (dir === undefined) return [];
  return ['--cpu-prof', `--cpu-prof-dir=${dir}`, ...(name !== undefined ? [`--cpu-prof-name=${name}`, '--cpu-prof-interval=2000'] : [])];
}

export async function startRelayProcess(projectRoot: string, dbDir: string | undefined, options: RelayProcessOptions = {}): Promise<RelayProcess> {
  const main = join(projectRoot, 'dist', 'src', 'cli', 'main.js');
  const args = [
    ...profileArgs(options.profileDir, options.profileName),
    ...(options.nodeArgs ?? []),
    main,
    'relay',
    '--addr',
    '127.0.0.1:0',
    ...(dbDir !== undefined ? ['--db', dbDir] : []),
    ...(options.metrics === true ? ['--metrics', '127.0.0.1:0'] : []),
    ...(options.flags ?? []),
  ];
  const child: ChildProcess = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, INTERLINK_LOG: 'error' } });
  const { url, key, metricsUrl } = await new Promise<{ url: string; key: string; metricsUrl: string | undefined }>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const relay = /ws:\/\/127\.0\.0\.1:\d+/.exec(out);
      const key = /^interlink relay key ([A-Za-z0-9_-]{43}) /m.exec(out);
      const metrics = /http:\/\/127\.0\.0\.1:\d+\/metrics/.exec(out);
      if (relay && key && (options.metrics !== true || metrics)) resolve({ url: relay[0], key: key[1]!, metricsUrl: metrics?.[0] });
    });
    child.once('exit', (code) => reject(new Error(`relay exited with ${code} before listening`)));
  });
  const pid = child.pid!;
  return {
    url,
    key,
    pid,
    metricsUrl,
    rss: () => rssBytes(pid),
    cpu: () => cpuSeconds(pid),
    metric: async (name) => {
      if (metricsUrl === undefined) throw new Error('the relay was started without metrics');
      const text = await (await fetch(metricsUrl)).text();
      const line = text.split('\n').find((l) => l.startsWith(`interlink_relay_${name} `));
      if (line === undefined) throw new Error(`no metric interlink_relay_${name}`);
      return Number(line.slice(line.lastIndexOf(' ') + 1));
    },
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        await once(child, 'exit');
      }
    },
  };
}
