/**
 * The session registry, `sessions/<identity>.json`: which sessions of the identity run on
 * this machine, which processes carry them, and when each ended. A schema-validated state
 * file under its sidecar lock (store/json-store.ts): every change is durable before it
 * returns, and a damaged file is moved aside and reported, never a crash loop — the
 * sessions then register again at their next heartbeat, so a lost registry costs at most
 * one heartbeat of wrong views (rules.ts).
 *
 * A process registers when its session starts, beats every HEARTBEAT_MS, and leaves on a
 * clean exit; the last one to leave records the session's end. A process that dies
 * leaves its entry behind, which rules.ts judges dead by its pid and its silence.
 */
import { z } from 'zod';
import { sessionsPath } from '../config/layout.js';
import { holderIsDead, SELF, type ProcessMark } from '../store/liveness.js';
import { peekJson, readJson, updateJson } from '../store/json-store.js';
import { endedAt, INHERIT_MS, liveProcesses, SESSION_HOSTS, type ProcessEntry, type SessionEntry, type SessionHost } from './rules.js';

/** Sessions kept in the file at most: the live ones and the most recently ended. */
const MAX_ENTRIES = 1024;

const processSchema = z.object({
  host: z.string(),
  boot: z.string(),
  pid: z.number().int().positive(),
  start: z.string(),
  seen_at: z.number().int(),
});

const entrySchema = z.object({
  host: z.enum(SESSION_HOSTS),
  started_at: z.number().int(),
  ended_at: z.number().int().optional(),
  processes: z.array(processSchema).max(64),
});

const fileSchema = z.object({
  v: z.literal(1),
  sessions: z.record(z.string(), entrySchema),
});
type RegistryFile = z.infer<typeof fileSchema>;

const empty = (): RegistryFile => ({ v: 1, sessions: {} });
const storeOptions = { unavailable: 'the mail of sessions that ended waits for their running sessions to register again at their next heartbeat (within 30 s); sessions that ended before are taken again only if their mailboxes hold unread mail' };

/** Whether the OS says a recorded process is gone (store/liveness.ts). */
export function processDead(entry: ProcessEntry): boolean {
  return holderIsDead(entry);
}

function sameProcess(a: ProcessMark, b: ProcessMark): boolean {
  return a.host === b.host && a.boot === b.boot && a.pid === b.pid && a.start === b.start;
}

/** Drops dead processes, then sessions ended past the inheritance window, then the oldest beyond MAX_ENTRIES (pure). */
export function pruned(sessions: Record<string, SessionEntry>, isDead: (p: ProcessEntry) => boolean, now: number): Record<string, SessionEntry> {
  const kept: [string, SessionEntry][] = [];
  for (const [session, entry] of Object.entries(sessions)) {
    const processes = liveProcesses(entry, isDead, now);
    const next: SessionEntry = processes.length > 0 ? { ...entry, processes } : { ...entry, ended_at: endedAt(entry), processes: [] };
    if (processes.length === 0 && now - next.ended_at! >= INHERIT_MS) continue;
    kept.push([session, next]);
  }
  kept.sort(([, a], [, b]) => (b.ended_at ?? Infinity) - (a.ended_at ?? Infinity));
  return Object.fromEntries(kept.slice(0, MAX_ENTRIES));
}

/** The registry as it stands, for views (`status`): nothing is taken, moved or written; a missing or damaged file reads as empty. */
export async function peekSessions(stateDir: string, identity: string): Promise<Record<string, SessionEntry>> {
  const read = await peekJson(sessionsPath(stateDir, identity), fileSchema);
  return read.kind === 'ok' ? read.value.sessions : {};
}

export class SessionRegistry {
  readonly path: string;

  constructor(
    stateDir: string,
    identity: string,
    private readonly now: () => number = Date.now,
    private readonly isDead: (p: ProcessEntry) => boolean = processDead,
    private readonly self: ProcessMark = SELF,
  ) {
    this.path = sessionsPath(stateDir, identity);
  }

  /** Every session the file records (dead processes included: rules.ts judges them). */
  async read(): Promise<Record<string, SessionEntry>> {
    return (await readJson(this.path, fileSchema, empty, storeOptions)).value.sessions;
  }

  /** This process starts carrying `session`: live from now. */
  async register(session: string, host: SessionHost): Promise<void> {
    const now = this.now();
    await this.edit((sessions) => {
      const entry = sessions[session];
      const others = (entry?.processes ?? []).filter((p) => !sameProcess(p, this.self));
      sessions[session] = { host, started_at: now, processes: [...others, { ...this.self, seen_at: now }] };
      return pruned(sessions, this.isDead, now);
    });
  }

  /** This process still carries `session` (registered again if the file lost it). */
  async beat(session: string, host: SessionHost): Promise<void> {
    const now = this.now();
    await this.edit((sessions) => {
      const entry = sessions[session];
      const mine = entry?.processes.find((p) => sameProcess(p, this.self));
      if (entry === undefined || mine === undefined) {
        sessions[session] = { host, started_at: entry?.started_at ?? now, processes: [...(entry?.processes ?? []), { ...this.self, seen_at: now }] };
      } else {
        mine.seen_at = now;
        delete entry.ended_at;
      }
      return sessions;
    });
  }

  /** This process stops carrying `session`; the last one out records when the session ended. */
  async leave(session: string): Promise<void> {
    const now = this.now();
    await this.edit((sessions) => {
      const entry = sessions[session];
      if (entry === undefined) return undefined;
      entry.processes = entry.processes.filter((p) => !sameProcess(p, this.self));
      if (liveProcesses(entry, this.isDead, now).length === 0) entry.ended_at = now;
      return sessions;
    });
  }

  private async edit(change: (sessions: Record<string, SessionEntry>) => Record<string, SessionEntry> | undefined): Promise<void> {
    await updateJson(this.path, fileSchema, empty, (current) => {
      const sessions = change(structuredClone(current.sessions));
      return { next: sessions === undefined ? undefined : { v: 1 as const, sessions }, result: {} };
    }, storeOptions);
  }
}
