/**
 * `interlink-mcp wait`: Claude's async Stop-hook listener (seed 003, "Claude default:
 * inbox and Stop listener"). Claude starts it after every turn with `asyncRewake`; exit 2
 * wakes the session and shows it this process's stderr.
 *
 * What it guarantees:
 * - Exit 2 only after notices (or the renewal notice) were written to stderr and the write
 *   completed; for notices, the cursor is then committed past exactly the lines shown.
 * - Exit 0 for everything else: channel mode, another live listener on the session,
 *   SIGTERM/SIGINT/SIGHUP, and every failure of its own (logged as one JSON line). A
 *   failing asyncRewake hook must never wake Claude, or each wake would start a loop.
 * - Bad arguments are a usage error: one line on stderr, exit 64, as for every command.
 *   Only 2 wakes Claude, and the plugin's hook wrapper turns any other status into 0.
 * - Right before exit 2 it prints WAKE_MARKER on stdout for the plugin's hook wrapper.
 * - At most one listener per session waits (`inbox/<session>.lock`, never waited for);
 *   a killed listener's lock is broken by the next one, which loses nothing.
 * - While idle it sleeps on an inotify-style watch of the inbox directory, with a slow
 *   poll as a safety net; no busy loop.
 */
import { watch, type FSWatcher } from 'node:fs';
import { basename } from 'node:path';
import { z } from 'zod';
import { pinnedSession } from '../../agent/session.js';
import type { Config } from '../../config/env.js';
import { inboxPaths, mailboxPath } from '../../config/layout.js';
import { unsafeNameReason } from '../../config/paths.js';
import { InterlinkError } from '../../errors.js';
import { log } from '../../log.js';
import { crashPoint } from '../../store/crash-point.js';
import { Mailbox } from '../../mailbox/mailbox.js';
import { processIsRunning } from '../../store/liveness.js';
import { commitCursor, readInboxBatch, withListenerLock, type InboxRecord } from '../../notices/inbox.js';
import { liveNotices, mailboxKey } from '../../notices/stale.js';
import { expectPositionals, parse } from '../args.js';

const EXIT_QUIET = 0;
const EXIT_WAKE = 2;
const EXIT_USAGE = 64;
const DEFAULT_RENEW_AFTER_SECS = 3000;
/** A lone notice younger than this is shown without looking at the mailbox (a stale one does no harm). */
const FRESH_NOTICE_MS = 10_000;
const MAX_RENEW_AFTER_SECS = 3000;
/** How often the inbox is looked at even if the watch said nothing. */
const SAFETY_POLL_MS = 2_000;
/** The hook hands over its JSON at once; never wait on stdin longer than this. */
const STDIN_BOUND_MS = 1_000;
const STDIN_MAX_BYTES = 8 * 1024 * 1024;
const DEFAULT_SESSION = 'main';

export const RENEWAL_NOTICE = [
  'Interlink: no messages are waiting. The background listener that wakes this session',
  'when a message arrives must be renewed before its hook times out. Nothing else needs',
  'doing: end this turn now (a one-line reply is enough) and the Stop hook starts a',
  'fresh listener.',
].join('\n');

export const waitHelp = `usage: interlink-mcp wait [--session ID] [--renew-after-secs N]

Claude's async Stop-hook listener (asyncRewake). Waits for notices in this session's
inbox, writes them to stderr and exits 2, which wakes Claude. After N idle seconds
(1-3000, default 3000) it writes a renewal notice and exits 2 so Stop re-arms it
before the hook's one-hour timeout. Exits 0 without output when INTERLINK_CHANNELS=1,
when another listener already waits for the session, and on its own errors (logged);
exits 64 with one line on stderr when its arguments are wrong. Notices whose messages
were acknowledged meanwhile are consumed without being shown.
Session: --session, INTERLINK_SESSION, the Stop payload's session_id on stdin, else main.`;

type Outcome = 'delivered' | 'renewed' | 'busy' | 'disabled' | 'terminated' | 'host_gone';

