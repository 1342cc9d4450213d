/**
 * Which Codex thread a server serves (src/hosts/codex/thread.ts): parsing a thread UUID, the
 * thread a tool call's `_meta` names, and the bind and per-call decisions, as tables
 * and over arbitrary input.
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { InterlinkError, type ErrorCode } from '../../../src/errors.js';
import { checkCallThread, decideBind, parseThreadId, threadFromMeta, type BindDecision } from '../../../src/hosts/codex/thread.js';

const LOWER_UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const A = '01a227a4-1fcd-7663-ade6-117faef1cb4e';
const B = '0f9c2d11-52b0-4e8f-9a6d-3c1e7b20aa01';
const C = 'c3d4e5f6-0000-4000-8000-000000000003';

/** Runs `fn`, which must throw an InterlinkError of `code`; returns it. */
function throwsWith(fn: () => unknown, code: ErrorCode): InterlinkError {
  let thrown: unknown;
  try {
    fn();
  } catch (err) {
    thrown = err;
  }
  expect(thrown, 'expected a throw').toBeInstanceOf(InterlinkError);
  expect((thrown as InterlinkError).code).toBe(code);
  return thrown as InterlinkError;
}

function isUuid(value: string): boolean {
  try {
    parseThreadId(value);
    return true;
  } catch {
    return false;
  }
}

describe('parseThreadId', () => {
  it('accepts a full lower-case UUID as it is', () => {
    expect(parseThreadId(A)).toBe(A);
    const fresh = randomUUID();
    expect(parseThreadId(fresh)).toBe(fresh);
  });

  it('accepts upper- and mixed-case UUIDs and returns them in lower case', () => {
    expect(parseThreadId(A.toUpperCase())).toBe(A);
    expect(parseThreadId('01A227a4-1FcD-7663-AdE6-117FAef1Cb4E')).toBe(A);
  });

  it('tolerates whitespace around the UUID (a hook may pass a trailing newline)', () => {
    expect(parseThreadId(`  ${A}\n`)).toBe(A);
    expect(parseThreadId(`\t${A.toUpperCase()} `)).toBe(A);
  });

  it.each([
    ['a thread name', 'my-thread'],
    ['a short prefix', '01a227a4'],
    ['a prefix missing the last digit', A.slice(0, -1)],
    ['the empty string', ''],
    ['whitespace only', '   \n\t'],
    ['a trailing extra character', `${A}0`],
    ['a trailing extra letter', `${A}x`],
    ['a leading extra character', `0${A}`],
    ['braces', `{${A}}`],
    ['a urn prefix', `urn:uuid:${A}`],
    ['no hyphens', A.replaceAll('-', '')],
    ['hyphens in the wrong places', '01a227a41-fcd-7663-ade6-117faef1cb4e'],
    ['a non-hex digit', A.replace('a', 'g')],
    ['whitespace inside', A.replace('-', ' ')],
    ['two UUIDs', `${A} ${B}`],
    ['a newline between two UUIDs', `${A}\n${B}`],
    ['a full-width digit', A.replace('0', '０')],
  ])('refuses %s with a usage error', (_what, value) => {
    const err = throwsWith(() => parseThreadId(value), 'usage');
    expect(err.message).toContain('full Codex thread UUID');
  });

  it('keeps a refused value short in the error message', () => {
    const err = throwsWith(() => parseThreadId('x'.repeat(10_000)), 'usage');
    expect(err.message.length).toBeLessThan(300);
  });

  it('normalises any generated UUID, whatever its case, to the lower-case form', () => {
    fc.assert(
      fc.property(fc.uuid(), fc.array(fc.boolean(), { minLength: 36, maxLength: 36 }), (uuid, upper) => {
        const mixed = [...uuid].map((ch, i) => (upper[i] === true ? ch.toUpperCase() : ch)).join('');
        expect(parseThreadId(mixed)).toBe(uuid.toLowerCase());
      }),
      { numRuns: 300 },
    );
  });

  it('on any string, either returns a lower-case UUID equal to the trimmed input or throws a usage error', () => {
    const nearUuid = fc
      .tuple(fc.uuid(), fc.nat({ max: 40 }), fc.string({ maxLength: 3 }), fc.nat({ max: 3 }))
      .map(([uuid, at, insert, drop]) => uuid.slice(0, at) + insert + uuid.slice(at + drop));
    const input = fc.oneof(fc.string(), fc.string({ unit: 'binary' }), fc.string({ unit: 'grapheme' }), nearUuid, fc.uuid());
    fc.assert(
      fc.property(input, (value) => {
        let result: string | undefined;
        try {
          result = parseThreadId(value);
        } catch (err) {
          expect(err).toBeInstanceOf(InterlinkError);
          expect((err as InterlinkError).code).toBe('usage');
          return;
        }
        expect(result).toMatch(LOWER_UUID);
        expect(result).toBe(value.trim().toLowerCase());
      }),
      { numRuns: 1_000 },
    );
  });
});

