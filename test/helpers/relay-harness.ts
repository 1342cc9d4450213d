/** What one relay test file starts in process — relays, clients, temp dirs — closed after each test. */
import { afterEach } from 'vitest';
import type { RelayServer } from '../../src/relay/server.js';
import { reapAll } from './process.js';
import type { TestClient } from './relay-test-client.js';

export function closedAfterEach(): { relays: RelayServer[]; clients: TestClient[]; dirs: { remove: () => Promise<void> }[] } {
  const open = { relays: [] as RelayServer[], clients: [] as TestClient[], dirs: [] as { remove: () => Promise<void> }[] };
  afterEach(async () => {
    await Promise.all(open.clients.splice(0).map((c) => c.terminate()));
    await Promise.all(open.relays.splice(0).map((r) => r.close()));
    await reapAll();
    await Promise.all(open.dirs.splice(0).map((d) => d.remove()));
  });
  return open;
}
