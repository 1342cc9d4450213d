/**
 * `relay_meta`: what every relay process of one database shares — the key that keys `src`
 * and tags notices, the relay key clients pin — made by the first process that needs it
 * (the first writer wins), and each process's health row (health.ts). Also the start of a
 * database: its tables and its id sequence (schema.ts).
 */
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { InterlinkError } from '../../errors.js';
import { decodeBase64url, encodeBase64url } from '../../identity/base64url.js';
import { SEED_BYTES, signingKeyFromSeed } from '../../identity/ed25519.js';
import { freshRelayKey, type RelayKey } from '../relay-key.js';
import { SOURCE_KEY_BYTES } from '../shares.js';
import type { Sql } from './database.js';
import type { DatabaseCalls } from './health.js';
import { createRelayTables, relayKeyMeta } from './schema.js';

/** The relay_meta row a relay process commits to say its database can store (health.ts). */
export function healthRow(instance: string): string {
  return `health ${instance}`;
}

/** Deletes the health rows last committed before `before` (their relay processes stopped beating). */
export function forgetStaleHealth(sql: Sql, before: number) {
  const stale = String(before);
  return sql`DELETE FROM relay_meta WHERE name LIKE 'health %' AND lpad(value, 20, '0') < lpad(${stale}, 20, '0')`;
}

/** The value under `name` in relay_meta, storing `value` first if there is none (the first writer wins). */
async function metaValue(sql: Sql, name: string, value: string): Promise<string> {
  await sql`INSERT INTO relay_meta (name, value) VALUES (${name}, ${value}) ON CONFLICT (name) DO NOTHING`;
  const [row] = await sql`SELECT value FROM relay_meta WHERE name = ${name}`;
  return z.object({ value: z.string() }).parse(row).value;
}

/** Makes the tables (once per database, under an advisory lock) and reads what every relay shares. */
export async function prepare(sql: Sql, now: number): Promise<{ schema: string; sourceKey: Buffer }> {
  const schema = await sql.begin(async (tx) => {
    const made = await createRelayTables(tx);
    // Ids continue from the clock (in microseconds) when it is ahead, as the embedded store's
    // do: a database recreated empty behind the same relays never reissues an id a client may
    // still hold. Only ever forward, and far ahead of ids other relays take meanwhile.
    const micros = Math.floor(now) * 1000;
    await tx`SELECT setval('relay_ids', ${micros}) WHERE (SELECT last_value FROM relay_ids) < ${micros}`;
    return made;
  });
  const key = Buffer.from(await metaValue(sql, 'source_key', encodeBase64url(randomBytes(SOURCE_KEY_BYTES))), 'base64url');
  if (key.length !== SOURCE_KEY_BYTES) throw new InterlinkError('storage', "relay_meta.source_key in the relay's database is not 32 bytes of base64url");
  return { schema, sourceKey: key };
}

/** The relay key every relay of this database presents, made by the first one. */
export async function sharedRelayKey(sql: Sql, calls: DatabaseCalls): Promise<RelayKey> {
  const made = freshRelayKey();
  const value = JSON.stringify({ seed: encodeBase64url(made.signingKey.seed), key: made.key });
  const text = await calls.call(() => metaValue(sql, 'relay_key', value));
  const parsed = relayKeyMeta.safeParse(JSON.parse(text));
  const damaged = () => new InterlinkError('bad_key', "the relay key kept in the relay's database (relay_meta.relay_key) is damaged; clients expect that key, so it is not replaced: restore it, or delete the row to make a new key");
  if (!parsed.success) throw damaged();
  try {
    const signingKey = signingKeyFromSeed(decodeBase64url(parsed.data.seed, SEED_BYTES, 'seed'));
    if (encodeBase64url(signingKey.publicKey) !== parsed.data.key) throw damaged();
    return { signingKey, key: parsed.data.key };
  } catch {
    throw damaged();
  }
}