describe('threadFromMeta', () => {
  it('reads threadId', () => {
    expect(threadFromMeta({ threadId: A })).toBe(A);
  });

  it('reads x-codex-turn-metadata.thread_id', () => {
    expect(threadFromMeta({ 'x-codex-turn-metadata': { thread_id: A } })).toBe(A);
  });

  it('normalises case and surrounding whitespace like parseThreadId', () => {
    expect(threadFromMeta({ threadId: ` ${A.toUpperCase()} ` })).toBe(A);
    expect(threadFromMeta({ 'x-codex-turn-metadata': { thread_id: A.toUpperCase() } })).toBe(A);
  });

  it('returns the thread when both places name the same one, in any case', () => {
    expect(threadFromMeta({ threadId: A, 'x-codex-turn-metadata': { thread_id: A } })).toBe(A);
    expect(threadFromMeta({ threadId: A.toUpperCase(), 'x-codex-turn-metadata': { thread_id: A } })).toBe(A);
  });

  it('ignores the other keys Codex or the client put in _meta', () => {
    expect(threadFromMeta({ threadId: A, progressToken: 7, 'x-codex-turn-metadata': { thread_id: A, turn_id: 'turn-1' } })).toBe(A);
  });

  it('when the two places disagree, returns a value that matches neither, no binding and no UUID', () => {
    const conflict = threadFromMeta({ threadId: A, 'x-codex-turn-metadata': { thread_id: B } });
    expect(conflict).toBeDefined();
    expect(conflict).not.toBe(A);
    expect(conflict).not.toBe(B);
    expect(isUuid(conflict!)).toBe(false);
    // It refuses every call and every bind, whatever the server is bound to.
    for (const bound of [A, B, C]) expect(checkCallThread(bound, conflict)?.code).toBe('thread_mismatch');
    for (const bound of [undefined, A, B]) expect(decideBind(bound, A, conflict).action).toBe('refuse');
  });

  it.each([
    ['undefined', undefined],
    ['null', null],
    ['a number', 42],
    ['a string', A],
    ['a boolean', true],
    ['an array', [A]],
    ['an array with a threadId property', Object.assign([A], { threadId: A })],
    ['an empty object', {}],
    ['an object naming no thread', { progressToken: 'p' }],
    ['a numeric threadId', { threadId: 7 }],
    ['a null threadId', { threadId: null }],
    ['an object threadId', { threadId: { id: A } }],
    ['turn metadata that is a string', { 'x-codex-turn-metadata': JSON.stringify({ thread_id: A }) }],
    ['turn metadata that is null', { 'x-codex-turn-metadata': null }],
    ['turn metadata without thread_id', { 'x-codex-turn-metadata': { turn_id: 't' } }],
    ['a numeric thread_id', { 'x-codex-turn-metadata': { thread_id: 12 } }],
    ['a function', () => A],
  ])('finds no thread in %s', (_what, meta) => {
    expect(threadFromMeta(meta)).toBeUndefined();
  });

  it('still reads one place when the other is malformed or null', () => {
    expect(threadFromMeta({ threadId: null, 'x-codex-turn-metadata': { thread_id: A } })).toBe(A);
    expect(threadFromMeta({ threadId: 7, 'x-codex-turn-metadata': { thread_id: A } })).toBe(A);
    expect(threadFromMeta({ threadId: A, 'x-codex-turn-metadata': 'not an object' })).toBe(A);
    expect(threadFromMeta({ threadId: A, 'x-codex-turn-metadata': { thread_id: null } })).toBe(A);
  });

  it('never throws on arbitrary values and returns undefined or a string', () => {
    fc.assert(
      fc.property(fc.anything({ withNullPrototype: true, withMap: true, withSet: true, withBigInt: true, withDate: true, withTypedArray: true, withSparseArray: true }), (meta) => {
        const result = threadFromMeta(meta);
        expect(result === undefined || typeof result === 'string').toBe(true);
      }),
      { numRuns: 1_000 },
    );
  });

  it('over generated _meta shapes, agrees with a plain reading of the two fields', () => {
    const name = fc.oneof(fc.uuid(), fc.uuid().map((u) => u.toUpperCase()), fc.constantFrom(A, B));
    const field = fc.oneof(name, fc.constant(undefined), fc.constant(null), fc.integer(), fc.string({ maxLength: 5 }));
    const turn = fc.oneof(
      fc.record({ thread_id: field }, { requiredKeys: [] }),
      fc.constant(undefined),
      fc.constant(null),
      fc.string({ maxLength: 5 }),
      fc.integer(),
    );
    const meta = fc.record(
      { threadId: field, 'x-codex-turn-metadata': turn, progressToken: fc.oneof(fc.string(), fc.integer()) },
      { requiredKeys: [] },
    );
    fc.assert(
      fc.property(meta, (m) => {
        const record = m as Record<string, unknown>;
        const direct = typeof record.threadId === 'string' ? record.threadId : undefined;
        const t = record['x-codex-turn-metadata'];
        const nested = typeof t === 'object' && t !== null && typeof (t as Record<string, unknown>).thread_id === 'string' ? ((t as Record<string, unknown>).thread_id as string) : undefined;
        // A blank id says nothing about the thread: it counts as absent.
        const named = [direct, nested]
          .filter((x): x is string => x !== undefined)
          .map((x) => x.trim().toLowerCase())
          .filter((x) => x !== '');
        const result = threadFromMeta(m);
        if (named.length === 0) expect(result).toBeUndefined();
        else if (named.length === 1 || named[0] === named[1]) expect(result).toBe(named[0]);
        else {
          expect(result).toBeDefined();
          expect(named).not.toContain(result);
          expect(isUuid(result!)).toBe(false);
        }
      }),
      { numRuns: 1_000 },
    );
  });
});

