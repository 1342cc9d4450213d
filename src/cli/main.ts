#!/usr/bin/env node
/**
 * `interlink-mcp <command>`: a thin dispatcher. Exit codes: 0 success, 1 failure with a
 * one-line reason on stderr, 64 usage error (also one line). With --json a failure is
 * also `{"error": {"code", "message"}}` on stdout. `wait` exits by its own rules.
 * The environment is parsed once here (config/env.ts) and handed to the command; a
 * variable with a value it does not take is a usage error of every command, `wait` too.
 */
import { loadConfig, type Config } from '../config/env.js';
import { InterlinkError, messageOf, type ErrorCode, type ToolCode } from '../errors.js';
import { setLogLevel, type LogSetting } from '../log.js';
import { reportDamageWith } from '../store/damage.js';
import { resultPrinted } from './args.js';

const EXIT_FAILURE = 1;
const EXIT_USAGE = 64;

interface Loaded {
  run: (argv: readonly string[], config: Config) => Promise<void>;
  help: string;
}

interface Command {
  /**
   * The command's module, imported when that command runs: loading every command's
   * dependencies took most of a CLI start (0.55 s of CPU for a usage error), and `wait`
   * runs at the end of every Claude turn.
   */
  load: () => Promise<Loaded>;
  summary: string;
  /** The log level when INTERLINK_LOG is unset (default `warn`). */
  log?: LogSetting;
}

const commands: Record<string, Command> = {
  serve: { load: async () => import('./commands/serve.js').then((m) => ({ run: m.serve, help: m.serveHelp })), summary: 'MCP server of one session over stdio (the default)' },
  keygen: { load: async () => import('./commands/identity.js').then((m) => ({ run: m.keygen, help: m.keygenHelp })), summary: 'create this identity (refuses to overwrite without --force)' },
  whoami: { load: async () => import('./commands/identity.js').then((m) => ({ run: m.whoami, help: m.whoamiHelp })), summary: 'print the public key and fingerprint' },
  peers: { load: async () => import('./commands/peers.js').then((m) => ({ run: m.peers, help: m.peersHelp })), summary: 'list, add or remove peers' },
  audience: {
    load: async () => import('./commands/audience.js').then((m) => ({ run: m.audience, help: m.audienceHelp })),
    summary: 'list, add to or remove audiences: named groups of peers one message reaches',
  },
  pair: {
    load: async () => import('./commands/pair.js').then((m) => ({ run: m.pair, help: m.pairHelp })),
    summary: 'pair with another identity: request, list, accept, reject, confirm, cancel (compare the code)',
  },
  status: { load: async () => import('./commands/status.js').then((m) => ({ run: m.status, help: m.statusHelp })), summary: 'identity, peers, relays (and the local one), unread and unsent messages' },
  inbox: { load: async () => import('./commands/inbox.js').then((m) => ({ run: m.inbox, help: m.inboxHelp })), summary: 'messages received (--unread) or sent (--sent) and their states (reads only)' },
  relay: {
    load: async () => import('./commands/relay.js').then((m) => ({ run: m.relay, help: m.relayHelp })),
    summary: 'run the WebSocket relay (--addr HOST:PORT, --db DIR); `relay stop` stops the local one',
    log: 'info',
  },
  console: {
    load: async () => import('./commands/console.js').then((m) => ({ run: m.consoleCommand, help: m.consoleHelp })),
    summary: 'a web page for this identity: sessions, conversations live, pairing, recovery',
  },
  demo: { load: async () => import('./commands/demo.js').then((m) => ({ run: m.demo, help: m.demoHelp })), summary: 'show a signed message go through the gate into a mailbox' },
  outbox: { load: async () => import('./commands/outbox.js').then((m) => ({ run: m.outbox, help: m.outboxHelp })), summary: 'drop a message no relay has accepted yet (outbox drop <msg_id>)' },
  'failed-deliveries': {
    load: async () => import('./commands/failed.js').then((m) => ({ run: m.failedDeliveries, help: m.failedHelp })),
    summary: 'Codex notices codex queue did not take: list, read, retry, discard',
  },
  wait: { load: async () => import('./commands/wait.js').then((m) => ({ run: m.wait, help: m.waitHelp })), summary: "Claude's Stop-hook listener: exit 2 with this session's notices on stderr" },
};

