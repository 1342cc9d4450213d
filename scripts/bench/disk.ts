/**
 * Where the storage benchmarks write, and how many syncs they cause.
 *
 * fsync on tmpfs returns at once, which would make every durable store look free, so the
 * scratch directory must be on a real filesystem: the OS temp dir when it is, otherwise
 * `.cache/bench` in the project (gitignored).
 */
import fs from 'node:fs';
import { readFileSync, realpathSync } from 'node:fs';
import { mkdir, mkdtemp, open, rm, type FileHandle } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

const MEMORY_FILESYSTEMS = new Set(['tmpfs', 'ramfs', 'devtmpfs']);

export interface Mount {
  device: string;
  mountPoint: string;
  type: string;
}

/** /proc/mounts escapes spaces and a few other bytes as \ooo. */
function unescapeMountField(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));
}

/** The mount holding `path`: the longest mount point that is a prefix of its real path. */
export function mountOf(path: string): Mount | undefined {
  let text: string;
  try {
    text = readFileSync('/proc/mounts', 'utf8');
  } catch {
    return undefined;
  }
  const real = realpathSync(path);
  let best: Mount | undefined;
  for (const line of text.split('\n')) {
    const [device, mountPointRaw, type] = line.split(' ');
    if (device === undefined || mountPointRaw === undefined || type === undefined) continue;
    const mountPoint = unescapeMountField(mountPointRaw);
    const contains = mountPoint === '/' || real === mountPoint || real.startsWith(mountPoint + '/');
    // Later lines shadow earlier ones at the same mount point.
    if (contains && (best === undefined || mountPoint.length >= best.mountPoint.length)) best = { device, mountPoint, type };
  }
  return best;
}

export interface Scratch {
  path: string;
  mount: Mount | undefined;
  remove(): Promise<void>;
}

export async function makeScratch(projectRoot: string): Promise<Scratch> {
  const tempMount = mountOf(tmpdir());
  let base = tmpdir();
  if (tempMount === undefined || MEMORY_FILESYSTEMS.has(tempMount.type)) {
    base = join(projectRoot, '.cache', 'bench');
    await mkdir(base, { recursive: true });
  }
  const path = await mkdtemp(join(base, 'interlink-bench-'));
  const mount = mountOf(path);
  if (mount !== undefined && MEMORY_FILESYSTEMS.has(mount.type)) {
    throw new Error(`${path} is on ${mount.type}; fsync would cost nothing there and the storage figures would be meaningless`);
  }
  return { path, mount, remove: () => rm(path, { recursive: true, force: true }) };
}

export interface SyncCounts {
  /** fdatasync calls (FileHandle.datasync or fs.fdatasync): journal appends. */
  datasyncs: number;
  /** FileHandle.sync calls: atomic file replacement (compaction) and directory syncs. */
  syncs: number;
  /** Wall time spent inside both, from call to resolution. */
  ms: number;
}

const counts: SyncCounts = { datasyncs: 0, syncs: 0, ms: 0 };
let installed = false;

/**
 * Counts and times every FileHandle.sync/datasync in this process by wrapping the
 * prototype methods. Used only by the benchmarks; the behaviour of the calls is unchanged.
 */
export async function installSyncProbe(dir: string): Promise<void> {
  if (installed) return;
  const handle = await open(join(dir, 'probe'), 'w');
  const proto: FileHandle = Object.getPrototypeOf(handle);
  await handle.close();
  const originalDatasync = proto.datasync;
  const originalSync = proto.sync;
  proto.datasync = async function (this: FileHandle): Promise<void> {
    const start = performance.now();
    try {
      return await originalDatasync.call(this);
    } finally {
      counts.datasyncs++;
      counts.ms += performance.now() - start;
    }
  };
  proto.sync = async function (this: FileHandle): Promise<void> {
    const start = performance.now();
    try {
      return await originalSync.call(this);
    } finally {
      counts.syncs++;
      counts.ms += performance.now() - start;
    }
  };
  // The journal append syncs a raw descriptor through fs.fdatasync (callback API).
  const originalFdatasync = fs.fdatasync;
  const probed = (fd: number, callback: (err: NodeJS.ErrnoException | null) => void): void => {
    const start = performance.now();
    originalFdatasync(fd, (err) => {
      counts.datasyncs++;
      counts.ms += performance.now() - start;
      callback(err);
    });
  };
  fs.fdatasync = probed as typeof fs.fdatasync;
  installed = true;
}

export function syncCounts(): SyncCounts {
  return { ...counts };
}

export function syncsSince(before: SyncCounts): SyncCounts {
  return { datasyncs: counts.datasyncs - before.datasyncs, syncs: counts.syncs - before.syncs, ms: counts.ms - before.ms };
}
