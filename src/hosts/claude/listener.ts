/**
 * Claude's Stop-hook listener loop (docs/CLAUDE.md "How a message reaches an idle session"),
 * run by `interlink-mcp wait`: it waits for notices in one session's inbox and hands them
 * over once.
 *
 * What it guarantees:
 * - Notices (or the renewal notice) are handed to `show`; for notices, the cursor is
 *   committed past exactly the lines shown, and only after `show` resolved.
 * - At most one listener per session waits (`inbox/<session>.lock`, never waited for);
 *   a killed listener's lock is broken by the next one, which loses nothing.
 * - While idle it sleeps on an inotify-style watch of the inbox directory, with a slow
 *   poll as a safety net; no busy loop.
 */
import { existsSync, watch, type FSWatcher } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { basename } from 'node:path';
import { inboxPaths, mailboxPath, storeDir } from '../../config/layout.js';
import { isInterlinkError, messageOf } from '../../errors.js';
import { log } from '../../log.js';
import { Mailbox } from '../../mailbox/mailbox.js';
import { liveNotices, mailboxKey } from '../../notices/stale.js';
import { crashPoint } from '../../store/crash-point.js';
import { journalPathOf } from '../../store/journal.js';
import { processIsRunning } from '../../store/liveness.js';
import { withFileLock } from '../../store/lock.js';
import { commitCursor, readInboxBatch, type InboxRecord } from './inbox.js';

/** How often the inbox is looked at even if the watch said nothing. */
const SAFETY_POLL_MS = 2_000;

export const RENEWAL_NOTICE = [
  'Interlink: no messages are waiting. The background listener that wakes this session',
  'when a message arrives must be renewed before its hook times out. Nothing else needs',
  'doing: end this turn now (a one-line reply is enough) and the Stop hook starts a',
  'fresh listener.',
].join('\n');

export type ListenerOutcome = 'delivered' | 'renewed' | 'busy' | 'terminated' | 'host_gone';

export interface ListenerOptions {
  stateDir: string;
  session: string;
  /** After this long with nothing to show, the renewal notice is shown. */
  renewMs: number;
  stop: AbortSignal;
  /**
   * The Claude process the hook runs under, when the hook passes it
   * (`INTERLINK_HOST_PID=$PPID`): the listener stops waiting once it is gone.
   */
  host: number | undefined;
  /** Resolves once the text is out (the process's stderr, for Claude to read). */
  show: (text: string) => Promise<void>;
}

interface MailboxName {
  identity: string;
  session: string;
}

/** `withFileLock` takes the file a lock guards and adds `.lock` itself. */
function lockTarget(lockFile: string): string {
  return lockFile.slice(0, -'.lock'.length);
}

/**
 * Runs `fn` holding the session's listener lock, without waiting for it: when a live
 * process holds it, resolves `{held: false}` at once. A dead holder's lock is broken.
 */
export async function withListenerLock<T>(stateDir: string, session: string, fn: () => Promise<T>): Promise<{ held: true; value: T } | { held: false }> {
  const paths = inboxPaths(stateDir, session);
  let entered = false;
  try {
    const value = await withFileLock(
      lockTarget(paths.lock),
      () => {
        entered = true;
        return fn();
      },
      { timeoutMs: 0 },
    );
    return { held: true, value };
  } catch (err) {
    if (!entered && isInterlinkError(err, 'busy')) return { held: false };
    throw err;
  }
}

/** A one-slot doorbell: a ring while nobody waits is kept for the next wait. */
class Doorbell {
  private rung = false;
  private waiter: (() => void) | undefined;

  ring(): void {
    this.rung = true;
    this.waiter?.();
  }

  next(): Promise<void> {
    return new Promise((resolve) => {
      this.waiter = () => {
        this.waiter = undefined;
        this.rung = false;
        resolve();
      };
      if (this.rung) this.waiter();
    });
  }
}

function watchInbox(dir: string, file: string, bell: Doorbell): FSWatcher | undefined {
  const name = basename(file);
  try {
    const watcher = watch(dir, (_event, changed) => {
      if (changed === null || String(changed) === name) bell.ring();
    });
    watcher.on('error', (err) => {
      log.warn('listener_watch_failed', { dir, message: err.message });
      watcher.close();
    });
    return watcher;
  } catch (err) {
    log.warn('listener_watch_failed', { dir, message: messageOf(err) });
    return undefined;
  }
}

/**
 * Read-only views of the mailboxes notices name, kept open for the listener's life: a
 * view reads the whole journal once, and after that only what was appended since. A
 * mailbox opened while the listener is idle (`warm`) costs the wake nothing but the
 * store that woke it.
 */
class MailboxViews {
  private readonly views = new Map<string, Promise<Mailbox>>();
  private closed = false;

  constructor(private readonly state: string) {}

