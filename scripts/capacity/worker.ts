/**
 * A capacity run's worker process (forked by run.ts): runs its block of simulated
 * sessions (session.ts) through the phases the parent calls — connect at a bounded rate,
 * check the roster, send for a while and drain — and reports each phase's counts over
 * the fork channel (ipc.ts). It exits when told to stop or when the parent goes away, so
 * no worker outlives its run.
 */
import { performance } from 'node:perf_hooks';
import { generateSigningKey, type SigningKey } from '../../src/identity/ed25519.js';
import { messageOf } from '../../src/errors.js';
import { setLogLevel } from '../../src/log.js';
import { parentMessage, type ParentMessage, type PlanMessage, type RosterResult, type WorkerMessage } from './ipc.js';
import { chosen, pairOf, relayOf, sessionId } from './plan.js';
import { SimSession, troubles } from './session.js';
import { Traffic } from './traffic.js';

/** How long one session may take to connect and authenticate before it counts as failed. */
const CONNECT_TIMEOUT_MS = 30_000;
/** Connections opening at once in this process: a slow relay gets a queue here, not thousands of half-open sockets. */
const MAX_OPENING = 64;
/** Roster checks in flight at once in this process: each answer may be 1 MiB to parse. */
const MAX_ROSTER_CHECKS = 4;
/** Passes over the roster checks: a relay may refuse one `rate_limited`, and a pair's announcement may still be on its way. */
const ROSTER_PASSES = 3;
const ROSTER_PASS_PAUSE_MS = 1_000;
const TICK_MS = 20;
const PROGRESS_MS = 2_000;

const traffic = new Traffic();
/** The sessions of this worker by global index. */
const sessions = new Map<number, SimSession>();
let plan: PlanMessage | undefined;
let announcer: NodeJS.Timeout | undefined;

