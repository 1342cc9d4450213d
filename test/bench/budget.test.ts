/**
 * The benchmark's attribution rules (scripts/bench/budget.ts) and its perf output parser
 * (scripts/bench/syscalls.ts): a sample lands in the stage its stack names, the specific
 * stage winning over the broad one, and perf's CSV is read as it prints it.
 */
import { describe, expect, it } from 'vitest';
import { stageOf, splitCpu, type Stage } from '../../scripts/bench/budget.js';
import { parsePerfCsv } from '../../scripts/bench/syscalls.js';

const SRC = 'file:///x/dist/src/';
const frame = (functionName: string, url: string) => ({ functionName, url });
const sdk = frame('_onrequest', 'file:///x/node_modules/@modelcontextprotocol/sdk/dist/esm/shared/protocol.js');
const zod = frame('parse', 'file:///x/node_modules/zod/v4/core/schemas.js');
const handler = frame('run', `${SRC}mcp/tools/messages.js`);
const send = frame('send', `${SRC}agent/sending.js`);

describe('stageOf', () => {
  const cases: Array<[string, 'sender' | 'receiver' | 'relay', ReturnType<typeof frame>[], Stage]> = [
    ['garbage collection by its leaf', 'sender', [frame('(garbage collector)', '')], 'garbage collection'],
    ['zod under the SDK as a schema check', 'sender', [zod, sdk], 'schema checks (zod)'],
    ['zod inside signing as a schema check, not signing', 'sender', [zod, frame('signEnvelope', `${SRC}envelope/envelope.js`), send, handler, sdk], 'schema checks (zod)'],
    ['the signature itself as sign', 'sender', [frame('signOneShot', 'node:internal/crypto/sig'), frame('signEnvelope', `${SRC}envelope/envelope.js`), send, handler, sdk], 'sign'],
    ['verification as verify', 'receiver', [frame('verifyOneShot', 'node:internal/crypto/sig'), frame('decide', `${SRC}gate/decide.js`)], 'verify'],
    ['the rest of the gate as the gate', 'receiver', [frame('decide', `${SRC}gate/decide.js`)], 'trust gate'],
    ['a lock call as the lock, even inside a commit', 'sender', [frame('tryCreate', `${SRC}store/lock-file.js`), frame('commit', `${SRC}store/journal-store.js`)], 'sidecar lock'],
    ['a sender commit as the outbox commit', 'sender', [frame('fdatasync', ''), frame('appendLines', `${SRC}store/journal.js`)], 'outbox commit (journal, fdatasync)'],
    ['a receiver commit as the mailbox commit', 'receiver', [frame('appendLines', `${SRC}store/journal.js`)], 'mailbox commit (journal, fdatasync)'],
    ['a relay commit as the relay commit', 'relay', [frame('append', `${SRC}relay/storage.js`)], 'relay commit (journal, fdatasync)'],
    ['the innermost broad frame: agent code under the SDK handler', 'sender', [send, handler, sdk], 'agent logic (routing, outbox and mailbox state)'],
    ['the innermost broad frame: the SDK above agent code', 'sender', [frame('write', 'file:///x/node_modules/@modelcontextprotocol/sdk/dist/esm/server/stdio.js'), handler], 'MCP stdio and JSON-RPC'],
    ['WebSocket framing as the relay connection', 'receiver', [frame('getData', 'file:///x/node_modules/ws/lib/receiver.js')], 'relay connection (WebSocket, frames)'],
    ['an acknowledgement sent', 'receiver', [frame('send', 'file:///x/node_modules/ws/lib/websocket.js'), frame('ack', `${SRC}relay/client.js`)], 'acknowledgement'],
    ["the relay's own code", 'relay', [frame('enqueue', `${SRC}relay/queues.js`), frame('onMessage', 'file:///x/node_modules/ws/lib/websocket.js')], 'relay: accept, queue and deliver'],
    ['anything else as the runtime', 'sender', [frame('processTicksAndRejections', 'node:internal/process/task_queues')], 'runtime (event loop, promises, streams, V8)'],
  ];
  it.each(cases)('puts %s', (_what, role, stack, stage) => {
    expect(stageOf(role, stack)).toBe(stage);
  });
});

describe('splitCpu', () => {
  it("splits a process's CPU in proportion to its samples, and nothing when it has none", () => {
    const split = splitCpu(new Map<Stage, number>([['sign', 1], ['verify', 3]]), 400);
    expect(Object.fromEntries(split)).toEqual({ sign: 100, verify: 300 });
    expect(splitCpu(new Map(), 400).size).toBe(0);
  });
});

describe('parsePerfCsv', () => {
  it('sums the events of each kind and ignores what is not a count', () => {
    const text = [
      '',
      '# started on Tue Dec  1',
      '12,,syscalls:sys_enter_fdatasync,1000,100.00,,',
      '3,,syscalls:sys_enter_fsync,1000,100.00,,',
      '7,,syscalls:sys_enter_link,1000,100.00,,',
      '<not counted>,,raw_syscalls:sys_enter,0,0.00,,',
      '40,,context-switches,1000,100.00,,',
    ].join('\n');
    expect(parsePerfCsv(text)).toEqual({ syncs: 15, lockTakes: 7, syscalls: 0, switches: 40 });
  });
});