function renewAfterMs(value: string | boolean | undefined): number {
  if (value === undefined) return DEFAULT_RENEW_AFTER_SECS * 1000;
  const secs = typeof value === 'string' && /^[0-9]{1,4}$/.test(value) ? Number(value) : NaN;
  if (!(secs >= 1 && secs <= MAX_RENEW_AFTER_SECS)) {
    throw new InterlinkError('usage', `--renew-after-secs takes a whole number of seconds from 1 to ${MAX_RENEW_AFTER_SECS}`);
  }
  return secs * 1000;
}

function sessionFlag(value: string | boolean | undefined): string | undefined {
  if (typeof value !== 'string') return undefined;
  const reason = unsafeNameReason(value);
  if (reason !== undefined) throw new InterlinkError('usage', `--session ${JSON.stringify(value.slice(0, 40))} is not allowed: ${reason}`);
  return value;
}

/** Reads stdin until it ends, holds a whole JSON document, or the bound passes. */
function readStdinBounded(): Promise<string> {
  const stdin = process.stdin;
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let bytes = 0;
    const finish = (): void => {
      clearTimeout(timer);
      stdin.off('data', onData).off('end', finish).off('error', finish);
      stdin.destroy();
      resolve(bytes > STDIN_MAX_BYTES ? '' : Buffer.concat(chunks).toString('utf8'));
    };
    const onData = (chunk: Buffer): void => {
      chunks.push(chunk);
      bytes += chunk.length;
      if (bytes > STDIN_MAX_BYTES || (chunk.toString('utf8').trimEnd().endsWith('}') && parsesAsJson(Buffer.concat(chunks).toString('utf8')))) finish();
    };
    const timer = setTimeout(finish, STDIN_BOUND_MS);
    stdin.on('data', onData).on('end', finish).on('error', finish);
  });
}

function parsesAsJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

const stopPayloadSchema = z.object({ session_id: z.string().min(1) });

/** The Stop payload's `session_id`, when stdin carries a usable one. */
async function sessionFromStopPayload(): Promise<string | undefined> {
  if (process.stdin.isTTY) return undefined;
  const text = await readStdinBounded();
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    return undefined;
  }
  const parsed = stopPayloadSchema.safeParse(data);
  if (!parsed.success) return undefined;
  const reason = unsafeNameReason(parsed.data.session_id);
  if (reason === undefined) return parsed.data.session_id;
  log.warn('listener_payload_session_unusable', { reason });
  return undefined;
}

/** The session rule of agent/session.ts, with the listener's own steps 2 and 3. */
async function resolveSession(pinned: string | undefined): Promise<string> {
  return pinned ?? (await sessionFromStopPayload()) ?? DEFAULT_SESSION;
}

/** Resolves once the write reached the OS, so exiting afterwards loses nothing. */
function writeStderr(text: string): Promise<void> {
  return new Promise((resolve, reject) => process.stderr.write(text, (err) => (err ? reject(err) : resolve())));
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
    log.warn('listener_watch_failed', { dir, message: (err as Error).message });
    return undefined;
  }
}

/** What the notices' mailboxes hold unread now (see notices/stale.ts); unreadable ones are left out. */
async function oldestUnreadOf(state: string, records: readonly InboxRecord[]): Promise<Map<string, number | null>> {
  const oldest = new Map<string, number | null>();
  for (const record of records) {
    if (record.mailbox === undefined || oldest.has(mailboxKey(record.mailbox))) continue;
    const { identity, session } = record.mailbox;
    try {
      const mailbox = await Mailbox.open(mailboxPath(state, identity, session), { readOnly: true });
      try {
        oldest.set(mailboxKey(record.mailbox), (await mailbox.oldestUnreadAttention()) ?? null);
      } finally {
        await mailbox.close();
      }
    } catch (err) {
      log.warn('listener_mailbox_unreadable', { session, message: err instanceof Error ? err.message : String(err) });
    }
  }
  return oldest;
}

/**
 * Holding the listener lock: hands over the next batch, or waits until there is one.
 * `host` is the Claude process the hook runs under, when the hook passes it
 * (`INTERLINK_HOST_PID=$PPID`): the listener stops waiting once it is gone.
 */
