/**
 * The outbox keeps a settled record for OUTBOX_RETENTION_MS after it settled, and a
 * pending one for ever. Its prune skips the scan until the first record is due; this
 * checks it against the plain rule (scan every record at every add) over random ops,
 * clocks that jump back and forth, and a state reloaded from its data midway.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { signEnvelope } from '../../src/envelope/sign.js';
import { OUTBOX_RETENTION_MS, outboxFormat, type OutboxState } from '../../src/outbox/outbox.js';
import { newIdentity } from '../helpers/fixtures.js';

const alice = newIdentity(1);
const bob = newIdentity(2);
const HOUR = 3_600_000;

type Op =
  | { kind: 'add'; dt: number }
  | { kind: 'accept' | 'end'; pick: number; dt: number }
  | { kind: 'reload' };

const dt = fc.integer({ min: -2 * HOUR, max: 30 * HOUR });
const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant('add' as const), dt }),
  fc.record({ kind: fc.constantFrom('accept' as const, 'end' as const), pick: fc.nat(), dt }),
  fc.constant({ kind: 'reload' as const }),
);

/** The plain rule: at every add, drop each record settled more than the window before it. */
class Model {
  readonly settledAt = new Map<string, number | undefined>();

  add(id: string, at: number): void {
    for (const [key, settled] of this.settledAt) if (settled !== undefined && settled + OUTBOX_RETENTION_MS < at) this.settledAt.delete(key);
    this.settledAt.set(id, undefined);
  }

  settle(id: string, at: number): void {
    if (this.settledAt.has(id) && this.settledAt.get(id) === undefined) this.settledAt.set(id, at);
  }
}

describe('outbox retention', () => {
  it('drops exactly the records the plain rule drops, also after a reload', () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 60 }), (ops) => {
        let state: OutboxState = outboxFormat.empty();
        const model = new Model();
        let now = 1_700_000_000_000;
        const ids: string[] = [];
        for (const o of ops) {
          if (o.kind === 'reload') {
            state = outboxFormat.fromData(structuredClone(outboxFormat.toData(state)));
            continue;
          }
          now += o.dt;
          if (o.kind === 'add') {
            const envelope = signEnvelope(alice.signingKey, { to: bob.key, to_session: 'main', text: 'x', ts: now });
            ids.push(envelope.msg_id);
            outboxFormat.apply(state, { op: 'add', at: now, envelope, route: `${bob.key}#main` });
            model.add(envelope.msg_id, now);
          } else if (ids.length > 0) {
            const id = ids[o.pick % ids.length]!;
            const settles = o.kind === 'accept' ? { op: 'accepted' as const, at: now, msg_id: id, relay: 'ws://r' } : { op: 'end' as const, at: now, msg_id: id, state: 'canceled' as const, reason: 'r' };
            outboxFormat.apply(state, settles);
            model.settle(id, now);
          }
          expect([...state.records.keys()].sort()).toEqual([...model.settledAt.keys()].sort());
        }
      }),
      { numRuns: 300 },
    );
  });
});
