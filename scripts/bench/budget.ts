/**
 * Where a message's CPU time goes, by stage and by the process that pays it, from V8 CPU
 * profiles (`node --cpu-prof`) of every serve and the relay.
 *
 * Each sample inside the measured window is put in one stage by its stack: first the
 * stages named by a specific frame anywhere in the stack (garbage collection, schema
 * checks, sign, verify, the sidecar lock, a store's commit, notices, the gate, the
 * acknowledgement), then by the innermost frame of a broader kind (MCP stdio and JSON-RPC,
 * the relay connection, the agent's own logic), and what is left is the runtime (event
 * loop, promises, streams, V8). A process's share of samples per stage, times the CPU the
 * process used in the window (from /proc), divided by the messages, is the stage's cost.
 * Profiling itself slows the processes a little; the shares, not the profile's wall
 * times, carry the result.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';

export type Role = 'sender' | 'receiver' | 'relay';

export const STAGES = [
  'MCP stdio and JSON-RPC',
  'schema checks (zod)',
  'sign',
  'outbox commit (journal, fdatasync)',
  'sidecar lock',
  'relay connection (WebSocket, frames)',
  'relay: accept, queue and deliver',
  'relay commit (journal, fdatasync)',
  'verify',
  'trust gate',
  'mailbox commit (journal, fdatasync)',
  'notices',
  'acknowledgement',
  'agent logic (routing, outbox and mailbox state)',
  'garbage collection',
  'runtime (event loop, promises, streams, V8)',
] as const;
export type Stage = (typeof STAGES)[number];

const callFrame = z.object({ functionName: z.string(), url: z.string() });
const profileSchema = z.object({
  nodes: z.array(z.object({ id: z.number(), callFrame, children: z.array(z.number()).optional() })),
  startTime: z.number(),
  samples: z.array(z.number()),
  timeDeltas: z.array(z.number()),
});
type Frame = z.infer<typeof callFrame>;

const has = (frame: Frame, part: string) => frame.url.includes(part);

/** The stage of one sample, from its stack (leaf first). */
export function stageOf(role: Role, stack: readonly Frame[]): Stage {
  const leaf = stack[0];
  if (leaf?.functionName === '(garbage collector)') return 'garbage collection';
  const any = (test: (f: Frame) => boolean) => stack.some(test);
  if (any((f) => has(f, '/zod/'))) return 'schema checks (zod)';
  if (any((f) => f.functionName === 'signOneShot' || (f.functionName === 'signBytes' && has(f, 'ed25519')))) return 'sign';
  if (any((f) => f.functionName === 'verifyOneShot' || (f.functionName === 'verifyBytes' && has(f, 'ed25519')))) return 'verify';
  if (any((f) => has(f, 'store/lock'))) return 'sidecar lock';
  if (any((f) => has(f, 'store/journal') || has(f, 'relay/storage') || f.functionName === 'fdatasync')) {
    return role === 'sender' ? 'outbox commit (journal, fdatasync)' : role === 'receiver' ? 'mailbox commit (journal, fdatasync)' : 'relay commit (journal, fdatasync)';
  }
  if (any((f) => has(f, '/notices/') || has(f, '/hosts/'))) return 'notices';
  if (any((f) => has(f, 'gate/decide'))) return 'trust gate';
  if (role !== 'relay' && any((f) => f.functionName === 'ack' && has(f, 'relay/client'))) return 'acknowledgement';
  for (const f of stack) {
    if (has(f, '@modelcontextprotocol') || has(f, '/dist/src/mcp/')) return 'MCP stdio and JSON-RPC';
    if (role === 'relay' && has(f, '/dist/src/relay/')) return 'relay: accept, queue and deliver';
    if (has(f, '/ws/') || has(f, 'relay/client') || has(f, 'relay/frame')) return 'relay connection (WebSocket, frames)';
    if (has(f, '/dist/src/agent/') || has(f, '/dist/src/outbox/') || has(f, '/dist/src/mailbox/') || has(f, '/dist/src/envelope/')) return 'agent logic (routing, outbox and mailbox state)';
  }
  return 'runtime (event loop, promises, streams, V8)';
}

/**
 * Microseconds of samples per stage, for samples taken in [fromUs, toUs] on the
 * monotonic clock that both V8's profiles and process.hrtime use. Idle samples are left out.
 */
export function stageSamples(path: string, role: Role, fromUs: number, toUs: number): Map<Stage, number> {
  const profile = profileSchema.parse(JSON.parse(readFileSync(path, 'utf8')));
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const stageById = new Map<number, Stage | 'idle'>();
  const stageOfNode = (id: number): Stage | 'idle' => {
    const known = stageById.get(id);
    if (known !== undefined) return known;
    const stack: Frame[] = [];
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) stack.push(byId.get(cur)!.callFrame);
    const stage = stack[0]?.functionName === '(idle)' ? 'idle' : stageOf(role, stack);
    stageById.set(id, stage);
    return stage;
  };
  const totals = new Map<Stage, number>();
  let at = profile.startTime;
  for (let i = 0; i < profile.samples.length; i++) {
    at += profile.timeDeltas[i] ?? 0;
    if (at < fromUs || at > toUs) continue;
    const stage = stageOfNode(profile.samples[i]!);
    if (stage === 'idle') continue;
    // A sample stands for the time until the next one.
    totals.set(stage, (totals.get(stage) ?? 0) + (profile.timeDeltas[i + 1] ?? 0));
  }
  return totals;
}

/** A process's CPU microseconds split over the stages in proportion to its samples. */
export function splitCpu(samples: Map<Stage, number>, cpuUs: number): Map<Stage, number> {
  const total = [...samples.values()].reduce((a, b) => a + b, 0);
  const split = new Map<Stage, number>();
  if (total === 0) return split;
  for (const [stage, us] of samples) split.set(stage, (cpuUs * us) / total);
  return split;
}
