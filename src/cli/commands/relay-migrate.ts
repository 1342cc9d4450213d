/**
 * `interlink-mcp relay migrate --db DIR --store URL`: moves a stopped `--db` relay's
 * queues, source key and relay key into PostgreSQL (relay/postgres/migrate.ts), for an
 * operator leaving the embedded store. It holds DIR's relay lock throughout, so it
 * refuses while a relay runs there and no relay starts there meanwhile; it writes
 * nothing in DIR, which the operator removes once the relays serve from PostgreSQL.
 */
import { stat } from 'node:fs/promises';
import { resolve } from 'node:path';
import { relayKeyFile } from '../../config/layout.js';
import { errnoCode, InterlinkError, isInterlinkError } from '../../errors.js';
import { isPostgresUrl, redactedUrl } from '../../relay/postgres/database.js';
import { migrateIntoPostgres, type Migration } from '../../relay/postgres/migrate.js';
import { readRelayKey } from '../../relay/relay-key.js';
import { holdDbLock, readDbContents } from '../../relay/storage.js';
import { expectPositionals, parse, print } from '../args.js';

const USAGE = 'interlink-mcp relay migrate --db DIR --store URL [--key FILE] [--json]';

function counted(n: number, what: string): string {
  return `${n} ${what}${n === 1 ? '' : 's'}`;
}

async function mustBeDirectory(dir: string): Promise<void> {
  const info = await stat(dir).catch((err: unknown) => {
    if (errnoCode(err) === 'ENOENT') return undefined;
    throw err;
  });
  if (info?.isDirectory() !== true) throw new InterlinkError('usage', `--db ${dir} is not a directory: name the --db directory of the relay to move`);
}

/** Holds DIR's relay lock for `work`; a relay running there is refused in one sentence. */
async function whileHeld<T>(dir: string, work: () => Promise<T>): Promise<T> {
  let release: () => Promise<void>;
  try {
    release = await holdDbLock(dir);
  } catch (err) {
    if (!isInterlinkError(err, 'busy')) throw err;
    throw new InterlinkError('busy', `${dir} is in use by a running relay: stop it (interlink-mcp relay stop --db ${dir}) and run relay migrate again; nothing was moved`, undefined, { cause: err });
  }
  try {
    return await work();
  } finally {
    await release();
  }
}

function report(migration: Migration, db: string, store: string, key: string): string {
  const what = `${counted(migration.moved, 'message')} of ${counted(migration.routes, 'route')}`;
  return migration.already
    ? `nothing to move: the ${what} from ${db} are already in ${store}, and so is the relay key ${key}`
    : `moved ${what} from ${db} into ${store}; the relay key ${key} came along`;
}

export async function relayMigrate(argv: readonly string[]): Promise<void> {
  const args = parse(argv, { db: { type: 'string' }, store: { type: 'string' }, key: { type: 'string' }, json: { type: 'boolean' } });
  expectPositionals(args, 0, USAGE);
  const { db: dbArg, store: url, key: keyArg } = args.values;
  if (typeof dbArg !== 'string' || typeof url !== 'string') throw new InterlinkError('usage', `relay migrate needs --db DIR and --store URL: ${USAGE}`);
  if (!isPostgresUrl(url)) throw new InterlinkError('usage', `--store ${JSON.stringify(redactedUrl(url))} is not a postgres:// connection string`);
  const db = resolve(dbArg);
  const keyPath = typeof keyArg === 'string' ? resolve(keyArg) : relayKeyFile(db);
  await mustBeDirectory(db);
  const store = redactedUrl(url);

  const migration = await whileHeld(db, async () => {
    const relayKey = await readRelayKey(keyPath);
    if (relayKey === undefined) {
      throw new InterlinkError('key_missing', `${keyPath} does not exist: relay migrate moves the relay key with the queues (if the relay ran with --key FILE, name that file with --key); nothing was moved`);
    }
    const { data, sourceKey } = await readDbContents(db);
    const moved = await migrateIntoPostgres(url, { db, data, sourceKey, relayKey });
    return { ...moved, key: relayKey.key };
  });
  print(args.values.json === true, { moved: migration.moved, routes: migration.routes, db, store, key: migration.key, already: migration.already }, () =>
    report(migration, db, store, migration.key),
  );
}
