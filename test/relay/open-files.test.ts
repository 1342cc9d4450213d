/**
 * The relay's open-files limit (relay/open-files.ts): a relay process started with a low
 * soft limit runs with its hard limit (Node raises it as it starts), logs it, and warns
 * when its connection cap does not fit in it.
 */
import { existsSync, readFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { openFilesWarning, parseOpenFiles, RESERVED_FILES } from '../../src/relay/open-files.js';
import { MAIN } from '../helpers/mcp.js';
import { reapAll, spawnNode } from '../helpers/process.js';

afterAll(reapAll);

const hasProc = existsSync('/proc/self/limits');

describe('open files', () => {
  it('reads the limits line, unlimited included, and warns only when the cap and the reserve do not fit', () => {
    const text = 'Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\n';
    expect(parseOpenFiles(text)).toEqual({ soft: 1024, hard: 524288 });
    expect(parseOpenFiles('Max open files            unlimited            unlimited            files')).toEqual({ soft: Infinity, hard: Infinity });
    expect(parseOpenFiles('Max processes 1 1')).toBeUndefined();
    expect(openFilesWarning({ soft: 1024 + RESERVED_FILES, hard: 4096 }, 1024)).toBeUndefined();
    expect(openFilesWarning({ soft: 1024, hard: 1024 }, 1024)).toMatch(/hold 1024 connections but open only 1024 files: past about 960 connections .*LimitNOFILE=1088/);
    expect(openFilesWarning(undefined, 1024)).toBeUndefined();
  });

  it.skipIf(!hasProc)('a relay started with a low soft limit runs with the hard one, and says so', async () => {
    const relay = spawnNode(MAIN, ['relay', '--addr', '127.0.0.1:0'], { INTERLINK_LOG: 'info' }, 'ulimit -Sn 256');
    await relay.waitForLines(2);
    const own = parseOpenFiles(readFileSync(`/proc/${relay.process.pid}/limits`, 'utf8'))!;
    expect(own.soft).toBe(own.hard);
    expect(own.soft).toBeGreaterThan(256);
    expect(relay.stderr()).toContain(`"open_files":${Number.isFinite(own.soft) ? own.soft : '"unlimited"'}`);
    await relay.kill('SIGTERM');
  });

  it.skipIf(!hasProc)('warns when the hard limit is below the connection cap', async () => {
    const relay = spawnNode(MAIN, ['relay', '--addr', '127.0.0.1:0'], { INTERLINK_LOG: 'warn' }, 'ulimit -n 512');
    await relay.waitForLines(2);
    await expect.poll(() => relay.stderr(), { timeout: 5_000 }).toContain('"event":"relay_open_files_low"');
    expect(relay.stderr()).toContain('may hold 1024 connections but open only 512 files');
    await relay.kill('SIGTERM');
  });
});