async function listen(state: string, session: string, renewMs: number, stop: AbortSignal, host: number | undefined): Promise<Outcome> {
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
  }, renewMs);
  const onStop = (): void => bell.ring();
  stop.addEventListener('abort', onStop);
  try {
    for (;;) {
      if (stop.aborted) return 'terminated';
      // Claude exited: nobody can be woken, and holding the lock would keep the next
      // session's listener out. The notices stay for it.
      if (hostGone) return 'host_gone';
      const batch = await readInboxBatch(state, session);
      // Notices whose mail was acknowledged meanwhile, and older copies of a live one, are
      // consumed unshown: a notice only points at unread mail.
      // One notice written moments ago points at mail that was unread then: shown at once,
      // without reading the mailbox (the wake path). Older or several are judged first.
      const fresh = batch.records.length === 1 && Date.now() - batch.records[0]!.at < FRESH_NOTICE_MS;
      const shown = batch.records.length === 0 ? [] : fresh ? batch.records : liveNotices(batch.records, await oldestUnreadOf(state, batch.records));
      if (shown.length > 0) {
        await writeStderr(shown.map((r) => r.text).join('\n\n') + '\n');
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
        await writeStderr(RENEWAL_NOTICE + '\n');
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
  }
}

async function run(config: Config, pinned: string | undefined, renewMs: number, stop: AbortSignal): Promise<Outcome> {
  if (config.channels) return 'disabled';
  const session = await resolveSession(pinned);
  if (stop.aborted) return 'terminated';
  const state = config.stateDir;
  const held = await withListenerLock(state, session, () => listen(state, session, renewMs, stop, config.hostPid));
  return held.held ? held.value : 'busy';
}

/** A first signal stops the wait cleanly (lock released); a second one exits at once. */
function stopOnSignals(): AbortSignal {
  const controller = new AbortController();
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) {
    process.on(signal, () => {
      if (controller.signal.aborted) process.exit(EXIT_QUIET);
      controller.abort();
    });
  }
  return controller.signal;
}

/**
 * Printed on stdout right before exit 2, after the notices were flushed to stderr. The
 * plugin's hook wrapper passes status 2 on only when it saw this line, so a launcher
 * failure that happens to exit 2 cannot start a wake loop. (Claude shows stderr, not
 * stdout, when stderr has text.)
 */
export const WAKE_MARKER = 'INTERLINK_NOTICES';

/** The arguments, and the session they and INTERLINK_SESSION pin (a reserved one is a usage error). */
function parseArguments(argv: readonly string[], config: Config): { renewMs: number; pinned: string | undefined } {
  const args = parse(argv, { session: { type: 'string' }, 'renew-after-secs': { type: 'string' } });
  expectPositionals(args, 0, 'interlink-mcp wait [--session ID] [--renew-after-secs N]');
  return { renewMs: renewAfterMs(args.values['renew-after-secs']), pinned: pinnedSession(sessionFlag(args.values.session), config)?.session };
}

export async function wait(argv: readonly string[], config: Config): Promise<void> {
  let parsed: ReturnType<typeof parseArguments>;
  try {
    parsed = parseArguments(argv, config);
  } catch (err) {
    // A bad command line is a usage error like any command's (64, one line). It cannot
    // wake Claude: only 2 does, and the plugin's wrapper passes nothing else on.
    const message = err instanceof Error ? err.message : String(err);
    await writeStderr(`interlink-mcp wait: ${message} (see interlink-mcp wait --help)\n`);
    process.exit(EXIT_USAGE);
  }
  const stop = stopOnSignals();
  let code = EXIT_QUIET;
  try {
    // Its own failures exit 0: a hook that fails must not wake Claude (CONTRACT).
    const outcome = await run(config, parsed.pinned, parsed.renewMs, stop);
    if (outcome === 'delivered' || outcome === 'renewed') {
      await new Promise<void>((resolve) => process.stdout.write(`${WAKE_MARKER}\n`, () => resolve()));
      code = EXIT_WAKE;
    }
  } catch (err) {
    const fields = err instanceof InterlinkError ? { code: err.code, message: err.message } : { message: err instanceof Error ? err.message : String(err) };
    log.error('listener_failed', fields);
  }
  process.exit(code);
}
