/**
 * Atomic, durable file replacement. After `writeFileAtomic` resolves, a reader sees
 * either the old content or the new content, never a mix, and the new content survives
 * a power loss: the temp file is fsynced before the rename, and the directory after it.
 * Callers that read-modify-write must hold the file's sidecar lock (see lock.ts).
 */
import { randomBytes } from 'node:crypto';
import { writeSync } from 'node:fs';
import { link, mkdir, open, rename, unlink, type FileHandle } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { errnoCode } from '../errors.js';
import { faultPoint } from './fault-point.js';
import { makePrivateDir, PRIVATE_FILE } from './private.js';
import { syncs } from './sync.js';

export interface WriteOptions {
  mode?: number;
}

function tempPathFor(path: string): string {
  return join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`);
}

export async function fsyncDirectory(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await syncs.handle(handle);
  } catch (err) {
    // Some filesystems cannot fsync a directory; the rename is still atomic there.
    if (errnoCode(err) !== 'EINVAL' && errnoCode(err) !== 'EISDIR') throw err;
  } finally {
    await handle.close();
  }
}

/** Content to write: whole, or in pieces never joined whole (a snapshot past V8's longest string). */
export type FileContent = string | Uint8Array | Iterable<string>;
/** Pieces are written in batches of about this many characters. */
const BATCH_CHARS = 1024 * 1024;

/** Writes every byte of `data` at the handle's position, however many writes it takes. */
async function writeAll(handle: FileHandle, data: Uint8Array): Promise<void> {
  for (let done = 0; done < data.length; ) {
    const { bytesWritten } = await handle.write(data, done, data.length - done);
    if (bytesWritten <= 0) throw new Error(`short write: ${done} of ${data.length} bytes`);
    done += bytesWritten;
  }
}

/** Writes `data`; resolves with the bytes written. */
async function writeContent(handle: FileHandle, data: FileContent): Promise<number> {
  if (typeof data === 'string' || data instanceof Uint8Array) {
    await handle.writeFile(data);
    return typeof data === 'string' ? Buffer.byteLength(data) : data.length;
  }
  let bytes = 0;
  let batch = '';
  const flush = async () => {
    const buffer = Buffer.from(batch, 'utf8');
    batch = '';
    await writeAll(handle, buffer);
    bytes += buffer.length;
  };
  for (const piece of data) {
    batch += piece;
    if (batch.length >= BATCH_CHARS) await flush();
  }
  if (batch.length > 0) await flush();
  return bytes;
}

async function writeSyncedTemp(path: string, data: FileContent, options: WriteOptions): Promise<{ temp: string; bytes: number }> {
  await makePrivateDir(dirname(path));
  const temp = tempPathFor(path);
  // O_EXCL does not follow a link; the mode is set again below so no umask can widen it.
  const handle = await open(temp, 'wx', options.mode ?? PRIVATE_FILE);
  let bytes: number;
  try {
    await handle.chmod(options.mode ?? PRIVATE_FILE);
    faultPoint('atomic.write', 'write');
    bytes = await writeContent(handle, data);
    faultPoint('atomic.sync', 'fsync');
    await syncs.handle(handle);
  } catch (err) {
    await handle.close();
    await unlink(temp).catch(() => undefined);
    throw err;
  }
  await handle.close();
  return { temp, bytes };
}

/** Resolves with the bytes written. */
export async function writeFileAtomic(path: string, data: FileContent, options: WriteOptions = {}): Promise<number> {
  const { temp, bytes } = await writeSyncedTemp(path, data, options);
  try {
    await rename(temp, path);
  } catch (err) {
    await unlink(temp).catch(() => undefined);
    throw err;
  }
  await fsyncDirectory(dirname(path));
  return bytes;
}

/**
 * Creates `path` with the given content only if nothing exists there. Returns false,
 * writing nothing, when the file already exists. Durable like `writeFileAtomic`.
 */
export async function writeFileExclusive(path: string, data: string | Uint8Array, options: WriteOptions = {}): Promise<boolean> {
  const { temp } = await writeSyncedTemp(path, data, options);
  try {
    await link(temp, path);
  } catch (err) {
    if (errnoCode(err) === 'EEXIST') return false;
    throw err;
  } finally {
    await unlink(temp).catch(() => undefined);
  }
  await fsyncDirectory(dirname(path));
  return true;
}

/**
 * Writes all of `buffer` at `position` (or the file position), however many writes it
 * takes: write(2) may write less than asked (a nearly full disk), and a short write
 * must never pass for a complete one.
 */
export function writeFully(fd: number, buffer: Buffer, position?: number): void {
  let done = 0;
  while (done < buffer.length) {
    const written = writeSync(fd, buffer, done, buffer.length - done, position === undefined ? null : position + done);
    if (written <= 0) throw new Error(`short write: ${done} of ${buffer.length} bytes`);
    done += written;
  }
}
