import { defineConfig } from 'vitest/config';

/** The real-CLI host tests run with `npm run test:host` (test/host/vitest.config.ts). */
const HOST_TESTS = ['test/host/claude.test.ts', 'test/host/codex.test.ts', 'test/host/marketplace.test.ts'];

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    projects: [
      {
        extends: true,
        test: {
          name: 'main',
          include: ['test/**/*.test.ts'],
          exclude: [...HOST_TESTS, '**/node_modules/**'],
          provide: { relayPgUrl: '' },
        },
      },
      {
        // The relay suite again, every relay on PostgreSQL (test/helpers/relay-store.ts).
        extends: true,
        test: {
          name: 'relay-postgres',
          include: ['test/relay/**/*.test.ts'],
          exclude: ['test/relay/postgres-cluster.test.ts', '**/node_modules/**'],
          env: { INTERLINK_TEST_RELAY_STORE: 'postgres' },
          globalSetup: ['test/helpers/postgres-global-setup.ts'],
        },
      },
    ],
  },
});
