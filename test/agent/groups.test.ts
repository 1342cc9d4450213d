/**
 * Groups (issue 39) below the tools: the panel's rules (agent/groups.ts) against a plain
 * model over random replies; the group id in the sealed body (signed, opened, absent for
 * bodies that never had one, and refused by a reader that knows only five fields); the
 * outbox committing a group's copies together, keeping its idempotency key for the whole
 * group, and letting a group's records go only together.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { answers, answersOf, outcomeOf, recipientNames, tally, MAX_RECIPIENTS, OUTCOMES, type PanelCopy, type PanelReply } from '../../src/agent/groups.js';
import { envelopeSchema, isSealed, newMsgId, parseEnvelope, wireOf, type Status } from '../../src/envelope/envelope.js';
import { openEnvelope } from '../../src/envelope/open.js';
import { SealError, bodyBytes, paddedFields, parseBodyBytes, readFields } from '../../src/envelope/seal.js';
import { signEnvelope, verifyEnvelope } from '../../src/envelope/sign.js';
import { isInterlinkError } from '../../src/errors.js';
import { OUTBOX_RETENTION_MS, outboxFormat, type OutboxState } from '../../src/outbox/outbox.js';
import { newIdentity } from '../helpers/fixtures.js';

const alice = newIdentity(1);
const bob = newIdentity(2);
const carol = newIdentity(3);
const KEYS = [bob.key, carol.key, alice.key];
const STATUS_CHOICES: (Status | undefined)[] = [undefined, 'update', 'needs_input', 'result', 'failed', 'canceled'];
const TERMINAL = new Set(['result', 'failed', 'canceled']);

describe('the panel rules', () => {
  const copies: PanelCopy[] = [
    { key: bob.key, msg_id: 'a'.repeat(32), sent_at: 100, task_id: 't' },
    { key: carol.key, msg_id: 'b'.repeat(32), sent_at: 101, task_id: 't' },
    { key: bob.key, msg_id: 'c'.repeat(32), sent_at: 102 },
  ];
  const reply: fc.Arbitrary<PanelReply> = fc
    .record({
      from: fc.constantFrom(...KEYS),
      ts: fc.integer({ min: 90, max: 130 }),
      received_at: fc.integer({ min: 90, max: 130 }),
      status: fc.constantFrom(...STATUS_CHOICES),
      task_id: fc.constantFrom(undefined, 't', 'u'),
      in_reply_to: fc.constantFrom(undefined, ...copies.map((c) => c.msg_id), 'd'.repeat(32)),
      n: fc.nat(),
    })
    .map(({ n, ...r }) => ({
      msg_id: n.toString(16).padStart(32, '0'),
      from: r.from,
      ts: r.ts,
      received_at: r.received_at,
      ...(r.status !== undefined && { status: r.status }),
      ...(r.task_id !== undefined && { task_id: r.task_id }),
      ...(r.in_reply_to !== undefined && { in_reply_to: r.in_reply_to }),
    }));

  it('links a reply to a copy only from its recipient, by in_reply_to, else by task id when stored at or after the copy was sent', () => {
    fc.assert(
      fc.property(reply, (r) => {
        for (const c of copies) {
          const byReply = r.in_reply_to === c.msg_id;
          const byTask = r.in_reply_to === undefined && c.task_id !== undefined && r.task_id === c.task_id && r.received_at >= c.sent_at;
          expect(answers(c, r)).toBe(r.from === c.key && (byReply || byTask));
        }
      }),
      { numRuns: 500 },
    );
  });

  it('links an answer by task id from a recipient whose clock is a minute behind this one', () => {
    const slow = { from: bob.key, msg_id: 'e'.repeat(32), ts: 100 - 60_000, received_at: 150, status: 'result' as const, task_id: 't' };
    expect(answers(copies[0]!, slow)).toBe(true);
    expect(answersOf(copies, [slow]).get(copies[0]!.msg_id)?.answer).toEqual(slow);
  });

  it('takes the first terminal reply in signed order as the answer, the later ones as duplicates, and a newer question as the latest', () => {
    fc.assert(
      fc.property(fc.uniqueArray(reply, { selector: (r) => r.msg_id, maxLength: 12 }), (replies) => {
        const found = answersOf(copies, replies);
        for (const c of copies) {
          const linked = replies.filter((r) => answers(c, r)).sort((a, b) => a.ts - b.ts || (a.msg_id < b.msg_id ? -1 : 1));
          const terminal = linked.filter((r) => r.status !== undefined && TERMINAL.has(r.status));
          const got = found.get(c.msg_id)!;
          expect(got.replies).toEqual(linked);
          expect(got.answer).toEqual(terminal[0]);
          expect(got.duplicates).toEqual(terminal.slice(1));
          const open = linked.filter((r) => r.status === undefined || !TERMINAL.has(r.status)).at(-1);
          expect(got.latest).toEqual(open !== undefined && (terminal[0] === undefined || open.ts > terminal[0].ts) ? open : undefined);
        }
      }),
      { numRuns: 500 },
    );
  });

  it('says a terminal answer first, then a refused delivery, then a question, else waiting', () => {
    const deliveries = ['pending', 'bus_accepted', 'awaiting_session', 'receiver_stored', 'receiver_acknowledged', 'receiver_refused', 'delivery_failed', 'canceled'];
    for (const delivery of deliveries) {
      for (const answer of STATUS_CHOICES) {
        for (const latest of STATUS_CHOICES) {
          const found = {
            duplicates: [],
            replies: [],
            ...(answer !== undefined && { answer: { from: bob.key, msg_id: 'e'.repeat(32), ts: 1, received_at: 1, status: answer } }),
            ...(latest !== undefined && { latest: { from: bob.key, msg_id: 'f'.repeat(32), ts: 2, received_at: 2, status: latest } }),
          };
          const expected = answer !== undefined && TERMINAL.has(answer) ? answer : ['receiver_refused', 'delivery_failed', 'canceled'].includes(delivery) ? 'refused' : latest === 'needs_input' ? 'needs_input' : 'waiting';
          expect(outcomeOf(delivery, found), `${delivery} ${answer} ${latest}`).toBe(expected);
        }
      }
    }
    expect(outcomeOf('bus_accepted', undefined)).toBe('waiting');
  });

  it('counts every outcome, zeros included', () => {
    expect(tally(['result', 'result', 'not_sent'])).toEqual(Object.fromEntries(OUTCOMES.map((o) => [o, o === 'result' ? 2 : o === 'not_sent' ? 1 : 0])));
  });

  it('takes distinct recipients in order, and refuses none, "self" or more than the bound', () => {
    expect(recipientNames(['bob', 'carol', 'bob'])).toEqual(['bob', 'carol']);
    expect(recipientNames(['e\u0301'])).toEqual(['\u00e9']);
    const code = (names: string[]) => {
      try {
        recipientNames(names);
        return 'ok';
      } catch (err) {
        return isInterlinkError(err) ? err.code : 'other';
      }
    };
    expect(code([])).toBe('bad_recipients');
    expect(code(['bob', 'self'])).toBe('bad_recipients');
    expect(code(Array.from({ length: MAX_RECIPIENTS }, (_, i) => `p${i}`))).toBe('ok');
    expect(code(Array.from({ length: MAX_RECIPIENTS + 1 }, (_, i) => `p${i}`))).toBe('too_many_recipients');
  });
});

describe('the group id in the sealed body', () => {
  it('is signed and sealed with the body, and opens as it was sent', () => {
    const group = newMsgId();
    const envelope = signEnvelope(alice.signingKey, { to: bob.key, to_session: 'b1', text: 'review', group, task_id: 't' });
    const wire = wireOf(envelope);
    expect(JSON.stringify(wire)).not.toContain(group);
    const parsed = parseEnvelope(JSON.parse(JSON.stringify(wire)));
    expect(isSealed(parsed) && verifyEnvelope(parsed)).toBe(true);
    expect(isSealed(parsed) && openEnvelope(bob.signingKey, parsed).group).toBe(group);
  });

  it('leaves a body without one byte for byte as before, and reads bodies whose padding leaves no room for it', () => {
    const body = { text: 'hi', status: 'result', task_id: 't' };
    expect(bodyBytes(body).equals(paddedFields(['hi', 'result', 't', undefined, undefined]))).toBe(true);
    expect(parseBodyBytes(bodyBytes({ ...body, group: 'a'.repeat(32) })).group).toBe('a'.repeat(32));
    // Five fields of an earlier writer ending 0 to 3 bytes before the plaintext's end.
    const fields = paddedFields(['x'.repeat(236), undefined, undefined, undefined, undefined]);
    const written = 4 + 236 + 4 * 4;
    for (let tail = 0; tail <= 5; tail++) {
      const plaintext = Buffer.concat([fields.subarray(0, written), Buffer.alloc(tail)]);
      expect(parseBodyBytes(plaintext)).toEqual({ text: 'x'.repeat(236) });
    }
  });

  it('is refused by a reader that knows only the five fields before it (an earlier version: bad_seal)', () => {
    const plaintext = bodyBytes({ text: 'hi', group: 'a'.repeat(32) });
    expect(() => readFields(plaintext, ['text', 'status', 'task_id', 'in_reply_to', 'the reply session'])).toThrow(SealError);
  });

  it('is refused in a clear envelope, whose signed bytes have no place for it', () => {
    expect(() => signEnvelope(alice.signingKey, { to: bob.key, to_session: 'b1', version: 3, text: 'x', group: 'a'.repeat(32) })).toThrow(/group/);
    expect(() => signEnvelope(alice.signingKey, { to: bob.key, text: 'x', group: 'a'.repeat(32) })).toThrow(/group/);
    const clear = signEnvelope(alice.signingKey, { to: bob.key, text: 'x' });
    expect(envelopeSchema.safeParse({ ...clear, group: 'a'.repeat(32) }).success).toBe(false);
  });
});

describe('the outbox and groups', () => {
  const NOW = 1_800_000_000_000;
  const copy = (to: string, session: string, group: string) => ({ envelope: signEnvelope(alice.signingKey, { to, to_session: session, text: 'task', group, ts: NOW }), route: `${to}#${session}` });

  it('commits the copies together, keeps who was not reached, and survives a reload', () => {
    const state: OutboxState = outboxFormat.empty();
    const group = newMsgId();
    const result = outboxFormat.apply(state, { op: 'add_group', at: NOW, group, copies: [copy(bob.key, 'b1', group), copy(carol.key, 'c1', group)], unrouted: [{ to: alice.key, code: 'no_route', reason: 'none' }], idempotency_key: 'k', intent: 'i' });
    expect(result).toMatchObject({ outcome: 'added' });
    expect(outboxFormat.changes(result)).toBe(true);
    const again = outboxFormat.fromData(structuredClone(outboxFormat.toData(state)));
    const shown = again.group(group)!;
    expect(shown.records.map((r) => r.envelope.to)).toEqual([bob.key, carol.key]);
    expect(shown.unrouted).toEqual([{ to: alice.key, code: 'no_route', reason: 'none' }]);
    expect(again.recordForKey('k')?.group?.id).toBe(group);
  });

  it('answers a repeated key with the group, a different intent or a single message under it with a conflict', () => {
    const state: OutboxState = outboxFormat.empty();
    const group = newMsgId();
    outboxFormat.apply(state, { op: 'add_group', at: NOW, group, copies: [copy(bob.key, 'b1', group)], idempotency_key: 'k', intent: 'i' });
    const other = newMsgId();
    expect(outboxFormat.apply(state, { op: 'add_group', at: NOW, group: other, copies: [copy(bob.key, 'b1', other)], idempotency_key: 'k', intent: 'i' })).toMatchObject({ outcome: 'duplicate', group: { id: group } });
    expect(outboxFormat.apply(state, { op: 'add_group', at: NOW, group: other, copies: [copy(bob.key, 'b1', other)], idempotency_key: 'k', intent: 'j' })).toMatchObject({ outcome: 'conflict' });
    const single = signEnvelope(alice.signingKey, { to: bob.key, to_session: 'b1', text: 'task', ts: NOW });
    expect(outboxFormat.apply(state, { op: 'add', at: NOW, envelope: single, route: `${bob.key}#b1`, idempotency_key: 'k', intent: 'i' })).toMatchObject({ outcome: 'conflict' });
    expect(state.group(other)).toBeUndefined();
  });

  it('adds a follow-up to its group, and lets a group go only when the last of its records may', () => {
    const state: OutboxState = outboxFormat.empty();
    const group = newMsgId();
    const copies = [copy(bob.key, 'b1', group), copy(carol.key, 'c1', group)];
    outboxFormat.apply(state, { op: 'add_group', at: NOW, group, copies });
    const follow = copy(bob.key, 'b1', group);
    outboxFormat.apply(state, { op: 'add_group', at: NOW + 1, group, follow_up: true, copies: [follow] });
    expect(state.group(group)!.records.map((r) => r.group)).toEqual([{ id: group }, { id: group }, { id: group, follow_up: true }]);
    outboxFormat.apply(state, { op: 'accepted', at: NOW + 2, msg_id: copies[0]!.envelope.msg_id, relay: 'r' });
    outboxFormat.apply(state, { op: 'accepted', at: NOW + 2, msg_id: follow.envelope.msg_id, relay: 'r' });
    // Carol's copy is still pending: nothing of the group goes, days later.
    const later = NOW + 3 * OUTBOX_RETENTION_MS;
    outboxFormat.apply(state, { op: 'add', at: later, envelope: signEnvelope(alice.signingKey, { to: bob.key, to_session: 'b1', text: 'x', ts: later }), route: `${bob.key}#b1` });
    expect(state.group(group)!.records).toHaveLength(3);
    outboxFormat.apply(state, { op: 'accepted', at: later, msg_id: copies[1]!.envelope.msg_id, relay: 'r' });
    const gone = later + OUTBOX_RETENTION_MS + 1;
    outboxFormat.apply(state, { op: 'add', at: gone, envelope: signEnvelope(alice.signingKey, { to: bob.key, to_session: 'b1', text: 'y', ts: gone }), route: `${bob.key}#b1` });
    expect(state.group(group)).toBeUndefined();
  });
});
