/**
 * Which sessions `status` lists. Every session that ever ran keeps its files, so a
 * machine used for weeks has dozens; a person asks about the ones that are in use or
 * hold something for them. A session is listed when something waits in it (unread mail,
 * unsent messages, failed Codex notices, pairing requests) or it was active in the last
 * three days; the others are counted, and `status --all` lists them too. `inbox` finds the
 * sessions of a store folder the same way (`sessionsIn`).
 */
import { readdir, stat } from 'node:fs/promises';
import { identityDir, SESSION_STORES, sessionOfFile, sessionPath, type SessionStore } from '../config/layout.js';
import { errnoCode } from '../errors.js';
import { journalPathOf } from '../store/journal.js';
import { peekSessions, processDead } from '../succession/registry.js';
import { heirOf, inheritance, stillInherited, viewSessions, type SessionHost } from '../succession/rules.js';

export const QUIET_AFTER_MS = 3 * 24 * 60 * 60 * 1000;

/** Sessions with a store in `dir` (layout.ts, `sessionOfFile`). */
export async function sessionsIn(dir: string): Promise<string[]> {
  const names = await readdir(dir).catch(() => [] as string[]);
  return [...new Set(names.flatMap((n) => sessionOfFile(n) ?? []))];
}

/**
 * Whether this identity has had `session` on this machine: a file of it in one of the
 * per-session stores, or an entry in the session registry (a session that ran and holds
 * nothing yet). A mistyped id has neither, and a view says so instead of showing nothing.
 */
export async function sessionKnown(state: string, identity: string, session: string): Promise<boolean> {
  for (const store of SESSION_STORES) if ((await sessionsIn(identityDir(state, store, identity))).includes(session)) return true;
  return Object.hasOwn(await peekSessions(state, identity), session);
}

/** The folders under the state root that hold per-session files of an identity. */
const ACTIVE_STORES: readonly SessionStore[] = ['mailbox', 'outbox', 'failed', 'pairing'];

/**
 * When any of the session's files last changed (epoch ms), or undefined if none exists.
 * A store is rewritten on every change, so its mtime is the session's last activity.
 */
export async function lastActivity(state: string, identity: string, session: string): Promise<number | undefined> {
  let latest: number | undefined;
  for (const store of ACTIVE_STORES) {
    const snapshot = sessionPath(state, store, identity, session);
    for (const file of [snapshot, journalPathOf(snapshot)]) {
      try {
        const { mtimeMs } = await stat(file);
        latest = Math.max(latest ?? 0, Math.floor(mtimeMs));
      } catch (err) {
        if (errnoCode(err) !== 'ENOENT') throw err;
      }
    }
  }
  return latest;
}

export interface SessionSummary {
  unread: number;
  pending: number;
  /** Sent messages waiting on a relay for a session that is on no roster (agent/awaiting.ts). */
  awaiting_session?: number;
  failed_deliveries: number | 'unreadable';
  pair_requests: number | 'unreadable';
  /** Pairing requests dropped from a full list that no person has seen counted yet. */
  pair_requests_dropped?: { count: number } | null;
  last_activity: number | undefined;
}

/** Something in the session needs a person or an agent (an unreadable file counts). */
function holdsSomething(s: SessionSummary): boolean {
  return s.unread > 0 || s.pending > 0 || (s.awaiting_session ?? 0) > 0 || s.failed_deliveries !== 0 || s.pair_requests !== 0 || (s.pair_requests_dropped ?? null) !== null;
}

/** Splits sessions into those `status` lists and the quiet ones it only counts. */
export function partitionSessions<T extends SessionSummary>(sessions: readonly T[], now: number): { listed: T[]; quiet: T[] } {
  const listed: T[] = [];
  const quiet: T[] = [];
  for (const s of sessions) {
    const recent = s.last_activity === undefined || now - s.last_activity < QUIET_AFTER_MS;
    (recent || holdsSomething(s) ? listed : quiet).push(s);
  }
  return { listed, quiet };
}

/** Where a session stands for `status`: live, or ended and whose live session takes its mail. */
export interface SessionLife {
  state: 'live' | 'ended';
  host?: SessionHost;
  ended_at?: number;
  /** The live session that takes its mail now (DESIGN.md "When a session ends"); absent while none does. */
  taken_by?: string;
  /** Whether an ended session may still have mail to take (unread, or within the inheritance window). */
  inherits?: boolean;
}

/**
 * Each session's life from the registry (succession/), read without a lock or a repair.
 * A session the registry does not know and that has a mailbox ended when its files last
 * changed, as the heir judges it.
 */
export async function sessionLives(state: string, identity: string, sessions: readonly { session: string; unread: number; last_activity: number | undefined }[], now: number): Promise<Map<string, SessionLife>> {
  const entries = await peekSessions(state, identity);
  const view = viewSessions({ entries, mailboxes: sessions.map((s) => ({ session: s.session, unread: s.unread, changed_at: s.last_activity ?? 0 })), isDead: processDead, now });
  const heir = heirOf(view.live);
  const taken = new Set(heir === undefined ? [] : inheritance(view, heir, now));
  const lives = new Map<string, SessionLife>();
  for (const s of view.live) lives.set(s.session, { state: 'live', host: s.host });
  for (const s of view.ended) {
    lives.set(s.session, { state: 'ended', ended_at: s.ended_at, inherits: stillInherited(s, now), ...(taken.has(s.session) && heir !== undefined && { taken_by: heir }) });
  }
  return lives;
}
