/**
 * A live session takes the mail of its identity's ended sessions on this machine
 * (DESIGN.md "When a session ends"; the decision is succession/rules.ts).
 *
 * Every PASS_MS the session reads the registry and the mailbox folder. While it is the
 * heir, it takes each ended session with mail still to take: it holds that mailbox's
 * lease (`<mailbox>.heir.lock`, so two sessions that both believe they are the heir for a
 * moment never both take it), reads the ended session's route on every relay, commits
 * what arrives to the ended session's own mailbox through the same gate, for the session
 * the message was signed for, sends what its outbox still holds, and wakes this session's
 * host for its unread mail. When the ended session runs again, or a newer session becomes
 * the heir, it lets go, and the lease passes on.
 */
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { identityDir, mailboxPath, outboxPath, sessionOfFile } from '../config/layout.js';
import { formatRoute } from '../envelope/route.js';
import { errnoCode, isInterlinkError, messageOf } from '../errors.js';
import { log } from '../log.js';
import { Mailbox } from '../mailbox/mailbox.js';
import { Notifier, type NoticeSink } from '../notices/notifier.js';
import { Outbox } from '../outbox/outbox.js';
import type { RelayClient } from '../link/client.js';
import { SingleFlight } from '../single-flight.js';
import { holdFileLock } from '../store/lock.js';
import { processDead, SessionRegistry } from '../succession/registry.js';
import { HEARTBEAT_MS, heirOf, INHERIT_MS, inheritance, viewSessions, type MailboxFile, type SessionHost, type SessionsView } from '../succession/rules.js';
import type { Inbound } from './inbound.js';
import type { Outbound } from './outbound.js';

/** How often a session looks at the registry: an ended session's mail is taken within about this long. */
const PASS_MS = 5_000;

/** What taking one ended session needs from the session that takes it (agent.ts makes these). */
export interface HeirParts {
  identity: string;
  /** This session. */
  session: string;
  host: SessionHost;
  stateDir: string;
  relays: readonly RelayClient[];
  /** An inbound loop for the ended session: its mailbox, its outbox for receipts, its session for the gate. */
  inbound: (session: string, mailbox: Mailbox, outbox: Outbox) => Inbound;
  /** An outbound loop that sends what the ended session's outbox still holds. */
  outbound: (outbox: Outbox) => Outbound;
  senderName: (key: string) => Promise<string>;
  /**
   * Takes an ended session off the relays' rosters: a goodbye signed with the identity's
   * key, as the session would have said on a clean exit. A killed session's last
   * announcement would otherwise show it live for up to 90 s, and peers would address it
   * (or find two live sessions and have to choose) instead of the live one.
   */
  goodbye: (session: string) => void;
  /**
   * Learns the peers' sessions an ended session's stores name, for peers this session
   * knows none of (agent/known-sessions.ts): a session started under a new id while no
   * relay answers still routes to a peer its predecessor talked to.
   */
  learn: (mailbox: Mailbox, outbox: Outbox) => Promise<void>;
  /** Takes over the refusal receipts the ended session still owed its senders (receipts.ts `adopt`). */
  adoptReceipts: (session: string) => Promise<void>;
}

/**
 * Records `session` as live in the identity's registry, as it starts. A registry that
 * cannot be written does not stop the session: false, logged, and each heartbeat tries
 * again (Succession).
 */
export async function registerSession(stateDir: string, identity: string, session: string, host: SessionHost): Promise<boolean> {
  const registry = new SessionRegistry(stateDir, identity);
  try {
    await registry.register(session, host);
    return true;
  } catch (err) {
    log.warn('session_registry_failed', { session, path: registry.path, error: messageOf(err) });
    return false;
  }
}

/** One ended session whose mail this session holds. */
export class Inheritance {
  private notifier: Notifier | undefined;

  private constructor(
    readonly session: string,
    readonly mailbox: Mailbox,
    readonly outbox: Outbox,
    private readonly inbound: Inbound,
    private readonly outbound: Outbound,
    private readonly detach: (() => void)[],
    private readonly route: string,
    private readonly parts: HeirParts,
    private readonly lease: () => Promise<void>,
  ) {}

