/**
 * The per-message budget of the user's path: one more run at 32 sessions with every serve
 * and the relay under `node --cpu-prof`, each process's CPU in the measured phase split
 * over the stages of budget.ts.
 */
import { existsSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { join } from 'node:path';
import { STAGES, splitCpu, stageSamples, type Role, type Stage } from './budget.js';
import { profileArgs, startRelayProcess } from './relay-process.js';
import type { BenchContext, Table } from './report.js';
import { formatCount } from './stats.js';
import { runSessions, shippedNodeOptions, twoIdentities, type PathResult, type SessionCount } from './user-path-run.js';

const ROLES: readonly Role[] = ['sender', 'receiver', 'relay'];

export interface Budget {
  sessions: number;
  messages: number;
  perSecond: number;
  /** CPU µs per message under the profiler, by stage and process kind. */
  stages: Map<Stage, Record<Role, number>>;
  /** Sidecar-lock takes per message in the profiled run (perf), when counted. */
  lockTakes: Record<Role, number> | undefined;
}

/** What the unprofiled run at the same size measured: CPU µs per message, and lock takes when counted. */
export interface Unprofiled {
  cpu: Record<Role, number> & { client: number };
  lockTakes: Record<Role, number> | undefined;
}

const PROFILE_WAIT_MS = 20_000;

/** Waits until a process that exited has written its profile. */
async function profileOf(path: string): Promise<string> {
  const deadline = Date.now() + PROFILE_WAIT_MS;
  while (!existsSync(path)) {
    if (Date.now() > deadline) throw new Error(`no CPU profile at ${path}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return path;
}

export async function measureBudget(projectRoot: string, context: BenchContext, sessions: SessionCount): Promise<Budget> {
  const profiles = await mkdtemp(join(context.scratch, 'budget-profiles-'));
  const root = join(await mkdtemp(join(context.scratch, 'budget-')), 'machine');
  await twoIdentities(root);
  const relay = await startRelayProcess(projectRoot, await mkdtemp(join(context.scratch, 'budget-relay-')), { profileDir: profiles, profileName: 'relay-0.cpuprofile' });
  let result: PathResult;
  try {
    result = await runSessions(
      { nodeOptions: await shippedNodeOptions(projectRoot), root, relayUrl: relay.url, relayPids: [relay.pid], main: join(projectRoot, 'dist', 'src', 'cli', 'main.js'), nodeArgs: (role, i) => profileArgs(profiles, `${role}-${i}.cpuprofile`) },
      sessions,
      'budget',
    );
  } finally {
    await relay.stop();
  }
  const stages = new Map<Stage, Record<Role, number>>();
  for (const process of result.cpuByProcess) {
    const path = await profileOf(join(profiles, `${process.role}-${process.index}.cpuprofile`));
    const split = splitCpu(stageSamples(path, process.role, result.window.fromUs, result.window.toUs), process.cpuUs);
    for (const [stage, us] of split) {
      const row = stages.get(stage) ?? { sender: 0, receiver: 0, relay: 0 };
      row[process.role] += us / result.messages;
      stages.set(stage, row);
    }
  }
  return { sessions, messages: result.messages, perSecond: result.perSecond, stages, lockTakes: lockTakesOf(result) };
}

export function lockTakesOf(result: PathResult): Record<Role, number> | undefined {
  const counts = result.syscalls;
  return typeof counts === 'string' ? undefined : { sender: counts.sender.lockTakes, receiver: counts.receiver.lockTakes, relay: counts.relay.lockTakes };
}

/**
 * The profiled stages with the sidecar lock's share corrected for the rate: slowed by the
 * profiler, a session commits less often than the lock is kept (lock.ts), so it takes the
 * lock far more often per message than in the unprofiled run. Its lock samples are scaled
 * by the ratio of lock takes per message (perf) in the two runs.
 */
function rateCorrected(budget: Budget, unprofiled: Unprofiled): Map<Stage, Record<Role, number>> {
  const corrected = new Map<Stage, Record<Role, number>>();
  for (const [stage, row] of budget.stages) {
    const copy = { ...row };
    if (stage === 'sidecar lock' && budget.lockTakes !== undefined && unprofiled.lockTakes !== undefined) {
      for (const role of ROLES) if (budget.lockTakes[role] > 0) copy[role] *= Math.min(1, unprofiled.lockTakes[role] / budget.lockTakes[role]);
    }
    corrected.set(stage, copy);
  }
  return corrected;
}

/**
 * The budget as a table. The profiler slows every process, so each process kind's stage
 * shares from the profiled run are applied to the CPU per message that kind used in the
 * unprofiled run at the same size (`unprofiled`, µs).
 */
export function budgetTable(budget: Budget, unprofiled: Unprofiled): Table {
  const stages = rateCorrected(budget, unprofiled);
  const profiledTotal: Record<Role, number> = { sender: 0, receiver: 0, relay: 0 };
  for (const row of stages.values()) for (const role of ROLES) profiledTotal[role] += row[role];
  const scale = (role: Role) => (profiledTotal[role] > 0 ? unprofiled.cpu[role] / profiledTotal[role] : 0);
  const cell = (us: number) => (us < 0.5 ? '' : formatCount(us));
  const rows: string[][] = [];
  for (const stage of STAGES) {
    const row = stages.get(stage);
    if (row === undefined) continue;
    const scaled = ROLES.map((role) => row[role] * scale(role));
    const sum = scaled.reduce((a, b) => a + b, 0);
    if (sum < 0.5) continue;
    rows.push([stage, ...scaled.map(cell), formatCount(sum)]);
  }
  rows.push(["SDK clients (the agents' side of stdio, in the benchmark process)", '', '', '', formatCount(unprofiled.cpu.client)]);
  const total = ROLES.reduce((sum, role) => sum + unprofiled.cpu[role], 0) + unprofiled.cpu.client;
  rows.push(['**Total**', ...ROLES.map((role) => formatCount(unprofiled.cpu[role])), formatCount(total)]);
  let underProfiler = 0;
  for (const row of budget.stages.values()) for (const role of ROLES) underProfiler += row[role];
  const lockNote =
    budget.lockTakes !== undefined && unprofiled.lockTakes !== undefined
      ? ` The profiled run, slower, took the sidecar lock ${budget.lockTakes.sender.toFixed(2)} (sender) and ${budget.lockTakes.receiver.toFixed(2)} (receiver) times per message against ${unprofiled.lockTakes.sender.toFixed(2)} and ${unprofiled.lockTakes.receiver.toFixed(2)} unprofiled; its lock samples are scaled by that ratio.`
      : ' Lock takes were not counted here, so the sidecar lock row is as profiled, which overstates it: the slower profiled run takes the lock more often per message.';
  return {
    caption:
      `Per-message budget at ${budget.sessions} sessions: CPU µs per message by stage and by the process that pays it. ` +
      `Each process kind's split over the stages comes from CPU profiles of a separate run (${formatCount(budget.messages)} messages; ` +
      `${formatCount(budget.perSecond)} msg/s and ${formatCount(underProfiler)} µs per message in the serves and relay under the profiler), ` +
      `applied to the CPU that kind used per message in the unprofiled ${budget.sessions}-session run above. Serve columns sum over their processes.` +
      lockNote,
    headers: ['Stage:', 'Sender serve', 'Receiver serve', 'Relay', 'All processes'],
    rows,
  };
}
