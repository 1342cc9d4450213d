/**
 * The parent's side of the worker processes (worker.ts): forks them, tells them each
 * phase, waits for every one's answer, and reaps them all — on success, on error, and on
 * the run's deadline or a signal. A worker that exits early or says `error` fails the
 * phase being waited for, with its words.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { workerMessage, type ParentMessage, type WorkerMessage } from './ipc.js';

/** How long workers get to close their sockets after `stop` before they are killed. */
const STOP_GRACE_MS = 3_000;

type Of<T extends WorkerMessage['type']> = Extract<WorkerMessage, { type: T }>;

interface Worker {
  child: ChildProcess;
  inbox: WorkerMessage[];
  exited: Promise<void>;
  /** Why this worker can no longer answer: it exited, or said `error`. */
  failure: string | undefined;
}

export class WorkerPool {
  private readonly workers: Worker[];
  private readonly listeners = new Set<() => void>();

  /** `onProgress` hears each worker's connected count during the ramp (worker index, count). */
  constructor(script: string, count: number, onProgress: (worker: number, connected: number) => void) {
    this.workers = Array.from({ length: count }, (_, index) => {
      const child = fork(script, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], env: { ...process.env, INTERLINK_LOG: 'error' } });
      const worker: Worker = { child, inbox: [], exited: new Promise((resolve) => child.once('exit', () => resolve())), failure: undefined };
      child.on('message', (raw: unknown) => {
        const parsed = workerMessage.safeParse(raw);
        if (!parsed.success) worker.failure = `worker ${index} said something unexpected: ${parsed.error.message}`;
        else if (parsed.data.type === 'error') worker.failure = `worker ${index}: ${parsed.data.message}`;
        else if (parsed.data.type === 'progress') return onProgress(index, parsed.data.connected);
        else worker.inbox.push(parsed.data);
        this.wake();
      });
      child.once('exit', (code, signal) => {
        worker.failure ??= `worker ${index} exited (${signal ?? `code ${code}`})`;
        this.wake();
      });
      return worker;
    });
  }

  get size(): number {
    return this.workers.length;
  }

  send(index: number, message: ParentMessage): void {
    this.workers[index]!.child.send(message);
  }

  sendAll(message: ParentMessage): void {
    for (let i = 0; i < this.workers.length; i++) this.send(i, message);
  }

  /** One message of `type` from every worker, in worker order; rejects as soon as one of them fails. */
  collect<T extends WorkerMessage['type']>(type: T): Promise<Of<T>[]> {
    const isOf = (m: WorkerMessage): m is Of<T> => m.type === type;
    return new Promise((resolve, reject) => {
      const check = () => {
        const failed = this.workers.find((w) => w.failure !== undefined && !w.inbox.some(isOf));
        if (failed !== undefined) {
          this.listeners.delete(check);
          return reject(new Error(failed.failure));
        }
        if (!this.workers.every((w) => w.inbox.some(isOf))) return;
        this.listeners.delete(check);
        resolve(
          this.workers.map((w) => {
            const message = w.inbox.find(isOf)!;
            w.inbox.splice(w.inbox.indexOf(message), 1);
            return message;
          }),
        );
      };
      this.listeners.add(check);
      check();
    });
  }

  /** Asks every worker to stop, waits a little, kills the rest, and resolves once all are reaped. */
  async reap(): Promise<void> {
    for (const { child } of this.workers) {
      if (child.exitCode === null && child.signalCode === null && child.connected) child.send({ type: 'stop' } satisfies ParentMessage);
    }
    const all = Promise.all(this.workers.map((w) => w.exited));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([all, new Promise<void>((resolve) => (timer = setTimeout(resolve, STOP_GRACE_MS)))]);
    clearTimeout(timer);
    for (const { child } of this.workers) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await all;
  }

  private wake(): void {
    for (const listener of [...this.listeners]) listener();
  }
}