  /** Takes the ended session's lease and starts reading its route; undefined while another session holds the lease. */
  static async take(parts: HeirParts, session: string, sink: NoticeSink | undefined): Promise<Inheritance | undefined> {
    const path = mailboxPath(parts.stateDir, parts.identity, session);
    let lease: () => Promise<void>;
    try {
      lease = await holdFileLock(`${path}.heir`, 0);
    } catch (err) {
      if (isInterlinkError(err, 'busy')) return undefined;
      throw err;
    }
    let mailbox: Mailbox | undefined;
    let outbox: Outbox | undefined;
    try {
      mailbox = await Mailbox.open(path);
      outbox = await Outbox.open(outboxPath(parts.stateDir, parts.identity, session));
    } catch (err) {
      await Promise.all([mailbox?.close(), outbox?.close()]);
      await lease();
      throw err;
    }
    const route = formatRoute({ key: parts.identity, session });
    await parts.learn(mailbox, outbox).catch((err: unknown) => log.warn('succession_learn_failed', { ended: session, error: messageOf(err) }));
    // A file that cannot be read now keeps its receipts: the next heir (or the session itself, back) sends them.
    await parts.adoptReceipts(session).catch((err: unknown) => log.warn('succession_receipts_failed', { ended: session, error: messageOf(err) }));
    const inbound = parts.inbound(session, mailbox, outbox);
    const outbound = parts.outbound(outbox);
    const detach = parts.relays.map((relay) => inbound.attach(relay, route));
    const taken = new Inheritance(session, mailbox, outbox, inbound, outbound, detach, route, parts, lease);
    for (const relay of parts.relays) relay.readRoute(route);
    parts.goodbye(session);
    outbound.start();
    if (sink !== undefined) taken.notify(sink);
    log.info('session_mail_taken', { session: parts.session, ended: session });
    return taken;
  }

  /** Wakes this session's host for the ended session's unread mail (the notice names that mailbox). */
  notify(sink: NoticeSink): void {
    if (this.notifier !== undefined) return;
    this.notifier = new Notifier({ mailbox: this.mailbox, identity: this.parts.identity, session: this.session, sink, senderName: this.parts.senderName });
    this.notifier.start();
  }

  /** After a store or an acknowledgement here. */
  kick(): void {
    this.notifier?.kick();
  }

  async release(): Promise<void> {
    for (const relay of this.parts.relays) relay.stopReading(this.route);
    for (const off of this.detach) off();
    this.inbound.close();
    await this.outbound.stop();
    await this.notifier?.stop();
    await Promise.all([this.mailbox.close(), this.outbox.close()]);
    await this.lease();
    log.info('session_mail_released', { session: this.parts.session, ended: this.session });
  }
}

/** The registry beats and the passes that take and release ended sessions. */
export class Succession {
  private readonly registry: SessionRegistry;
  private readonly held = new Map<string, Inheritance>();
  /** Unread counts of mailboxes past the inheritance window, by session, with the file time they were counted at. */
  private readonly counts = new Map<string, { changed_at: number; unread: number }>();
  private sink: NoticeSink | undefined;
  private lastBeat = 0;
  private beatFailing = false;
  private stopped = false;
  private readonly loop = new SingleFlight(
    () => this.pass(),
    (err) => log.warn('succession_pass_failed', { session: this.parts.session, error: messageOf(err) }),
  );

  constructor(private readonly parts: HeirParts) {
    this.registry = new SessionRegistry(parts.stateDir, parts.identity);
  }

  /**
   * Starts the passes of a session `registerSession` recorded (`registered`: whether that
   * write succeeded; if not, each heartbeat tries again).
   */
  async start(registered: boolean): Promise<void> {
    this.beatFailing = !registered;
    this.lastBeat = registered ? Date.now() : 0;
    this.loop.start(PASS_MS);
    // The first pass before the session serves: mail an ended session left unread is shown
    // from the first receive_messages, and what its stores know routes the first send.
    await this.loop.settled();
  }

  /** From now on the ended sessions' notices go to this sink too. */
  notifyThrough(sink: NoticeSink): void {
    this.sink = sink;
    for (const taken of this.held.values()) taken.notify(sink);
  }

  /** After a store to, or an acknowledgement in, an ended session's mailbox: its notice is due again. */
  kick(session: string): void {
    this.held.get(session)?.kick();
  }

  /** The ended sessions whose mail this session holds now, the most recently taken last. */
  taken(): Inheritance[] {
    return [...this.held.values()];
  }

