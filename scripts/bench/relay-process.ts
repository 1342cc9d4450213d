/** A relay in its own process, as users run it: durable (`--db`) or in memory. */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { rssBytes } from './proc.js';

export interface RelayProcess {
  url: string;
  pid: number;
  /** Resident memory of the relay process, in bytes (Linux /proc). */
  rss(): number;
  stop(): Promise<void>;
}

export async function startRelayProcess(projectRoot: string, dbDir: string | undefined): Promise<RelayProcess> {
  const main = join(projectRoot, 'dist', 'src', 'cli', 'main.js');
  const args = [main, 'relay', '--addr', '127.0.0.1:0', ...(dbDir !== undefined ? ['--db', dbDir] : [])];
  const child: ChildProcess = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, INTERLINK_LOG: 'error' } });
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const match = /ws:\/\/127\.0\.0\.1:\d+/.exec(out);
      if (match) resolve(match[0]);
    });
    child.once('exit', (code) => reject(new Error(`relay exited with ${code} before listening`)));
  });
  const pid = child.pid!;
  return {
    url,
    pid,
    rss: () => rssBytes(pid),
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        await once(child, 'exit');
      }
    },
  };
}
