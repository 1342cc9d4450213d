/**
 * The other sessions of an identity that keep pairing state: their stores lie next to
 * this one's (`pairing/<identity>/<session>.json`). A request reaches whichever session
 * of an identity the requester's roster showed, often an agent's, while the person
 * decides at the terminal (the `cli` session): accept and reject find the request
 * wherever it arrived, and the CLI lists and sends for every session. Only files that
 * validate as pairing stores are taken; nothing else in the directory is read as one,
 * let alone moved aside.
 */
import { readdir } from 'node:fs/promises';
import { dirname } from 'node:path';
import { sessionFileIn, sessionOfFile } from '../config/layout.js';
import { errnoCode } from '../errors.js';
import { peekJson } from '../store/json-store.js';
import { pairingFileSchema } from './rules.js';

/** The sibling sessions of `session`, whose store is at `storePath`, sorted; none when the store is not laid out per session. */
export async function siblingSessions(storePath: string, session: string): Promise<string[]> {
  if (storePath !== sessionFileIn(dirname(storePath), session)) return [];
  const dir = dirname(storePath);
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return [];
    throw err;
  }
  const sessions = [...new Set(names.flatMap((name) => sessionOfFile(name) ?? []))].filter((other) => other !== session).sort();
  const valid = await Promise.all(sessions.map(async (other) => ((await peekJson(siblingStorePath(storePath, other), pairingFileSchema)).kind === 'ok' ? other : undefined)));
  return valid.filter((other): other is string => other !== undefined);
}

/** The store of sibling `session`, next to `storePath`. */
export function siblingStorePath(storePath: string, session: string): string {
  return sessionFileIn(dirname(storePath), session);
}
