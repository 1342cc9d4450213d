/**
 * Which of an identity's sessions on this machine are live, which have ended, and which
 * live session takes the mail of the ended ones (DESIGN.md "When a session ends"). Pure:
 * it takes what the session registry and the mailbox folder say, and a judgement of each
 * recorded process, and returns decisions.
 *
 * A session is live while one of its processes runs and has beaten its heart lately; it
 * has ended when none does (a clean exit records the time, a crash or a host that closed
 * it leaves a dead process). The mail of an ended session — what waits for it on the
 * relays and what its mailbox holds unread — is taken by one live session of the same
 * identity, its heir: the one that started last, since that is the session a person is
 * most likely at. The heir reads the ended session's route and presents its mailbox; the
 * messages keep the session they were signed for.
 */

/** How a session's host started it: what `status` shows, and what an heir may be. */
export const SESSION_HOSTS = ['claude', 'codex', 'other'] as const;
export type SessionHost = (typeof SESSION_HOSTS)[number];

/** One process of a session, as the registry records it: enough to tell whether it still runs. */
export interface ProcessEntry {
  host: string;
  boot: string;
  pid: number;
  start: string;
  /** When it last beat its heart (epoch ms). */
  seen_at: number;
}

export interface SessionEntry {
  host: SessionHost;
  /** When its newest process started (epoch ms). */
  started_at: number;
  /** When its last process left cleanly; absent while one runs, or after a crash. */
  ended_at?: number;
  processes: ProcessEntry[];
}

/** A session's mailbox file as the folder shows it. */
export interface MailboxFile {
  session: string;
  /** Unread messages in it (0 when unknown). */
  unread: number;
  /** When the file last changed (epoch ms): the end of a session the registry never knew. */
  changed_at: number;
}

/** A live process beats every HEARTBEAT_MS; one silent for STALE_MS is taken as gone, even if its pid runs (a reused pid where the OS cannot tell). */
export const HEARTBEAT_MS = 30_000;
export const STALE_MS = 4 * HEARTBEAT_MS;
/**
 * An ended session's route is read for this long after it ended: a relay keeps a message
 * for 8 days by default (`--max-age`), so no sender's message to it can arrive later.
 * Its mailbox is presented for as long as it holds unread mail.
 */
export const INHERIT_MS = 8 * 24 * 60 * 60 * 1000;
/**
 * At most this many ended sessions are taken at once, the most recently ended first: a
 * relay connection reads at most 64 routes (relay/dispatch.ts), and the heir's own
 * route is one of them.
 */
export const MAX_INHERITED = 32;

/** Sessions that take no mail: the `pair` command's (agent/routing.ts). */
const NOT_MAIL = new Set(['cli']);

/** Whether a recorded process runs now, given whether the OS says its pid is dead (pure). */
export function processLive(entry: ProcessEntry, dead: boolean, now: number): boolean {
  return !dead && now - entry.seen_at < STALE_MS;
}

/** The session's processes that still run (pure). */
export function liveProcesses(entry: SessionEntry, isDead: (p: ProcessEntry) => boolean, now: number): ProcessEntry[] {
  return entry.processes.filter((p) => processLive(p, isDead(p), now));
}

/** When an ended session ended: its recorded exit, else its last heartbeat, else its start (pure). */
export function endedAt(entry: SessionEntry): number {
  if (entry.ended_at !== undefined) return entry.ended_at;
  const beats = entry.processes.map((p) => p.seen_at);
  return beats.length > 0 ? Math.max(...beats) : entry.started_at;
}

export interface SessionsView {
  live: { session: string; host: SessionHost; started_at: number }[];
  ended: { session: string; ended_at: number; unread: number }[];
}

/**
 * Every session the registry or the mailbox folder knows, live or ended (pure). A mailbox
 * the registry never knew (written before the registry existed, or by a session of an
 * older version) belongs to an ended session that ended when the file last changed, once
 * it has not changed for STALE_MS: a mailbox that changes is in use.
 */
export function viewSessions(input: {
  entries: Readonly<Record<string, SessionEntry>>;
  mailboxes: readonly MailboxFile[];
  isDead: (p: ProcessEntry) => boolean;
  now: number;
}): SessionsView {
  const unread = new Map(input.mailboxes.map((m) => [m.session, m.unread]));
  const live: SessionsView['live'] = [];
  const ended: SessionsView['ended'] = [];
  for (const [session, entry] of Object.entries(input.entries)) {
    if (NOT_MAIL.has(session)) continue;
    if (liveProcesses(entry, input.isDead, input.now).length > 0) live.push({ session, host: entry.host, started_at: entry.started_at });
    else ended.push({ session, ended_at: endedAt(entry), unread: unread.get(session) ?? 0 });
  }
  for (const mailbox of input.mailboxes) {
    if (NOT_MAIL.has(mailbox.session) || mailbox.session in input.entries || input.now - mailbox.changed_at < STALE_MS) continue;
    ended.push({ session: mailbox.session, ended_at: mailbox.changed_at, unread: mailbox.unread });
  }
  return { live, ended };
}

/** The live session that takes ended sessions' mail: the one started last, ties by id (pure). */
export function heirOf(live: SessionsView['live']): string | undefined {
  let heir: SessionsView['live'][number] | undefined;
  for (const s of live) {
    if (heir === undefined || s.started_at > heir.started_at || (s.started_at === heir.started_at && s.session > heir.session)) heir = s;
  }
  return heir?.session;
}

/** Whether an ended session still has mail to take: unread in its mailbox, or possibly still on a relay (pure). */
export function stillInherited(ended: SessionsView['ended'][number], now: number): boolean {
  return ended.unread > 0 || now - ended.ended_at < INHERIT_MS;
}

/**
 * The ended sessions `me` takes now (pure): none unless `me` is the heir; else those with
 * mail still to take, the most recently ended first, at most MAX_INHERITED.
 */
export function inheritance(view: SessionsView, me: string, now: number): string[] {
  if (heirOf(view.live) !== me) return [];
  return view.ended
    .filter((s) => s.session !== me && stillInherited(s, now))
    .sort((a, b) => b.ended_at - a.ended_at || (a.session < b.session ? -1 : a.session > b.session ? 1 : 0))
    .slice(0, MAX_INHERITED)
    .map((s) => s.session);
}
