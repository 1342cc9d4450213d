/**
 * Opening what the relay keeps (DESIGN.md "The relay": "Where the queues live"): the
 * queues, the roster and the relay's key — embedded (in memory, or a journal under
 * `--db`) or on PostgreSQL (`--store`), where every relay of the database shares all three.
 */
import { relayKeyFile, relayRosterFile } from '../config/layout.js';
import type { QueueLimits } from './limits.js';
import { PostgresRoster } from './postgres/roster.js';
import { PostgresStore } from './postgres/store.js';
import type { QueueStore, RosterStore } from './queue-store.js';
import { freshRelayKey, loadOrCreateRelayKey, type RelayKey } from './relay-key.js';
import { Roster, type RosterLimits } from './roster.js';
import { RosterFile } from './roster-file.js';
import { RelayStorage } from './storage.js';

export interface OpenedStore {
  storage: QueueStore;
  roster: RosterStore;
  relayKey: RelayKey;
  close(): Promise<void>;
}

/** Where the relay keeps its queues and key (a part of `RelayOptions`, server.ts). */
export interface StoreOptions {
  dbDir?: string;
  store?: string;
  keyFile?: string;
  now?: () => number;
}

/** The key `--key` names, else the one under `--db`, else one for this run. */
function localKey(options: StoreOptions): Promise<RelayKey> {
  const keyFile = options.keyFile ?? (options.dbDir !== undefined ? relayKeyFile(options.dbDir) : undefined);
  return keyFile !== undefined ? loadOrCreateRelayKey(keyFile) : Promise.resolve(freshRelayKey());
}

/**
 * The queues, the roster and the key. Locally: the queues, then the key under the store's
 * lock (of two relays on one store, one gets that far). On PostgreSQL every relay of the
 * database presents one key, kept there, unless `--key` names a file.
 */
export async function openStore(options: StoreOptions, limits: QueueLimits, rosterLimits: RosterLimits, onCommit: (seconds: number) => void): Promise<OpenedStore> {
  const now = options.now ?? Date.now;
  if (options.store !== undefined) {
    const storage = await PostgresStore.open({ url: options.store, limits, now, onCommit });
    try {
      const roster = await PostgresRoster.open(storage, now, rosterLimits);
      const relayKey = options.keyFile !== undefined ? await loadOrCreateRelayKey(options.keyFile) : await storage.sharedRelayKey();
      return { storage, roster, relayKey, close: async () => (roster.close(), await storage.release()) };
    } catch (err) {
      await storage.release();
      throw err;
    }
  }
  const storage = await RelayStorage.open(options.dbDir, limits, now, onCommit);
  try {
    // Under --db the roster outlives a restart (roster-file.ts); in memory it starts empty.
    const memory = new Roster(now, rosterLimits);
    const roster = options.dbDir !== undefined ? await RosterFile.open(memory, relayRosterFile(options.dbDir)) : memory;
    const relayKey = await localKey(options);
    const close = async () => {
      if (roster instanceof RosterFile) await roster.flush();
      await storage.release();
    };
    return { storage, roster, relayKey, close };
  } catch (err) {
    await storage.release();
    throw err;
  }
}
