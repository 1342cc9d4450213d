#!/usr/bin/env node
/**
 * `interlink-mcp <command>`: a thin dispatcher. Exit codes: 0 success, 1 failure with a
 * one-line reason on stderr, 64 usage error.
 */
import { InterlinkError } from '../errors.js';
import { reportDamageWith } from '../store/damage.js';
import { demo, demoHelp } from './commands/demo.js';
import { failedDeliveries, failedHelp } from './commands/failed.js';
import { keygen, keygenHelp, whoami, whoamiHelp } from './commands/identity.js';
import { pair, pairHelp } from './commands/pair.js';
import { peers, peersHelp } from './commands/peers.js';
import { relay, relayHelp } from './commands/relay.js';
import { serve, serveHelp } from './commands/serve.js';
import { inbox, inboxHelp, status, statusHelp } from './commands/status.js';
import { wait, waitHelp } from './commands/wait.js';

const EXIT_FAILURE = 1;
const EXIT_USAGE = 64;

interface Command {
  run: (argv: readonly string[]) => Promise<void>;
  help: string;
  summary: string;
}

const commands: Record<string, Command> = {
  serve: { run: serve, help: serveHelp, summary: 'MCP server of one session over stdio (the default)' },
  keygen: { run: keygen, help: keygenHelp, summary: 'create this identity (refuses to overwrite without --force)' },
  whoami: { run: whoami, help: whoamiHelp, summary: 'print the public key and fingerprint' },
  peers: { run: peers, help: peersHelp, summary: 'list, add or remove peers' },
  pair: { run: pair, help: pairHelp, summary: 'pair with another identity: request, list, accept, reject (compare the code)' },
  status: { run: status, help: statusHelp, summary: 'identity, peers, relays, unread and unsent messages' },
  inbox: { run: inbox, help: inboxHelp, summary: 'messages in the mailboxes and their states (reads only)' },
  relay: { run: relay, help: relayHelp, summary: 'run the WebSocket relay (--addr HOST:PORT, --db DIR for durable queues)' },
  demo: { run: demo, help: demoHelp, summary: 'show a signed message go through the gate into a mailbox' },
  'failed-deliveries': { run: failedDeliveries, help: failedHelp, summary: 'Codex notices codex queue did not take: list, read, retry, discard' },
  wait: { run: wait, help: waitHelp, summary: "Claude's Stop-hook listener: exit 2 with this session's notices on stderr" },
};

function usage(): string {
  const width = Math.max(...Object.keys(commands).map((c) => c.length));
  const lines = Object.entries(commands).map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`);
  return ['usage: interlink-mcp [<command>] [options]', '', 'commands:', ...lines, '', 'Every command takes --help.'].join('\n');
}

async function main(argv: readonly string[]): Promise<number> {
  // With no command, or only options, this is an MCP server (what hosts start).
  const first = argv[0];
  const [name = 'serve', ...rest] = first === undefined || first.startsWith('--session') || first === '--codex' ? ['serve', ...argv] : argv;
  if (name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(usage() + '\n');
    return 0;
  }
  const command = commands[name];
  if (command === undefined) {
    process.stderr.write(`interlink-mcp: unknown command ${JSON.stringify(name)}\n${usage()}\n`);
    return EXIT_USAGE;
  }
  if (rest.includes('--help') || rest.includes('-h')) {
    process.stdout.write(command.help + '\n');
    return 0;
  }
  // At a terminal a damaged file is reported as the sentence itself; `serve` logs it as JSON.
  if (name !== 'serve') reportDamageWith((_damage, sentence) => process.stderr.write(`interlink-mcp ${name}: ${sentence}\n`));
  try {
    await command.run(rest);
    return 0;
  } catch (err) {
    if (err instanceof InterlinkError) {
      process.stderr.write(`interlink-mcp ${name}: ${err.message}\n`);
      return err.code === 'usage' ? EXIT_USAGE : EXIT_FAILURE;
    }
    process.stderr.write(`interlink-mcp ${name}: ${(err as Error).message ?? String(err)}\n`);
    return EXIT_FAILURE;
  }
}

process.exitCode = await main(process.argv.slice(2));
