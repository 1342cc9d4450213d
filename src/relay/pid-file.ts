/**
 * `<db>/relay.pid`: which process serves a durable relay's store, so `status` can show it
 * and `relay stop` can stop it. Written once the relay listens, removed when it stops
 * cleanly. A relay killed outright leaves it behind: readers check that the pid still
 * runs, and `relay stop` also checks that it is still that relay's command line.
 */
import { execFile } from 'node:child_process';
import { unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { errnoCode } from '../errors.js';
import { writeFileAtomic } from '../store/atomic.js';
import { peekJson } from '../store/json-store.js';

const pidFileSchema = z.object({
  pid: z.number().int().positive(),
  url: z.string().min(1),
  db: z.string().min(1),
  started_at: z.number().int().nonnegative(),
});
export type RelayPid = z.infer<typeof pidFileSchema>;

export function relayPidPath(db: string): string {
  return join(db, 'relay.pid');
}

/** Durable (temp, fsync, rename, fsync dir): a reader sees the whole record or none. */
export async function writeRelayPid(record: RelayPid): Promise<void> {
  await writeFileAtomic(relayPidPath(record.db), JSON.stringify(record) + '\n', { mode: 0o600 });
}

/** Removes the pid file if it still names `pid` (a newer relay on the store keeps its own). */
export async function removeRelayPid(db: string, pid: number): Promise<void> {
  const current = await readRelayPid(db);
  if (current?.pid !== pid) return;
  await unlink(relayPidPath(db)).catch((err: unknown) => {
    if (errnoCode(err) !== 'ENOENT') throw err;
  });
}

/** The recorded relay, or undefined when there is no usable pid file. Reads only. */
export async function readRelayPid(db: string): Promise<RelayPid | undefined> {
  const read = await peekJson(relayPidPath(db), pidFileSchema);
  return read.kind === 'ok' ? read.value : undefined;
}

/** Signal 0 probes without signalling; EPERM means it runs as someone else. */
export function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return errnoCode(err) === 'EPERM';
  }
}

/**
 * Whether `pid` is still the relay on `db`: its command line (from `ps`, on Linux and
 * macOS alike) runs `relay` with that store. Guards `relay stop` against a pid reused
 * by an unrelated process after the relay died without removing its file.
 */
export function isRelayProcess(record: RelayPid): Promise<boolean> {
  return new Promise((resolve) => {
    execFile('ps', ['-o', 'args=', '-p', String(record.pid)], { timeout: 5_000 }, (err, stdout) => {
      if (err) return resolve(false);
      const args = stdout.trim();
      resolve(/(^|\s)relay(\s|$)/.test(args) && args.includes(record.db));
    });
  });
}
