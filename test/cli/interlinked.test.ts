/** `interlinked` starts `claude` with the channel on and passes everything else through; `--help` is its own. */
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { reapAll, spawnNode } from '../helpers/process.js';

const INTERLINKED = join(import.meta.dirname, '..', '..', 'dist', 'src', 'cli', 'interlinked.js');
let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'interlinked-'));
});
afterEach(async () => {
  await reapAll();
  await rm(dir, { recursive: true, force: true });
});

describe('interlinked', () => {
  it('runs claude with the development channel and INTERLINK_CHANNELS=1, passing arguments and the exit code through', async () => {
    const fake = join(dir, 'claude');
    await writeFile(fake, '#!/bin/sh\necho "args:$*"\necho "channels:$INTERLINK_CHANNELS"\nexit 7\n');
    await chmod(fake, 0o755);
    const child = spawnNode(INTERLINKED, ['--resume', 'abc', '-p', 'hi there'], { PATH: `${dir}:${process.env.PATH ?? ''}` });
    const exit = await child.exited;
    expect(child.lines).toEqual(['args:--dangerously-load-development-channels plugin:interlink@interlink --resume abc -p hi there', 'channels:1']);
    expect(exit.code).toBe(7);
  });

  it('prints its own help for --help or -h and exits 0, without starting claude; after -- they are claude\'s', async () => {
    const fake = join(dir, 'claude');
    await writeFile(fake, '#!/bin/sh\necho "args:$*"\n');
    await chmod(fake, 0o755);
    const env = { PATH: `${dir}:${process.env.PATH ?? ''}` };
    for (const args of [['--help'], ['-h'], ['--resume', 'abc', '--help']]) {
      const child = spawnNode(INTERLINKED, args, env);
      expect((await child.exited).code, args.join(' ')).toBe(0);
      expect(child.lines[0], args.join(' ')).toBe('usage: interlinked [claude arguments…]');
      expect(child.lines.join('\n')).toContain('claude --help');
      expect(child.lines.some((line) => line.startsWith('args:')), args.join(' ')).toBe(false);
      expect(child.stderr()).toBe('');
    }
    const passed = spawnNode(INTERLINKED, ['--', '-h'], env);
    expect((await passed.exited).code).toBe(0);
    expect(passed.lines).toEqual(['args:--dangerously-load-development-channels plugin:interlink@interlink -- -h']);
  });

  it('says clearly when claude is not installed', async () => {
    const child = spawnNode(INTERLINKED, [], { PATH: dir });
    const exit = await child.exited;
    expect(exit.code).toBe(1);
    expect(child.stderr()).toMatch(/`claude` is not on PATH/);
  });
});
