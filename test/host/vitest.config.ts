/**
 * The host tests: real host CLIs (Claude Code, Codex) driven offline against scripted
 * fakes. `npm run test:host` runs them, after `scripts/host/install-clis.sh`; `npm test`
 * does not (claude.test.ts and codex.test.ts run only when INTERLINK_HOST_TESTS is set, as
 * it is here).
 */
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  root: fileURLToPath(new URL('../..', import.meta.url)),
  test: {
    include: ['test/host/**/*.test.ts'],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    pool: 'forks',
    // One host CLI at a time: the machine has two cores.
    fileParallelism: false,
    env: { INTERLINK_HOST_TESTS: '1' },
  },
});
