/** How a failure of the disk reads as a `storage` error (src/errors.ts, asStorageError). */
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { asStorageError, InterlinkError } from '../src/errors.js';
import { tempDir } from './helpers/fixtures.js';

describe('asStorageError', () => {
  it("names the file, the errno code and the system's words for it, without the path Node adds", async () => {
    const dir = await tempDir();
    try {
      const err = await open(join(dir.path, 'missing', 'x'), 'r').catch((e: unknown) => e);
      const storage = asStorageError(err, '/state/mailbox/k/s1.json');
      expect(storage.code).toBe('storage');
      expect(storage.message).toBe('cannot use /state/mailbox/k/s1.json (ENOENT: no such file or directory)');
      expect(storage.cause).toBe(err);
    } finally {
      await dir.remove();
    }
  });

  it('keeps the code alone when the message is not Node\'s, the message when there is no code, and an InterlinkError as it is', () => {
    expect(asStorageError(Object.assign(new Error('disk on fire'), { code: 'EIO' }), '/f').message).toBe('cannot use /f (EIO)');
    expect(asStorageError(new Error('short write: 3 of 9 bytes'), '/f').message).toBe('cannot use /f (short write: 3 of 9 bytes)');
    const own = new InterlinkError('busy', '/f.lock is held');
    expect(asStorageError(own, '/f')).toBe(own);
  });
});
