/**
 * The configuration: every `INTERLINK_*` variable, parsed once by the CLI at startup into
 * a typed `Config` that the commands pass down. No other module reads these variables.
 * Unset and empty mean the default. A value the schema refuses is one error naming the
 * variable and what it accepts. README's environment table is tested against
 * `VARIABLES` (test/config/config-env.test.ts), so the two cannot drift apart.
 */
import { homedir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { InterlinkError } from '../errors.js';
import { LOG_SETTINGS, type LogSetting } from '../log.js';
import { defaultKeyPath, defaultPeersPath } from './layout.js';
import { MAX_NAME_BYTES, unsafeNameReason } from './paths.js';
import { parseRelayUrl } from './relay-url.js';

export type Env = Readonly<Record<string, string | undefined>>;

export type Mode = 'claude' | 'codex';

export const DEFAULT_LOCAL_RELAY = '127.0.0.1:9440';
const MAX_ANNOUNCED_NAME = 128;

/** Unset and empty are the same: the default. */
const text = z
  .string()
  .optional()
  .transform((v) => (v === '' ? undefined : v));

/** Surrounding white space is a typing slip, not part of a URL, address or name. */
const trimmed = z
  .string()
  .optional()
  .transform((v) => (v === undefined || v.trim() === '' ? undefined : v.trim()));

/** The errors a fault point can inject (store/fault-point.ts), each as the kernel reports it. */
export const FAULT_CODES = ['EIO', 'ENOSPC', 'EROFS'] as const;

/** What INTERLINK_FAULT_AT asks for: `<point>[@<n>][:<code>][*<count>][ while <file>]`. */
export interface FaultSpec {
  point: string;
  /** The passage from which it fails (1: the first). */
  from: number;
  code: (typeof FAULT_CODES)[number];
  /** How many times it fails at most; undefined: no limit. */
  count: number | undefined;
  /** It fails only while this file exists; undefined: always. */
  whileFile: string | undefined;
}

const FAULT_GRAMMAR = new RegExp(`^([a-z][a-z0-9_.]*)(?:@([1-9][0-9]{0,8}))?(?::(${FAULT_CODES.join('|')}))?(?:\\*([1-9][0-9]{0,8}))?(?: while (\\S.*))?$`);

function faultSpecOf(value: string): FaultSpec {
  const [, point, from, code, count, whileFile] = FAULT_GRAMMAR.exec(value)!;
  return { point: point!, from: from === undefined ? 1 : Number(from), code: (code as FaultSpec['code'] | undefined) ?? 'EIO', count: count === undefined ? undefined : Number(count), whileFile };
}

/** Each variable's schema; the parsed object is what `configFrom` builds `Config` from. */
const SCHEMA = z.object({
  INTERLINK_CONFIG_DIR: text,
  INTERLINK_KEY: text,
  INTERLINK_PEERS: text,
  INTERLINK_STATE_DIR: text,
  INTERLINK_URL: trimmed
    .transform((v) => v?.split(',').map((url) => url.trim()).filter((url) => url !== ''))
    .superRefine((urls, ctx) => {
      for (const url of urls ?? []) {
        const parsed = parseRelayUrl(url);
        if ('error' in parsed) ctx.addIssue({ code: 'custom', message: parsed.error });
      }
    }),
  INTERLINK_LOCAL_RELAY: trimmed,
  INTERLINK_TLS_CA: text,
  INTERLINK_NAME: trimmed.transform((v) => v?.slice(0, MAX_ANNOUNCED_NAME)),
  // Normalised to NFC like every name that enters (config/name-characters.ts).
  INTERLINK_SESSION: text.transform((v) => v?.normalize('NFC')).superRefine((v, ctx) => {
    const reason = v === undefined ? undefined : unsafeNameReason(v);
    if (reason !== undefined) ctx.addIssue({ code: 'custom', message: reason });
  }),
  INTERLINK_MODE: text.pipe(z.enum(['claude', 'codex']).optional()),
  INTERLINK_CHANNELS: text.pipe(z.enum(['0', '1']).optional()),
  INTERLINK_CODEX_BIN: text,
  INTERLINK_LOG: text.transform((v) => v?.toLowerCase()).pipe(z.enum(LOG_SETTINGS).optional()),
  // At most 15 digits: every such number is a safe integer (real pids have 7 at most).
  INTERLINK_HOST_PID: text.pipe(z.string().regex(/^[1-9][0-9]{0,14}$/).transform(Number).optional()),
  INTERLINK_CRASH_AT: text,
  INTERLINK_FAULT_AT: text.pipe(z.string().regex(FAULT_GRAMMAR, '').transform(faultSpecOf).optional()),
  INTERLINK_BENCH_UNSEALED: text.pipe(z.enum(['0', '1']).optional()),
});

export type VariableName = keyof typeof SCHEMA.shape;

export interface VariableDoc {
  /** What the variable sets. */
  meaning: string;
  /** The values it takes; also the second half of the error for a value it refuses. */
  accepts: string;
  /** What holds when it is unset or empty. */
  default: string;
}

/** The README's environment table, row by row (Markdown: backticks mark literal text). */
export const VARIABLES: Readonly<Record<VariableName, VariableDoc>> = {
  INTERLINK_CONFIG_DIR: { meaning: 'the config root: identity and peers', accepts: 'a directory', default: '`$XDG_CONFIG_HOME/interlink`, else `~/.config/interlink`' },
  INTERLINK_KEY: { meaning: 'the identity (Ed25519 seed, base64url, mode 0600)', accepts: 'a file path', default: '`<config>/id.key`' },
  INTERLINK_PEERS: { meaning: 'the peers file', accepts: 'a file path', default: '`<config>/peers.json`' },
  INTERLINK_STATE_DIR: { meaning: 'the state root: mailboxes, outboxes, inboxes, pairing, failed deliveries, the local relay', accepts: 'a directory', default: '`$XDG_STATE_HOME/interlink`, else `~/.local/state/interlink`' },
  INTERLINK_URL: { meaning: 'the relays', accepts: "relay URLs, comma-separated, each optionally pinning the relay's key: `wss://HOST:PORT#key=<key>`", default: `\`ws://${DEFAULT_LOCAL_RELAY}\`, the local relay (\`serve\` starts it if none answers)` },
  INTERLINK_LOCAL_RELAY: { meaning: "the zero-config local relay's address", accepts: '`HOST:PORT`', default: `\`${DEFAULT_LOCAL_RELAY}\`` },
  INTERLINK_TLS_CA: {
    meaning: '`wss://` relays: certificates trusted besides the public CAs Node ships (a self-signed relay certificate, a private CA)',
    accepts: 'a PEM file path',
    default: "none: only Node's CAs (and `NODE_EXTRA_CA_CERTS`)",
  },
  INTERLINK_NAME: { meaning: 'the name a session announces (and claims when pairing)', accepts: `any text (up to ${MAX_ANNOUNCED_NAME} characters are used)`, default: '`user@host`' },
  INTERLINK_SESSION: {
    meaning: 'the session id, after `--session` (`cli` is reserved for `pair`)',
    accepts: `a session id: 1 to ${MAX_NAME_BYTES} bytes, no \`/\`, \`\\\`, \`..\`, control characters or surrounding white space`,
    default: "the server: `CLAUDE_CODE_SESSION_ID`, else generated; the listener: the Stop payload's `session_id`, else `main`; Codex mode: the thread UUID",
  },
  INTERLINK_MODE: { meaning: 'which host `serve` serves (`serve --codex` also chooses Codex)', accepts: '`claude` or `codex`', default: '`claude`' },
  INTERLINK_CHANNELS: { meaning: 'Claude channels mode (`interlinked` turns it on); the listener then exits at once', accepts: '`1` (on) or `0` (off)', default: '`0`' },
  INTERLINK_CODEX_BIN: { meaning: 'the `codex` that Codex notices run', accepts: 'an executable name or path', default: '`codex` on `PATH`' },
  INTERLINK_LOG: { meaning: 'what is logged to stderr (JSON lines)', accepts: '`debug`, `info`, `warn`, `error` or `silent` (in any case)', default: '`warn`; `info` for `relay`' },
  INTERLINK_HOST_PID: { meaning: "the Claude process the listener serves (the plugin's hook passes `$PPID`); the listener stops when it is gone", accepts: 'a process id', default: 'none: the listener waits for notices or its renewal' },
  INTERLINK_CRASH_AT: { meaning: 'crash tests only: the named crash point at which the process kills itself', accepts: 'a crash point name, or `<name>@<n>` for its n-th passage', default: 'none: crash points do nothing' },
  INTERLINK_FAULT_AT: {
    meaning: 'fault tests only: the named write or sync step that fails with an I/O error instead of doing its I/O (docs/RELIABILITY.md)',
    accepts: '`<point>[@<n>][:<code>][*<count>][ while <file>]`: the code `EIO` (the default), `ENOSPC` or `EROFS`, from the n-th passage on, at most count times, only while the file exists',
    default: 'none: fault points do nothing',
  },
  INTERLINK_BENCH_UNSEALED: {
    meaning: 'benchmark only (`npm run bench` compares with it): `serve` sends clear version 3 envelopes that every relay can read, admits clear ones from every peer, and sends no receipts; it logs a warning. Never for real use',
    accepts: '`1` (on) or `0` (off)',
    default: '`0`',
  },
};

/** Everything the commands take from the environment, resolved to the values they use. */
export interface Config {
  configDir: string;
  keyPath: string;
  peersPath: string;
  stateDir: string;
  /**
   * As written, each perhaps with a `#key=` pin (config/relay-url.ts splits it off);
   * undefined: none configured, use (and if need be start) the local relay.
   */
  relays: readonly string[] | undefined;
  localRelay: string;
  /** A PEM file of certificates `wss://` relays may present besides the public CAs (wire/tls.ts reads it). */
  tlsCa: string | undefined;
  /** The announced name; undefined: `user@host`. */
  name: string | undefined;
  /** INTERLINK_SESSION, a safe name (agent/session.ts adds the rest of the session rule). */
  session: string | undefined;
  /** The session id Claude Code gives the servers it starts. */
  claudeSession: string | undefined;
  mode: Mode;
  channels: boolean;
  codexBin: string;
  /** INTERLINK_LOG; undefined: the command's default (`info` for `relay`, `warn` for the others). */
  log: LogSetting | undefined;
  hostPid: number | undefined;
  /** INTERLINK_BENCH_UNSEALED: the benchmark's baseline without sealing and receipts. */
  benchUnsealed: boolean;
}

/** Parses the environment once; a value the schema refuses throws `bad_config`. */
export function loadConfig(env: Env): Config {
  const parsed = SCHEMA.safeParse(env);
  if (!parsed.success) throw configError(parsed.error, env);
  const v = parsed.data;
  const configDir = v.INTERLINK_CONFIG_DIR ?? join(nonEmpty(env.XDG_CONFIG_HOME) ?? join(homedir(), '.config'), 'interlink');
  return {
    configDir,
    keyPath: v.INTERLINK_KEY ?? defaultKeyPath(configDir),
    peersPath: v.INTERLINK_PEERS ?? defaultPeersPath(configDir),
    stateDir: v.INTERLINK_STATE_DIR ?? join(nonEmpty(env.XDG_STATE_HOME) ?? join(homedir(), '.local', 'state'), 'interlink'),
    relays: v.INTERLINK_URL,
    localRelay: v.INTERLINK_LOCAL_RELAY ?? DEFAULT_LOCAL_RELAY,
    tlsCa: v.INTERLINK_TLS_CA,
    name: v.INTERLINK_NAME,
    session: v.INTERLINK_SESSION,
    claudeSession: nonEmpty(env.CLAUDE_CODE_SESSION_ID),
    mode: v.INTERLINK_MODE ?? 'claude',
    channels: v.INTERLINK_CHANNELS === '1',
    codexBin: v.INTERLINK_CODEX_BIN ?? 'codex',
    log: v.INTERLINK_LOG,
    hostPid: v.INTERLINK_HOST_PID,
    benchUnsealed: v.INTERLINK_BENCH_UNSEALED === '1',
  };
}

/**
 * The crash point named by INTERLINK_CRASH_AT. Read on its own, at module load of
 * store/crash-point.ts, because the crash tests also run writers that are not the CLI.
 */
export function crashPointTarget(env: Env = process.env): string | undefined {
  return SCHEMA.shape.INTERLINK_CRASH_AT.parse(env.INTERLINK_CRASH_AT);
}

/**
 * The fault INTERLINK_FAULT_AT asks for. Read on its own, at module load of
 * store/fault-point.ts, like the crash point; a value that does not parse is no fault here
 * (the CLI refuses it at start, as `bad_config`).
 */
export function faultPointSpec(env: Env = process.env): FaultSpec | undefined {
  const parsed = SCHEMA.shape.INTERLINK_FAULT_AT.safeParse(env.INTERLINK_FAULT_AT);
  return parsed.success ? parsed.data : undefined;
}

function nonEmpty(value: string | undefined): string | undefined {
  return value !== undefined && value !== '' ? value : undefined;
}

/** One sentence for every refused variable: its name, the value, why (if known), and what it takes. */
function configError(error: z.ZodError, env: Env): InterlinkError {
  const names = [...new Set(error.issues.map((issue) => String(issue.path[0]) as VariableName))];
  const parts = names.map((name) => {
    const custom = error.issues.find((issue) => issue.path[0] === name && issue.code === 'custom' && issue.message !== '');
    const why = custom !== undefined ? ` (${custom.message})` : '';
    const value = JSON.stringify((env[name] ?? '').slice(0, 40));
    return `${name}=${value} is not accepted${why}: it takes ${VARIABLES[name].accepts.replaceAll('`', '')} (or leave it unset).`;
  });
  return new InterlinkError('bad_config', parts.join(' '), { variables: names });
}
