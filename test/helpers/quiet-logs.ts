/**
 * Keeps `npm test` readable (vitest `setupFiles`): the structured log lines that code run
 * inside a test process writes to stderr (src/log.ts — an in-process relay, an inbound
 * loop meeting a fault the test provokes on purpose) are held for the test that is running
 * and printed only if it fails, under a heading that names it. Child processes' output is
 * collected by their helpers (mcp.ts, spawn-relay.ts, process.ts) and shown in the
 * failure messages that need it.
 *
 * Only whole log lines (`{"t":…`) are held; anything else written to stderr passes
 * through. A test that captures stderr itself (assert.ts `captureStderr`) still sees
 * every line: its spy wraps this one. INTERLINK_TEST_LOGS=1 prints everything as it comes.
 */
import { beforeEach, onTestFailed } from 'vitest';

/** Lines kept per test at most: the newest, which are the ones that explain a failure. */
const MAX_HELD = 2_000;

if (process.env.INTERLINK_TEST_LOGS !== '1') {
  const passThrough = process.stderr.write.bind(process.stderr);
  let held: string[] = [];
  let dropped = 0;
  process.stderr.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
    const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
    if (!text.startsWith('{"t":')) return (passThrough as (c: string | Uint8Array, ...r: unknown[]) => boolean)(chunk, ...rest);
    held.push(text);
    if (held.length > MAX_HELD) {
      held.shift();
      dropped++;
    }
    const callback = rest.find((r): r is () => void => typeof r === 'function');
    callback?.();
    return true;
  }) as typeof process.stderr.write;

  beforeEach((context) => {
    held = [];
    dropped = 0;
    onTestFailed(() => {
      if (held.length === 0) return;
      const skipped = dropped > 0 ? ` (the first ${dropped} not kept)` : '';
      passThrough(`\n--- log lines written in this process during "${context.task.name}"${skipped} ---\n${held.join('')}--- end of log lines ---\n`);
    });
  });
}
