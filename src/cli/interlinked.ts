#!/usr/bin/env node
/**
 * `interlinked [claude arguments…]`: starts Claude Code with Interlink's channel on.
 * Sets INTERLINK_CHANNELS=1 (the plugin's MCP server then declares claude/channel and
 * sends notices as channel notifications; the Stop-hook listener stands down) and loads
 * the plugin as a development channel. Every other argument goes to `claude` unchanged.
 */
import { spawn } from 'node:child_process';

const CHANNEL = 'plugin:interlink@interlink';

const child = spawn('claude', ['--dangerously-load-development-channels', CHANNEL, ...process.argv.slice(2)], {
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
