import { defineConfig } from 'vitest/config';
import { UNIT_FILES } from './test/unit-files.js';

/** `npm run test:unit`: the files that start no child process (test/unit-files.ts), under 2 minutes here. */
export default defineConfig({
  test: {
    name: 'unit',
    include: UNIT_FILES,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    isolate: false,
    // CPU-bound files: one per core.
    maxWorkers: 2,
    setupFiles: ['test/helpers/quiet-logs.ts'],
  },
});