  /** Lets go of every ended session and records this process's clean exit. */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop.stop();
    await Promise.all([...this.held.values()].map((taken) => taken.release().catch((err: unknown) => log.warn('succession_release_failed', { ended: taken.session, error: messageOf(err) }))));
    this.held.clear();
    await this.registry.leave(this.parts.session).catch((err: unknown) => log.warn('session_registry_failed', { session: this.parts.session, error: messageOf(err) }));
  }

  private async pass(): Promise<number | undefined> {
    const now = Date.now();
    if (now - this.lastBeat >= HEARTBEAT_MS) await this.beat(now);
    const wanted = new Set(inheritance(await this.view(now), this.parts.session, now));
    for (const [session, taken] of this.held) {
      if (wanted.has(session)) continue;
      this.held.delete(session);
      await taken.release();
    }
    for (const session of wanted) {
      if (this.stopped || this.held.has(session)) continue;
      const taken = await Inheritance.take(this.parts, session, this.sink);
      if (taken !== undefined) this.held.set(session, taken);
    }
    return undefined;
  }

  /**
   * Records that this session still runs. A write that fails (a full disk, a read-only
   * root) is logged once until one succeeds, and the pass goes on: taking ended sessions'
   * mail needs only reads. Silent for STALE_MS, this session would count as ended and
   * another live session might take its mail alongside it, which loses nothing.
   */
  private async beat(now: number): Promise<void> {
    try {
      await this.registry.beat(this.parts.session, this.parts.host);
      if (this.beatFailing) log.warn('session_registry_written', { session: this.parts.session, message: 'the session registry is written again' });
      this.beatFailing = false;
    } catch (err) {
      if (!this.beatFailing) log.warn('session_registry_failed', { session: this.parts.session, path: this.registry.path, error: messageOf(err) });
      this.beatFailing = true;
    }
    this.lastBeat = now;
  }

  /**
   * The identity's sessions as the registry and the mailbox folder show them. A mailbox's
   * unread count matters only for a session that ended before the inheritance window (its
   * mail is taken only if some is unread), so only those mailboxes are opened, and each
   * only when its file changed since it was last counted.
   */
  private async view(now: number): Promise<SessionsView> {
    const entries = await this.registry.read();
    const files = await this.mailboxFiles();
    const view = viewSessions({ entries, mailboxes: files, isDead: processDead, now });
    const old = new Set(view.ended.filter((s) => now - s.ended_at >= INHERIT_MS).map((s) => s.session));
    if (old.size === 0 || heirOf(view.live) !== this.parts.session) return view;
    const counted = await Promise.all(files.map(async (f) => (old.has(f.session) ? { ...f, unread: await this.unreadIn(f) } : f)));
    return viewSessions({ entries, mailboxes: counted, isDead: processDead, now });
  }

  /** The mailbox files of this identity but this session's, with when each last changed. */
  private async mailboxFiles(): Promise<MailboxFile[]> {
    const dir = identityDir(this.parts.stateDir, 'mailbox', this.parts.identity);
    let names: string[];
    try {
      names = await readdir(dir);
    } catch (err) {
      if (errnoCode(err) === 'ENOENT') return [];
      throw err;
    }
    const files = new Map<string, number>();
    for (const name of names) {
      const session = sessionOfFile(name);
      if (session === undefined || session === this.parts.session) continue;
      const changed = await stat(join(dir, name)).then((s) => s.mtimeMs, () => undefined);
      if (changed !== undefined) files.set(session, Math.max(files.get(session) ?? 0, changed));
    }
    return [...files].map(([session, changed_at]) => ({ session, changed_at, unread: 0 }));
  }

  /** Unread messages in a mailbox, counted again only when its files changed. */
  private async unreadIn(file: MailboxFile): Promise<number> {
    const held = this.held.get(file.session);
    if (held !== undefined) return (await held.mailbox.stats()).unread;
    const cached = this.counts.get(file.session);
    if (cached !== undefined && cached.changed_at === file.changed_at) return cached.unread;
    let unread = 0;
    try {
      const mailbox = await Mailbox.open(mailboxPath(this.parts.stateDir, this.parts.identity, file.session), { readOnly: true });
      try {
        unread = (await mailbox.stats()).unread;
      } finally {
        await mailbox.close();
      }
    } catch (err) {
      log.debug('succession_mailbox_unreadable', { session: file.session, error: messageOf(err) });
    }
    this.counts.set(file.session, { changed_at: file.changed_at, unread });
    return unread;
  }
}
