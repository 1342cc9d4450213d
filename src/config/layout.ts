/**
 * Where every file lives under the state root and the config root (README "Files and
 * environment"; DESIGN.md, "Durable files"). The roots come from config/env.ts; this is
 * the one module that joins paths below them. Every session id that becomes a path
 * component passes the name rule (paths.ts) here.
 */
import { join } from 'node:path';
import { checkPathName, unsafePathReason } from './paths.js';

/** The per-identity folders that hold one file per session: `<store>/<identity>/<session>.json`. */
export const SESSION_STORES = ['mailbox', 'outbox', 'pairing', 'failed', 'rejected'] as const;
export type SessionStore = (typeof SESSION_STORES)[number];

/** Every folder directly under the state root that Interlink keeps. */
export const STATE_FOLDERS = [...SESSION_STORES, 'inbox', 'replay', 'relay', 'sessions'] as const;

/** The config root's file names; `INTERLINK_KEY` and `INTERLINK_PEERS` may put them elsewhere. */
const KEY_FILE = 'id.key';
const PEERS_FILE = 'peers.json';
const SNAPSHOT = '.json';
const JOURNAL = '.journal';

export function defaultKeyPath(configDir: string): string {
  return join(configDir, KEY_FILE);
}

export function defaultPeersPath(configDir: string): string {
  return join(configDir, PEERS_FILE);
}

/** The config root's entries Interlink owns: the key, peers.json and what sits beside them (locks, temp files). */
export function ownedConfigEntries(configDir: string, names: readonly string[]): string[] {
  return names.filter((name) => name.startsWith(KEY_FILE) || name.startsWith(PEERS_FILE)).map((name) => join(configDir, name));
}

export function stateFolders(stateDir: string): string[] {
  return STATE_FOLDERS.map((folder) => join(stateDir, folder));
}

/** `<store>/`: the identity folders of one kind of file. */
export function storeDir(stateDir: string, store: SessionStore): string {
  return join(stateDir, store);
}

/** `<store>/<identity>/`: one identity's files of one kind, one per session. */
export function identityDir(stateDir: string, store: SessionStore, identity: string): string {
  return join(stateDir, store, identity);
}

/** The file of `session` in an identity folder; the session id must pass the name rule. */
export function sessionFileIn(dir: string, session: string): string {
  return join(dir, `${checkPathName(session, 'session id')}${SNAPSHOT}`);
}

export function sessionPath(stateDir: string, store: SessionStore, identity: string, session: string): string {
  return sessionFileIn(identityDir(stateDir, store, identity), session);
}

/**
 * The session a file in an identity folder belongs to: a snapshot (`<session>.json`) or,
 * before its first compaction, only a journal (`<session>.journal`). Undefined for
 * anything else (moved-aside damage, temp files) and for names the rule refuses.
 */
export function sessionOfFile(name: string): string | undefined {
  if (name.includes('.corrupt-')) return undefined;
  const session = name.endsWith(SNAPSHOT) ? name.slice(0, -SNAPSHOT.length) : name.endsWith(JOURNAL) ? name.slice(0, -JOURNAL.length) : undefined;
  return session !== undefined && unsafePathReason(session) === undefined ? session : undefined;
}

export function mailboxPath(stateDir: string, identity: string, session: string): string {
  return sessionPath(stateDir, 'mailbox', identity, session);
}

export function outboxPath(stateDir: string, identity: string, session: string): string {
  return sessionPath(stateDir, 'outbox', identity, session);
}

/** `pairing/<identity>/<session>.json` (pairing/store.ts). */
export function pairingPath(stateDir: string, identity: string, session: string): string {
  return sessionPath(stateDir, 'pairing', identity, session);
}

/** `failed/<identity>/<session>.json`: Codex notices the host did not take (codex/failed.ts). */
export function failedPath(stateDir: string, identity: string, session: string): string {
  return sessionPath(stateDir, 'failed', identity, session);
}

/** `rejected/<identity>/<session>.json`: what the gate refused (agent/rejected.ts). */
export function rejectedPath(stateDir: string, identity: string, session: string): string {
  return sessionPath(stateDir, 'rejected', identity, session);
}

/** The per-identity replay index, shared by every session of the identity (replay/claims.ts). */
export function replayPath(stateDir: string, identity: string): string {
  return join(stateDir, 'replay', `${identity}${SNAPSHOT}`);
}

/** The identity's session registry: which sessions run on this machine and which ended (succession/registry.ts). */
export function sessionsPath(stateDir: string, identity: string): string {
  return join(stateDir, 'sessions', `${identity}${SNAPSHOT}`);
}

/** The Claude listener's inbox of one session (notices/inbox.ts). */
export interface InboxPaths {
  dir: string;
  file: string;
  cursor: string;
  /** The listener's exclusive lock. */
  lock: string;
  /** Serializes writers (and their tail repair). */
  ioLock: string;
}

export function inboxPaths(stateDir: string, session: string): InboxPaths {
  checkPathName(session, 'session id');
  const dir = join(stateDir, 'inbox');
  return {
    dir,
    file: join(dir, `${session}.jsonl`),
    cursor: join(dir, `${session}.cursor`),
    lock: join(dir, `${session}.lock`),
    ioLock: join(dir, `${session}.io-lock`),
  };
}

/** The zero-config relay's store, log and pid file (agent/local-relay.ts). */
export function localRelayDir(stateDir: string): string {
  return join(stateDir, 'relay');
}

export function localRelayLogPath(stateDir: string): string {
  return join(localRelayDir(stateDir), 'relay.log');
}

/** A relay's own key, kept with its store (relay/relay-key.ts). */
export function relayKeyFile(db: string): string {
  return join(db, 'relay-key.json');
}

/** The embedded relay's roster under `--db`, kept across restarts (relay/roster-file.ts). */
export function relayRosterFile(db: string): string {
  return join(db, 'roster.json');
}

/** The relay keys this user's sessions have seen, per URL: trust on first use (link/known-relays.ts). */
export function knownRelaysPath(stateDir: string): string {
  return join(stateDir, 'relays.json');
}

/** Written by `relay stop`: a person stopped this relay, so running sessions do not start it again. */
export function relayStopMarker(db: string): string {
  return join(db, 'stopped');
}
