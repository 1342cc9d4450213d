/**
 * `interlink-mcp serve`: the MCP server of one session over stdio. Stdout carries the
 * protocol only; everything else goes to stderr.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { Agent } from '../../agent/agent.js';
import { keepLocalRelay, relayUrls } from '../../agent/local-relay.js';
import { readClientTls } from '../../wire/tls.js';
import { serverSession } from '../../agent/session.js';
import type { Config } from '../../config/env.js';
import { ownedConfigEntries, stateFolders } from '../../config/layout.js';
import { loadOrCreateIdentity } from '../../identity/identity.js';
import { log } from '../../log.js';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { ClaudeSession } from '../../hosts/claude/session.js';
import { channelSink, inboxSink } from '../../hosts/claude/sinks.js';
import { CodexHost, failedDeliveriesOf } from '../../hosts/codex/host.js';
import { codexQueueSink } from '../../hosts/codex/sink.js';
import { createServer, type ServedSession } from '../../mcp/server.js';
import { tightenTree } from '../../store/private.js';
import { expectPositionals, parse } from '../args.js';
import { presenceInfo } from '../presence-info.js';

export const serveHelp = `usage: interlink-mcp serve [--session ID] [--codex]

The MCP server of one agent session, over stdio (what Claude Code and Codex start).
Creates the identity on first run. Session id: --session, INTERLINK_SESSION,
CLAUDE_CODE_SESSION_ID, else a generated one. Relays: INTERLINK_URL (comma-separated);
without it, ws://127.0.0.1:9440, started as a durable local relay if none answers.

Codex mode (--codex or INTERLINK_MODE=codex): the session is the Codex thread, bound by
Interlink's Codex hooks (bind_codex_session); nothing runs until then. Notices go to
\`codex queue\` (INTERLINK_CODEX_BIN, else codex on PATH). See codex/README.md.`;

export function packageVersion(): string {
  try {
    const data: unknown = JSON.parse(readFileSync(new URL('../../../../package.json', import.meta.url), 'utf8'));
    return typeof data === 'object' && data !== null && 'version' in data && typeof data.version === 'string' ? data.version : '0.0.0';
  } catch {
    return '0.0.0';
  }
}

/**
 * Files an earlier version or a loose umask left readable by others are made private,
 * with one warning. Only what Interlink keeps there is touched (a root may be a shared
 * directory a person chose): the state root's own folders, the key and peers files.
 */
function tightenRoots(config: string, state: string): void {
  const ours = [
    ...stateFolders(state),
    ...ownedConfigEntries(config, listOrEmpty(config)),
  ];
  for (const root of ours) {
    const changed = tightenTree(root);
    if (changed.length === 0) continue;
    log.warn('permissions_tightened', {
      root,
      count: changed.length,
      example: `${changed[0]!.path} was ${changed[0]!.mode.toString(8)}`,
      message: `${changed.length} files or directories under ${root} were readable or writable by other users; they are now private to you`,
    });
  }
}

function listOrEmpty(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

export async function serve(argv: readonly string[], config: Config): Promise<void> {
  const args = parse(argv, { session: { type: 'string' }, codex: { type: 'boolean' } });
  expectPositionals(args, 0, 'interlink-mcp serve [--session ID] [--codex]');
  const codexMode = args.values.codex === true || config.mode === 'codex';
  const tls = readClientTls(config.tlsCa);
  const identity = await loadOrCreateIdentity(config.keyPath);
  const state = config.stateDir;
  tightenRoots(config.configDir, state);
  const urls = await relayUrls(config);
  const presence = presenceInfo(config.name);
  if (config.benchUnsealed) log.warn('unsealed_benchmark_mode', { reason: 'INTERLINK_BENCH_UNSEALED=1: clear envelopes every relay can read, and no receipts; for benchmarks only' });
  const startAgent = async (session: string) => {
    const agent = await Agent.start({
      identity,
      session,
      stateDir: state,
      peersPath: config.peersPath,
      relayUrls: urls,
      presence,
      host: codexMode ? 'codex' : 'claude',
      ...(tls !== undefined && { tls }),
      ...(config.benchUnsealed && { unsealed: true }),
    });
    keepLocalRelay(config, agent.relays);
    return agent;
  };

  let served: ServedSession;
  let server: Server;
  if (codexMode) {
    const codex = new CodexHost(config.codexBin, async (thread) => {
      const agent = await startAgent(thread);
      agent.startNotices(codexQueueSink({ thread, bin: config.codexBin, failed: failedDeliveriesOf(agent) }));
      log.info('serving', { mode: 'codex', session: thread, identity: identity.key, relays: urls });
      return agent;
    });
    served = { codex };
    server = createServer(served, packageVersion());
    log.info('waiting_for_codex_binding', { identity: identity.key });
  } else {
    const { session, source } = serverSession(typeof args.values.session === 'string' ? args.values.session : undefined, config);
    const agent = await startAgent(session);
    log.info('serving', { session, source, identity: identity.key, relays: urls });
    const { channels } = config;
    const claude = new ClaudeSession(agent);
    served = { agent, claude };
    server = createServer(served, packageVersion(), { channels });
    agent.startNotices(channels ? channelSink(server) : inboxSink(state, () => claude.listenerSession));
  }
  const transport = new StdioServerTransport();

  let closing: Promise<void> | undefined;
  const shutdown = () => {
    closing ??= (async () => {
      await ('agent' in served ? served.agent.close() : served.codex.close());
      await server.close().catch(() => undefined);
      process.exit(0);
    })();
    return closing;
  };
  transport.onclose = () => void shutdown();
  process.stdin.on('end', () => void shutdown());
  process.on('SIGTERM', () => void shutdown());
  process.on('SIGINT', () => void shutdown());
  await server.connect(transport);
}