function tell(message: WorkerMessage): void {
  process.send?.(message);
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Builds every session (keys first: a pair's ends must know each other's key), then starts them at `rampPerSecond`. */
async function ramp(p: PlanMessage): Promise<void> {
  const keys = new Map<number, SigningKey>();
  for (let i = p.first; i < p.first + p.count; i++) keys.set(i, generateSigningKey());
  for (const [i, key] of keys) {
    const peer = { key: keys.get(pairOf(i))!.publicKey.toString('base64url'), session: sessionId(pairOf(i)) };
    sessions.set(i, new SimSession({ key, session: sessionId(i), relayUrl: p.relays[relayOf(i, p.relays.length)]!, peer }, traffic));
  }
  // Renewed as agent/presence.ts does, every ANNOUNCE_INTERVAL_MS per session (a connection
  // announces on its own too), from the start: renewals held back until a long ramp ends
  // would all come at once, and keep coming in step every interval after.
  announcer = setInterval(() => {
    const now = performance.now();
    for (const session of sessions.values()) if (session.nextAnnounce <= now && session.client.connected) session.announce();
  }, 1_000);
  const queue = [...sessions.values()];
  let started = 0;
  let opening = 0;
  let connected = 0;
  let failed = 0;
  const begin = performance.now();
  let lastProgress = begin;
  const all = new Promise<void>((resolve) => {
    const tick = setInterval(() => {
      const now = performance.now();
      const allowed = Math.min(queue.length, Math.floor(((now - begin) / 1000) * p.rampPerSecond) + 1);
      while (started < allowed && opening < MAX_OPENING) {
        const session = queue[started++]!;
        opening++;
        void session.start(CONNECT_TIMEOUT_MS).then((ok) => {
          opening--;
          if (ok) connected++;
          else failed++;
        });
      }
      if (now - lastProgress >= PROGRESS_MS) {
        lastProgress = now;
        tell({ type: 'progress', connected });
      }
      if (connected + failed === queue.length) {
        clearInterval(tick);
        resolve();
      }
    }, TICK_MS);
  });
  await all;
  tell({ type: 'ramped', connected, failed, troubles: Object.fromEntries(troubles) });
}

/**
 * Each sampled session looks for its pair on the roster (findable.ts), a few at a time.
 * Those whose relay did not answer, or did not list the pair, ask again in a later pass:
 * passes, not retries in place, so a roster that cannot list everyone costs a pass each
 * time, not a pause per session.
 */
async function checkRoster(p: PlanMessage): Promise<RosterResult> {
  const result: RosterResult = { checked: 0, answered: 0, found: 0, foundFirst: 0, requests: 0, entriesMax: 0, bytesMax: 0 };
  let waiting = [...sessions.entries()].filter(([i]) => chosen(i, p.rosterSample)).map(([, s]) => s);
  result.checked = waiting.length;
  const answered = new Set<SimSession>();
  let measured = false;
  for (let pass = 0; pass < ROSTER_PASSES && waiting.length > 0; pass++) {
    if (pass > 0) await sleep(ROSTER_PASS_PAUSE_MS);
    const again: SimSession[] = [];
    let next = 0;
    const lane = async () => {
      while (next < waiting.length) {
        const session = waiting[next++]!;
        result.requests++;
        const measure = !measured;
        measured = true;
        const findings = await session.findPair(measure);
        if (findings !== undefined) {
          answered.add(session);
          result.entriesMax = Math.max(result.entriesMax, findings.entries);
          result.bytesMax = Math.max(result.bytesMax, findings.bytes ?? 0);
        }
        if (findings !== undefined && findings.found.size > 0) {
          result.found++;
          if (pass === 0) result.foundFirst++;
        } else {
          again.push(session);
        }
      }
    };
    await Promise.all(Array.from({ length: MAX_ROSTER_CHECKS }, lane));
    waiting = again;
  }
  result.answered = answered.size;
  return result;
}

/** The chosen sessions send one message a second each for `durationMs` (their first at a random offset), then the run drains. */
async function sendFor(p: PlanMessage, durationMs: number, drainMs: number): Promise<void> {
  const begin = performance.now();
  const senders = [...sessions.entries()].filter(([i]) => chosen(i, p.rate)).map(([, s]) => ({ session: s, due: begin + Math.random() * 1000 }));
  const end = begin + durationMs;
  await new Promise<void>((resolve) => {
    const tick = setInterval(() => {
      const now = performance.now();
      if (now < end) {
        for (const sender of senders) {
          if (sender.due > now) continue;
          sender.due += 1000;
          if (sender.session.client.connected) sender.session.sendMessage();
        }
      }
      for (const session of sessions.values()) session.flushReceipts(now);
      const drained = now >= end && traffic.settled && ![...sessions.values()].some((s) => s.receiptsWaiting);
      if (drained || now >= end + drainMs) {
        clearInterval(tick);
        resolve();
      }
    }, TICK_MS);
  });
}

function stop(): void {
  clearInterval(announcer);
  for (const session of sessions.values()) session.close();
  // Close frames out, then gone: the parent reaps this process.
  setTimeout(() => process.exit(0), 200).unref();
}

async function handle(message: ParentMessage): Promise<void> {
  switch (message.type) {
    case 'plan':
      plan = message;
      return ramp(message);
    case 'roster':
      return tell({ type: 'rostered', result: await checkRoster(plan!) });
    case 'traffic': {
      await sendFor(plan!, message.durationMs, message.drainMs);
      let disconnects = 0;
      let connected = 0;
      for (const s of sessions.values()) {
        disconnects += s.disconnects;
        if (s.client.connected) connected++;
      }
      return tell({ type: 'report', result: traffic.result(), disconnects, connected, troubles: Object.fromEntries(troubles) });
    }
    case 'stop':
      return stop();
  }
}

setLogLevel('error');
process.on('disconnect', () => process.exit(0));
process.on('message', (raw: unknown) => {
  const parsed = parentMessage.safeParse(raw);
  if (!parsed.success) return tell({ type: 'error', message: `a message the worker does not take: ${parsed.error.message}` });
  if (parsed.data.type !== 'plan' && parsed.data.type !== 'stop' && plan === undefined) return tell({ type: 'error', message: `${parsed.data.type} before the plan` });
  handle(parsed.data).catch((err: unknown) => tell({ type: 'error', message: messageOf(err) }));
});
