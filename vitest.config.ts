import { defineConfig, type TestProjectInlineConfiguration } from 'vitest/config';
import { postgresBinDir } from './test/helpers/postgres.js';
import { HOST_TESTS } from './test/unit-files.js';

/**
 * The files of test/relay that start relays, in process or as processes, but
 * slow-readers.test.ts: what it bounds (send buffers, roster replies, heartbeats) is the
 * connection's, the same on every store, and it waits out two 15 s heartbeats.
 */
const RELAY_SUITE = [
  'test/relay/relay.test.ts',
  'test/relay/relay-process.test.ts',
  'test/relay/relay-key.test.ts',
  'test/relay/fair-share.test.ts',
  'test/relay/connection-bounds.test.ts',
  'test/relay/memory-bounds.test.ts',
  'test/relay/hostile-frames.test.ts',
  'test/relay/frame-fuzz.test.ts',
  'test/relay/metrics.test.ts',
  'test/relay/metrics-process.test.ts',
  'test/relay/send-order.test.ts',
  'test/relay/defer.test.ts',
  'test/relay/roster-scale.test.ts',
  'test/relay/relay-postgres.test.ts',
];

const main: TestProjectInlineConfiguration = {
  extends: true,
  test: {
    name: 'main',
    include: ['test/**/*.test.ts'],
    exclude: [...HOST_TESTS, 'test/relay/relay-postgres.test.ts', '**/node_modules/**'],
    provide: { relayPgUrl: '' },
  },
};

/**
 * The relay suite's files that start relays, again with every relay on PostgreSQL
 * (test/helpers/relay-store.ts); its unit tests of pure parts run once, in `main`.
 */
const relayPostgres: TestProjectInlineConfiguration = {
  extends: true,
  test: {
    name: 'relay-postgres',
    include: RELAY_SUITE,
    env: { INTERLINK_TEST_RELAY_STORE: 'postgres' },
    globalSetup: ['test/helpers/postgres-global-setup.ts'],
  },
};

/**
 * The relay suite runs on PostgreSQL where PostgreSQL is installed, and always in CI
 * (.ci/run installs it, so there a missing install fails instead of skipping).
 */
const withPostgres = postgresBinDir() !== undefined || process.env.CI === 'true';
if (!withPostgres) console.warn('vitest: no PostgreSQL (initdb) found: the relay suite runs on the embedded store only; install postgresql to run it on PostgreSQL too');

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Log lines written inside a test process are shown only for a test that fails (test/helpers/quiet-logs.ts).
    setupFiles: ['test/helpers/quiet-logs.ts'],
    pool: 'forks',
    // Most files wait on child processes, sockets and timers, not on the CPU: three at a
    // time on two cores (vitest's default here is one) take the suite from about 20 to
    // about 10 minutes. Tests wait on conditions with deadlines, never on fixed sleeps.
    maxWorkers: 3,
    projects: withPostgres ? [main, relayPostgres] : [main],
  },
});