  /**
   * Reads ahead the mailboxes this session's notices most likely name: the session's own,
   * of each identity with one here (unless the hooks rebound the session, that is where
   * its notices point). Found by listing the mailbox folder: the listener never reads the key.
   */
  async warm(session: string): Promise<void> {
    const identities = await readdir(storeDir(this.state, 'mailbox')).catch(() => []);
    for (const identity of identities) {
      if (this.closed) return;
      let path: string;
      try {
        path = mailboxPath(this.state, identity, session);
      } catch {
        continue;
      }
      // Not yet written (a session that never received mail): nothing to read ahead of time.
      if (!existsSync(path) && !existsSync(journalPathOf(path))) continue;
      const mailbox = { identity, session };
      await this.view(mailbox).then(
        () => log.debug('listener_mailbox_read', { session }),
        () => this.views.delete(mailboxKey(mailbox)),
      );
    }
  }

  /** What the notices' mailboxes hold unread now (see notices/stale.ts); unreadable ones are left out. */
  async oldestUnreadOf(records: readonly InboxRecord[]): Promise<Map<string, number | null>> {
    const oldest = new Map<string, number | null>();
    for (const record of records) {
      if (record.mailbox === undefined || oldest.has(mailboxKey(record.mailbox))) continue;
      try {
        oldest.set(mailboxKey(record.mailbox), (await (await this.view(record.mailbox)).oldestUnreadAttention()) ?? null);
      } catch (err) {
        this.views.delete(mailboxKey(record.mailbox));
        log.warn('listener_mailbox_unreadable', { session: record.mailbox.session, message: messageOf(err) });
      }
    }
    return oldest;
  }

  async close(): Promise<void> {
    this.closed = true;
    const views = [...this.views.values()];
    this.views.clear();
    await Promise.all(views.map(async (view) => (await view.catch(() => undefined))?.close()));
  }

  private view(mailbox: MailboxName): Promise<Mailbox> {
    const key = mailboxKey(mailbox);
    let view = this.views.get(key);
    if (view === undefined) {
      view = Mailbox.open(mailboxPath(this.state, mailbox.identity, mailbox.session), { readOnly: true });
      this.views.set(key, view);
    }
    return view;
  }
}

/** Holding the listener lock: hands over the next batch, or waits until there is one. */
async function listen(options: ListenerOptions): Promise<Exclude<ListenerOutcome, 'busy'>> {
  const { stateDir: state, session, stop, host, show } = options;
  const paths = inboxPaths(state, session);
  const bell = new Doorbell();
  let renewDue = false;
  let announced = false;
  // The watch starts before the first read, so an append in between still rings.
  const watcher = watchInbox(paths.dir, paths.file, bell);
  let hostGone = false;
  const poll = setInterval(() => {
    if (host !== undefined && !processIsRunning(host)) hostGone = true;
    bell.ring();
  }, SAFETY_POLL_MS);
  const renew = setTimeout(() => {
    renewDue = true;
    bell.ring();
  }, options.renewMs);
  const onStop = (): void => bell.ring();
  stop.addEventListener('abort', onStop);
  const mailboxes = new MailboxViews(state);
  void mailboxes.warm(session);
  try {
    for (;;) {
      if (stop.aborted) return 'terminated';
      // Claude exited: nobody can be woken, and holding the lock would keep the next
      // session's listener out. The notices stay for it.
      if (hostGone) return 'host_gone';
      const batch = await readInboxBatch(state, session);
      // Notices whose mail was acknowledged meanwhile, and older copies of a live one, are
      // consumed unshown: a notice only points at unread mail, and a wake costs the agent a
      // turn. Every notice is judged, however new: the notifier commits its mail before
      // writing it, so this read sees that mail, unread or acknowledged.
      const shown = batch.records.length === 0 ? [] : liveNotices(batch.records, await mailboxes.oldestUnreadOf(batch.records));
      if (shown.length > 0) {
        await show(shown.map((r) => r.text).join('\n\n') + '\n');
        crashPoint('listener.after_output');
        await commitCursor(state, session, batch.endOffset);
        return 'delivered';
      }
      // Only stale notices or invalid lines: consume them so they are not read again.
      if (batch.endOffset !== batch.startOffset) {
        if (batch.records.length > 0) log.debug('listener_stale_notices', { session, count: batch.records.length });
        await commitCursor(state, session, batch.endOffset);
        continue;
      }
      if (renewDue) {
        await show(RENEWAL_NOTICE + '\n');
        return 'renewed';
      }
      if (!announced) log.debug('listener_waiting', { session, pid: process.pid });
      announced = true;
      await bell.next();
    }
  } finally {
    watcher?.close();
    clearInterval(poll);
    clearTimeout(renew);
    stop.removeEventListener('abort', onStop);
    await mailboxes.close();
  }
}

/** Waits for the session's next notices under its listener lock; `busy` when another live listener holds it. */
export async function runListener(options: ListenerOptions): Promise<ListenerOutcome> {
  const held = await withListenerLock(options.stateDir, options.session, () => listen(options));
  return held.held ? held.value : 'busy';
}
