/**
 * Structured, leveled logging to stderr. Stdout belongs to the MCP protocol (and to
 * command output), so nothing here ever writes to it. Quiet by default: only warnings
 * and errors unless INTERLINK_LOG asks for more.
 */
const LEVELS = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 } as const;
export type LogLevel = Exclude<keyof typeof LEVELS, 'silent'>;

function thresholdFromEnv(): number {
  const raw = process.env.INTERLINK_LOG?.toLowerCase();
  if (raw !== undefined && raw in LEVELS) return LEVELS[raw as keyof typeof LEVELS];
  return LEVELS.warn;
}

const threshold = thresholdFromEnv();

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
