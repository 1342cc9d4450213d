/**
 * Structured, leveled logging to stderr. Stdout belongs to the MCP protocol (and to
 * command output), so nothing here ever writes to it. Quiet by default: only warnings
 * and errors unless the configuration (INTERLINK_LOG, config/env.ts) asks for more.
 */
const LEVELS = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 } as const;
export type LogLevel = Exclude<keyof typeof LEVELS, 'silent'>;
export type LogSetting = keyof typeof LEVELS;
export const LOG_SETTINGS = Object.keys(LEVELS) as [LogSetting, ...LogSetting[]];

let threshold: number = LEVELS.warn;

/** Set once by the CLI at startup, from the parsed configuration. */
export function setLogLevel(setting: LogSetting): void {
  threshold = LEVELS[setting];
}

function emit(level: LogLevel, event: string, fields: Record<string, unknown>): void {
  if (LEVELS[level] < threshold) return;
  const line = JSON.stringify({ t: new Date().toISOString(), level, event, ...fields });
  process.stderr.write(line + '\n');
}

export const log = {
  debug: (event: string, fields: Record<string, unknown> = {}) => emit('debug', event, fields),
  info: (event: string, fields: Record<string, unknown> = {}) => emit('info', event, fields),
  warn: (event: string, fields: Record<string, unknown> = {}) => emit('warn', event, fields),
  error: (event: string, fields: Record<string, unknown> = {}) => emit('error', event, fields),
};
