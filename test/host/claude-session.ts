/**
 * A persistent Claude Code session, the only kind an asyncRewake hook can wake:
 * `claude -p --input-format stream-json --output-format stream-json --verbose`, with
 * stdin kept open. Its stdout is parsed into events; waits have deadlines.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { z } from 'zod';

const eventSchema = z.object({ type: z.string(), subtype: z.string().optional() }).loose();
export type StreamEvent = z.infer<typeof eventSchema>;

export interface SessionOptions {
  claude: string;
  args: readonly string[];
  env: Record<string, string>;
  cwd: string;
}

export class ClaudeSession {
  /** Every stdout line, parsed, in order. */
  readonly events: StreamEvent[] = [];
  /** stdout lines that were not stream-json events. */
  readonly otherLines: string[] = [];
  private stderrText = '';
  private userTurns = 0;
  private readonly waiters = new Set<() => void>();
  private readonly exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private done = false;

  private constructor(private readonly child: ChildProcess) {
    let partial = '';
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      const lines = (partial + chunk).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) this.take(line);
      this.wake();
    });
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (this.stderrText += chunk));
    this.exit = once(child, 'exit').then(([code, signal]) => {
      this.done = true;
      this.wake();
      return { code: code as number | null, signal: signal as NodeJS.Signals | null };
    });
  }

  static start(options: SessionOptions): ClaudeSession {
    const args = ['-p', '--input-format', 'stream-json', '--output-format', 'stream-json', '--verbose', ...options.args];
    const child = spawn(options.claude, args, { cwd: options.cwd, env: options.env, stdio: ['pipe', 'pipe', 'pipe'] });
    return new ClaudeSession(child);
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  /** How many user turns the test wrote to stdin: every other turn started by itself. */
  get userTurnsSent(): number {
    return this.userTurns;
  }

  stderr(): string {
    return this.stderrText;
  }

  send(text: string): void {
    this.userTurns += 1;
    this.child.stdin?.write(JSON.stringify({ type: 'user', message: { role: 'user', content: text }, parent_tool_use_id: null }) + '\n');
  }

  /** The first event at or after `from` that matches; rejects at the deadline or on exit. */
  waitFor(what: string, match: (event: StreamEvent) => boolean, options: { from?: number; timeoutMs?: number } = {}): Promise<{ event: StreamEvent; index: number }> {
    const from = options.from ?? 0;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => finish(new Error(`timed out waiting for ${what}; ${this.describe()}`)), options.timeoutMs ?? 30_000);
      const check = (): void => {
        const index = this.events.findIndex((event, i) => i >= from && match(event));
        const event = this.events[index];
        if (event !== undefined) finish(undefined, { event, index });
        else if (this.done) finish(new Error(`claude exited before ${what}; ${this.describe()}`));
      };
      const finish = (error?: Error, found?: { event: StreamEvent; index: number }): void => {
        clearTimeout(timer);
        this.waiters.delete(check);
        if (found !== undefined) resolve(found);
        else reject(error);
      };
      this.waiters.add(check);
      check();
    });
  }

  /** Ends stdin (which ends the session once pending work is done), then stops it. */
  async close(graceMs = 3_000): Promise<void> {
    this.child.stdin?.end();
    for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
      if (this.done) return;
      const timer = new Promise((r) => setTimeout(r, graceMs));
      await Promise.race([this.exit, timer]);
      if (!this.done) this.child.kill(signal);
    }
    await this.exit;
  }

  private take(line: string): void {
    if (line.trim() === '') return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(line);
    } catch {
      this.otherLines.push(line);
      return;
    }
    const event = eventSchema.safeParse(parsed);
    if (event.success) this.events.push(event.data);
    else this.otherLines.push(line);
  }

  private wake(): void {
    for (const waiter of [...this.waiters]) waiter();
  }

  private describe(): string {
    const seen = this.events.map((e) => (e.subtype !== undefined ? `${e.type}/${e.subtype}` : e.type)).join(', ');
    // A hook's answer is what explains a missing wake.
    const hooks = this.events
      .filter((e) => e.subtype === 'hook_response')
      .map((e) => `${String(e.hook_event)} exit ${String(e.exit_code)}: ${JSON.stringify(e.output).slice(0, 300)}`);
    return `events: [${seen}]; hook responses: [${hooks.join('; ')}]; stderr: ${this.stderrText.slice(-2_000)}`;
  }
}