describe('decideBind', () => {
  // The server is asked to bind thread A; `bound` is what it serves, `meta` the thread
  // the call's _meta names. B is another thread, C a third one.
  const table: [bound: string | undefined, meta: string | undefined, action: BindDecision['action']][] = [
    [undefined, undefined, 'bind'],
    [undefined, A, 'bind'],
    [undefined, B, 'refuse'],
    [undefined, C, 'refuse'],
    [A, undefined, 'same'],
    [A, A, 'same'],
    [A, B, 'refuse'],
    [A, C, 'refuse'],
    [B, undefined, 'refuse'],
    [B, A, 'refuse'],
    [B, B, 'refuse'],
    [B, C, 'refuse'],
  ];

  it.each(table)('bound %s, _meta %s, binding A: %s', (bound, meta, action) => {
    const decision = decideBind(bound, A, meta);
    expect(decision.action).toBe(action);
    if (decision.action === 'refuse') {
      expect(decision.error).toBeInstanceOf(InterlinkError);
      expect(decision.error.code).toBe('thread_mismatch');
      expect(decision.error.message).toContain(A);
    } else {
      expect(decision).toEqual({ action });
    }
  });

  it('names the thread the call came from when _meta disagrees with the request', () => {
    const decision = decideBind(undefined, A, B);
    expect(decision.action === 'refuse' && decision.error.message).toContain(B);
  });

  it('names the bound thread when asked to rebind', () => {
    const decision = decideBind(B, A, undefined);
    expect(decision.action === 'refuse' && decision.error.message).toContain(B);
  });

  it('never binds twice, never rebinds, and never follows a call from another thread', () => {
    const thread = fc.option(fc.constantFrom(A, B, C), { nil: undefined });
    fc.assert(
      fc.property(thread, fc.constantFrom(A, B, C), thread, (bound, requested, meta) => {
        const decision = decideBind(bound, requested, meta);
        if (decision.action === 'bind') expect(bound).toBeUndefined();
        if (decision.action === 'same') expect(bound).toBe(requested);
        if (meta !== undefined && meta !== requested) expect(decision.action).toBe('refuse');
        if (bound !== undefined && bound !== requested) expect(decision.action).toBe('refuse');
        if (decision.action !== 'refuse') expect(bound === undefined || bound === requested).toBe(true);
      }),
    );
  });
});

describe('checkCallThread', () => {
  const table: [bound: string | undefined, meta: string | undefined, refused: boolean][] = [
    [undefined, undefined, false],
    [undefined, A, false],
    [A, undefined, false],
    [A, A, false],
    [A, B, true],
  ];

  it.each(table)('bound %s, call from %s: refused %s', (bound, meta, refused) => {
    const error = checkCallThread(bound, meta);
    if (!refused) {
      expect(error).toBeUndefined();
      return;
    }
    expect(error).toBeInstanceOf(InterlinkError);
    expect(error!.code).toBe('thread_mismatch');
    expect(error!.message).toContain(bound!);
    expect(error!.message).toContain(meta!);
  });

  it('refuses a call exactly when both threads are known and differ', () => {
    const thread = fc.option(fc.oneof(fc.constantFrom(A, B), fc.uuid()), { nil: undefined });
    fc.assert(
      fc.property(thread, thread, (bound, meta) => {
        const refused = checkCallThread(bound, meta) !== undefined;
        expect(refused).toBe(bound !== undefined && meta !== undefined && bound !== meta);
      }),
    );
  });
});
