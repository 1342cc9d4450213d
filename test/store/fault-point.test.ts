/**
 * Fault points (src/store/fault-point.ts): INTERLINK_FAULT_AT makes a named write or sync
 * throw the error the kernel would, from the n-th passage, a bounded number of times or
 * while a file exists; and the stores meet it as a failed commit that leaves nothing
 * behind. The variable is read at module load, so each case loads the modules afresh.
 */
import { readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { message, newIdentity, tempDir } from '../helpers/fixtures.js';

let dir: { path: string; remove: () => Promise<void> };

beforeEach(async () => {
  dir = await tempDir();
});
afterEach(async () => {
  vi.unstubAllEnvs();
  // The modules loaded with a fault are dropped: the next file importing them (the unit
  // project shares one module registry per worker) loads them afresh, without it.
  vi.resetModules();
  await dir.remove();
});

/** The modules as a process started with INTERLINK_FAULT_AT=`spec` has them. */
async function loadWith(spec: string | undefined) {
  vi.stubEnv('INTERLINK_FAULT_AT', spec ?? '');
  vi.resetModules();
  return {
    ...(await import('../../src/store/fault-point.js')),
    ...(await import('../../src/store/atomic.js')),
    Mailbox: (await import('../../src/mailbox/mailbox.js')).Mailbox,
  };
}

/** What `fn` throws, or undefined. */
function thrown(fn: () => void): (Error & { code?: string; errno?: number; syscall?: string }) | undefined {
  try {
    fn();
    return undefined;
  } catch (err) {
    return err as Error;
  }
}

describe('faultPoint', () => {
  it('does nothing when unset, or at another point', async () => {
    const unset = await loadWith(undefined);
    for (let i = 0; i < 3; i++) expect(thrown(() => unset.faultPoint('mailbox.append.sync', 'fdatasync'))).toBeUndefined();
    const other = await loadWith('outbox.append.sync');
    expect(thrown(() => other.faultPoint('mailbox.append.sync', 'fdatasync'))).toBeUndefined();
  });

  it('throws the named errno like a system error, from the n-th passage, count times', async () => {
    const { faultPoint } = await loadWith('mailbox.append.sync@2:ENOSPC*2');
    const at = () => thrown(() => faultPoint('mailbox.append.sync', 'fdatasync'));
    expect(at()).toBeUndefined();
    const err = at();
    expect(err).toMatchObject({ code: 'ENOSPC', errno: -28, syscall: 'fdatasync' });
    expect(err?.message).toBe('ENOSPC: no space left on device, fdatasync (injected by INTERLINK_FAULT_AT at mailbox.append.sync)');
    expect(at()?.code).toBe('ENOSPC');
    expect(at()).toBeUndefined();
    expect(at()).toBeUndefined();
  });

  it('throws EIO, without limit, only while the named file exists', async () => {
    const flag = join(dir.path, 'the disk fails');
    const { faultPoint } = await loadWith(`atomic.write while ${flag}`);
    const at = () => thrown(() => faultPoint('atomic.write', 'write'))?.code;
    expect(at()).toBeUndefined();
    await writeFile(flag, '');
    expect([at(), at(), at()]).toEqual(['EIO', 'EIO', 'EIO']);
    await rm(flag);
    expect(at()).toBeUndefined();
  });
});

describe('a store meeting a fault point', () => {
  const sender = newIdentity(71);
  const receiver = newIdentity(72);

  for (const step of ['write', 'sync'] as const) {
    it(`fails the commit whose journal ${step} fails with storage naming the file, keeps nothing of it, and commits the next`, async () => {
      const { Mailbox } = await loadWith(`mailbox.append.${step}*1`);
      const path = join(dir.path, 'mailbox', receiver.key, 's1.json');
      const mailbox = await Mailbox.open(path);
      const lost = message(sender, receiver, { text: 'lost' });
      await expect(mailbox.store(lost)).rejects.toMatchObject({ code: 'storage', message: `cannot use ${path} (EIO: i/o error)` });
      const kept = message(sender, receiver, { text: 'kept' });
      expect((await mailbox.store(kept)).outcome).toBe('stored');
      await mailbox.close();
      const reopened = await Mailbox.open(path);
      expect((await reopened.fetch()).messages.map((m) => m.envelope.text)).toEqual(['kept']);
      await reopened.close();
    });
  }

  it('leaves the old file and no temp file behind when an atomic write fails', async () => {
    const { writeFileAtomic } = await loadWith('atomic.sync@2');
    const path = join(dir.path, 'peers.json');
    await writeFileAtomic(path, 'old');
    await expect(writeFileAtomic(path, 'new')).rejects.toMatchObject({ code: 'EIO', syscall: 'fsync' });
    expect(await readFile(path, 'utf8')).toBe('old');
    expect(await readdir(dir.path)).toEqual(['peers.json']);
  });
});
