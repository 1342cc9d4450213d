/**
 * The syncs the stores' durability rests on (DESIGN.md, "Durable files" and "The mailbox
 * on disk"): the fdatasync of a journal after an append, before the commit is answered,
 * and after a failed append is cut back, before the failure is; the fsync of an atomic
 * write's temp file before its rename, and of the directory after it. They are called
 * through `syncs` so that a test can watch each one happen before the answer
 * (test/store/sync.test.ts): no crash a test can cause loses a write that was never
 * synced (SIGKILL leaves the page cache; a fault point fails the step before the sync),
 * so without watching them, a lost sync passes every other test. Nothing but those tests
 * replaces them.
 */
import fs, { fdatasyncSync } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';

export const syncs = {
  /** fdatasync(2), off the event loop: the file's data (and its size) are on the device. */
  data(fd: number): Promise<void> {
    return new Promise((resolve, reject) => fs.fdatasync(fd, (err) => (err ? reject(err) : resolve())));
  },
  /** fdatasync(2) on the event loop, where the caller cannot wait (a failed append cut back before the failure is reported). */
  dataNow(fd: number): void {
    fdatasyncSync(fd);
  },
  /** fsync(2) of an open file or directory: its content, or the names it holds, are on the device. */
  handle(handle: FileHandle): Promise<void> {
    return handle.sync();
  },
};
