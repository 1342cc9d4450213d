/**
 * `interlink-mcp wait`: Claude's async Stop-hook listener (docs/CLAUDE.md "How a message
 * reaches an idle session"). Claude starts it after every turn with `asyncRewake`; exit 2
 * wakes the session and shows it this process's stderr. The loop itself is
 * hosts/claude/listener.ts; this command parses its arguments and turns the outcome
 * into an exit code.
 *
 * What it guarantees:
 * - Exit 2 only after notices (or the renewal notice) were written to stderr and the write
 *   completed (the listener then commits the cursor past exactly the lines shown).
 * - Exit 0 for everything else: channel mode, another live listener on the session,
 *   SIGTERM/SIGINT/SIGHUP, and every failure of its own (logged as one JSON line). A
 *   failing asyncRewake hook must never wake Claude, or each wake would start a loop.
 * - Bad arguments are a usage error: one line on stderr, exit 64, as for every command.
 *   Only 2 wakes Claude, and the plugin's hook wrapper turns any other status into 0.
 * - Right before exit 2 it prints WAKE_MARKER on stdout for the plugin's hook wrapper.
 */
import { pinnedSession } from '../../agent/session.js';
import type { Config } from '../../config/env.js';
import { visibleName } from '../../config/name-characters.js';
import { unsafeNameReason } from '../../config/paths.js';
import { InterlinkError, messageOf } from '../../errors.js';
import { runListener, type ListenerOutcome } from '../../hosts/claude/listener.js';
import { sessionFromStopPayload } from '../../hosts/claude/stop-payload.js';
import { log } from '../../log.js';
import { expectPositionals, parse } from '../args.js';

const EXIT_QUIET = 0;
const EXIT_WAKE = 2;
const EXIT_USAGE = 64;
const DEFAULT_RENEW_AFTER_SECS = 3000;
const MAX_RENEW_AFTER_SECS = 3000;
const DEFAULT_SESSION = 'main';

export const waitHelp = `usage: interlink-mcp wait [--session ID] [--renew-after-secs N]

Claude's async Stop-hook listener (asyncRewake). Waits for notices in this session's
inbox, writes them to stderr and exits 2, which wakes Claude. After N idle seconds
(1-3000, default 3000) it writes a renewal notice and exits 2 so Stop re-arms it
before the hook's one-hour timeout. Exits 0 without output when INTERLINK_CHANNELS=1,
when another listener already waits for the session, and on its own errors (logged);
exits 64 with one line on stderr when its arguments are wrong. Notices whose messages
were acknowledged meanwhile are consumed without being shown.
Session: --session, INTERLINK_SESSION, the Stop payload's session_id on stdin, else main.`;

type Outcome = ListenerOutcome | 'disabled';

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
  const session = value.normalize('NFC');
  const reason = unsafeNameReason(session);
  if (reason !== undefined) throw new InterlinkError('usage', `--session ${JSON.stringify(visibleName(value.slice(0, 40)))} is not allowed: ${reason}`);
  return session;
}

/** The session rule of agent/session.ts, with the listener's own steps 2 and 3. */
async function resolveSession(pinned: string | undefined): Promise<string> {
  return pinned ?? (await sessionFromStopPayload()) ?? DEFAULT_SESSION;
}

/** Resolves once the write reached the OS, so exiting afterwards loses nothing. */
function writeStderr(text: string): Promise<void> {
  return new Promise((resolve, reject) => process.stderr.write(text, (err) => (err ? reject(err) : resolve())));
}

async function run(config: Config, pinned: string | undefined, renewMs: number, stop: AbortSignal): Promise<Outcome> {
  if (config.channels) return 'disabled';
  const session = await resolveSession(pinned);
  if (stop.aborted) return 'terminated';
  return runListener({ stateDir: config.stateDir, session, renewMs, stop, host: config.hostPid, show: writeStderr });
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
    const message = messageOf(err);
    await writeStderr(`interlink-mcp wait: ${message} (see interlink-mcp wait --help)\n`);
    process.exit(EXIT_USAGE);
  }
  const stop = stopOnSignals();
  let code = EXIT_QUIET;
  try {
    // Its own failures exit 0: a hook that fails must not wake Claude (README "Commands").
    const outcome = await run(config, parsed.pinned, parsed.renewMs, stop);
    if (outcome === 'delivered' || outcome === 'renewed') {
      await new Promise<void>((resolve) => process.stdout.write(`${WAKE_MARKER}\n`, () => resolve()));
      code = EXIT_WAKE;
    }
  } catch (err) {
    const fields = err instanceof InterlinkError ? { code: err.code, message: err.message } : { message: messageOf(err) };
    log.error('listener_failed', fields);
  }
  process.exit(code);
}
