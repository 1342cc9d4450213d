/**
 * The `relay-postgres` project's cluster (vitest.config.ts): one PostgreSQL node on a free
 * loopback port for the whole run, with a database for the relays of `test/relay`, each in
 * a schema of its own (relay-store.ts). Stopped and removed when the run ends.
 */
import type { TestProject } from 'vitest/node';
import { startPgCluster } from './postgres.js';

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const cluster = await startPgCluster();
  try {
    await cluster.createDatabase('relay_tests');
  } catch (err) {
    await cluster.close();
    throw err;
  }
  project.provide('relayPgUrl', cluster.url('relay_tests'));
  return () => cluster.close();
}
