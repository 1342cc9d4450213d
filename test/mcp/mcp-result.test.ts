/** How tool results are shaped for hosts (src/mcp/result.ts): ISO times, and no doubling. */
import { describe, expect, it } from 'vitest';
import { STRUCTURED_MAX_BYTES, toolResult, withIsoTimes } from '../../src/mcp/result.js';

const T = Date.UTC(2026, 11, 1, 11, 0, 0, 123);
const ISO = '2026-12-01T11:00:00.123Z';

describe('withIsoTimes', () => {
  it('puts an ISO string beside ts, at and every *_at number, at any depth', () => {
    expect(
      withIsoTimes({
        msg_id: 'm',
        ts: T,
        history: [{ state: 'pending', at: T }],
        incoming: [{ received_at: T, code: '1234' }],
        failure: { at: T, expires_at: T, attempts: 3 },
      }),
    ).toEqual({
      msg_id: 'm',
      ts: T,
      ts_iso: ISO,
      history: [{ state: 'pending', at: T, at_iso: ISO }],
      incoming: [{ received_at: T, received_at_iso: ISO, code: '1234' }],
      failure: { at: T, at_iso: ISO, expires_at: T, expires_at_iso: ISO, attempts: 3 },
    });
  });

  it('keeps the new field next to its number', () => {
    expect(Object.keys(withIsoTimes({ created_at: T, code: 'x' }) as object)).toEqual(['created_at', 'created_at_iso', 'code']);
  });

  it('leaves other fields, non-numbers and impossible dates alone', () => {
    const value = { age_ms: T, text: 'ts', ts: 'later', at: 8.7e15, format_at: null, data: [1, 'two', null] };
    expect(withIsoTimes(value)).toEqual(value);
  });
});

describe('toolResult', () => {
  it('gives a small result as text and as the same structuredContent', () => {
    const result = toolResult({ ts: T });
    expect(result.content).toEqual([{ type: 'text', text: JSON.stringify({ ts: T, ts_iso: ISO }) }]);
    expect(result.structuredContent).toEqual({ ts: T, ts_iso: ISO });
    expect(result.isError).toBeUndefined();
  });

  it('gives a result over the limit as text only', () => {
    const at = (text: string) => toolResult({ text });
    const overhead = JSON.stringify({ text: '' }).length;
    expect(at('x'.repeat(STRUCTURED_MAX_BYTES - overhead)).structuredContent).toBeDefined();
    const large = at('x'.repeat(STRUCTURED_MAX_BYTES - overhead + 1));
    expect(large.structuredContent).toBeUndefined();
    expect(large.content).toEqual([{ type: 'text', text: JSON.stringify({ text: 'x'.repeat(STRUCTURED_MAX_BYTES - overhead + 1) }) }]);
  });

  it('counts bytes, not characters', () => {
    const overhead = JSON.stringify({ text: '' }).length;
    expect(toolResult({ text: 'é'.repeat(Math.ceil((STRUCTURED_MAX_BYTES - overhead) / 2) + 1) }).structuredContent).toBeUndefined();
  });

  it('marks errors', () => {
    expect(toolResult({ error: { code: 'wrong_mode', message: 'm' } }, true)).toMatchObject({ isError: true, structuredContent: { error: { code: 'wrong_mode', message: 'm' } } });
  });
});
