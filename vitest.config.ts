import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // The real-CLI host tests run with `npm run test:host` (test/host/vitest.config.ts).
    exclude: ['test/host/claude.test.ts', 'test/host/codex.test.ts', 'test/host/marketplace.test.ts', '**/node_modules/**'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
  },
});
