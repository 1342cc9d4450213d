#!/usr/bin/env node
/**
 * `interlinked [claude arguments…]`: starts Claude Code with Interlink's channel on.
 * Sets INTERLINK_CHANNELS=1 (the plugin's MCP server then declares claude/channel and
 * sends notices as channel notifications; the Stop-hook listener stands down) and loads
 * the plugin as a development channel. Every other argument goes to `claude` unchanged,
 * except `--help`/`-h`: a person asking what this command is gets its own help, not a
 * Claude session started on their behalf (`claude --help` lists Claude's options).
 */
import { spawn } from 'node:child_process';

const CHANNEL = 'plugin:interlink@interlink';

const HELP = `usage: interlinked [claude arguments…]

Starts Claude Code (\`claude\` on PATH) with Interlink's channel on: sets
INTERLINK_CHANNELS=1 and runs
  claude --dangerously-load-development-channels ${CHANNEL} [claude arguments…]
so the plugin's server sends each notice as a channel notification and the Stop-hook
listener stands down. Every other argument goes to claude unchanged (after \`--\`, -h and
--help too); \`claude --help\` lists them. Needs the plugin installed; channels are a
research preview (docs/CLAUDE.md, "Channels").`;

/** Options end at `--`; an argument after it is claude's (a prompt may be "-h"). */
function asksForHelp(argv: readonly string[]): boolean {
  const end = argv.indexOf('--');
  return (end < 0 ? argv : argv.slice(0, end)).some((arg) => arg === '--help' || arg === '-h');
}

/** Runs claude with the channel on and exits as it does. */
function startClaude(argv: readonly string[]): void {
  const child = spawn('claude', ['--dangerously-load-development-channels', CHANNEL, ...argv], {
    stdio: 'inherit',
    env: { ...process.env, INTERLINK_CHANNELS: '1' },
  });
  child.on('error', (err: NodeJS.ErrnoException) => {
    process.stderr.write(
      err.code === 'ENOENT' ? 'interlinked: `claude` is not on PATH; install Claude Code first\n' : `interlinked: cannot start claude: ${err.message}\n`,
    );
    process.exit(1);
  });
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(signal, () => child.kill(signal));
  child.on('exit', (code, signal) => process.exit(code ?? (signal ? 128 : 1)));
}

const argv = process.argv.slice(2);
if (asksForHelp(argv)) process.stdout.write(HELP + '\n');
else startClaude(argv);