function usage(): string {
  const width = Math.max(...Object.keys(commands).map((c) => c.length));
  const lines = Object.entries(commands).map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`);
  return [
    'usage: interlink-mcp [<command>] [options]',
    '',
    'commands:',
    ...lines,
    '',
    'Every command takes --help. With no command, an MCP host (stdin not a terminal) gets',
    'the server of `serve`; on a terminal this help is printed instead.',
  ].join('\n');
}

/** One line, whatever the error held: the exit-code rule promises a one-line reason. */
function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, ' ').trim();
}

/**
 * A usage error names what was wrong and where the full usage is. Some commands throw
 * their whole help text as the reason; its first line is the usage itself.
 */
function usageLine(name: string, message: string): string {
  const first = message.split('\n')[0] ?? message;
  return `${first} (see interlink-mcp ${name} --help)`;
}

/** Options end at `--`; only an option before it asks for JSON. */
function wantsJson(argv: readonly string[]): boolean {
  const end = argv.indexOf('--');
  return (end < 0 ? argv : argv.slice(0, end)).includes('--json');
}

/**
 * A failure: one line on stderr, and with --json also `{"error": {"code", "message"}}` on
 * stdout, so a JSON consumer reading stdout always gets a JSON document. `name` is the
 * command the line names; undefined before there is one (an unknown command).
 */
function fail(name: string | undefined, code: ErrorCode | ToolCode, message: string, json: boolean): void {
  // One JSON document on stdout: an error, unless the command printed its result first.
  if (json && !resultPrinted()) process.stdout.write(JSON.stringify({ error: { code, message } }, null, 2) + '\n');
  process.stderr.write(`${name === undefined ? 'interlink-mcp' : `interlink-mcp ${name}`}: ${message}\n`);
}

async function main(argv: readonly string[]): Promise<number> {
  // On a terminal, a bare `interlink-mcp` is a person asking what this is: serving would
  // wait silently on stdin (and create an identity and start a relay on the way).
  if (argv.length === 0 && process.stdin.isTTY === true) {
    process.stdout.write(usage() + '\n');
    return 0;
  }
  // With no command, or only options, this is an MCP server (what hosts start).
  const first = argv[0];
  const [name = 'serve', ...rest] = first === undefined || first.startsWith('--session') || first === '--codex' ? ['serve', ...argv] : argv;
  if (name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(usage() + '\n');
    return 0;
  }
  const command = commands[name];
  if (command === undefined) {
    fail(undefined, 'usage', `unknown command ${JSON.stringify(name)} (see interlink-mcp --help)`, wantsJson(argv));
    return EXIT_USAGE;
  }
  const loaded = await command.load();
  if (rest.includes('--help') || rest.includes('-h')) {
    process.stdout.write(loaded.help + '\n');
    return 0;
  }
  // At a terminal a damaged file is reported as the sentence itself; `serve` logs it as JSON.
  if (name !== 'serve') reportDamageWith((_damage, sentence) => process.stderr.write(`interlink-mcp ${name}: ${sentence}\n`));
  const json = wantsJson(rest);
  let config: Config;
  try {
    config = loadConfig(process.env);
  } catch (err) {
    if (!(err instanceof InterlinkError)) throw err;
    fail(name, err.code, err.cliMessage, json);
    return EXIT_USAGE;
  }
  // A relay's log is what its operator reads (relay_summary); a session's goes to its host.
  setLogLevel(config.log ?? command.log ?? 'warn');
  try {
    await loaded.run(rest, config);
    return 0;
  } catch (err) {
    if (err instanceof InterlinkError && err.code === 'usage') {
      fail(name, err.code, oneLine(usageLine(name, err.cliMessage)), json);
      return EXIT_USAGE;
    }
    const code = err instanceof InterlinkError ? err.code : 'internal';
    const message = err instanceof InterlinkError ? err.cliMessage : messageOf(err);
    fail(name, code, oneLine(message), json);
    return EXIT_FAILURE;
  }
}

process.exitCode = await main(process.argv.slice(2));
