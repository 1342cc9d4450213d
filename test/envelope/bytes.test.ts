/**
 * The byte-string building blocks (src/envelope/bytes.ts, src/identity/base64url.ts): the
 * in-place FieldWriter lays out exactly what the concatenated parts do, and the canonical
 * base64url check agrees with decoding and encoding again.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FieldWriter, lengthPrefixed, prefixedSize, u64le } from '../../src/envelope/bytes.js';
import { isCanonicalBase64url } from '../../src/identity/base64url.js';

type Part = { text: string | undefined } | { u64: number } | { bytes: Uint8Array } | { prefixed: Uint8Array };

const part: fc.Arbitrary<Part> = fc.oneof(
  fc.record({ text: fc.option(fc.string({ unit: 'grapheme', maxLength: 40 }), { nil: undefined }) }),
  fc.record({ u64: fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }) }),
  fc.record({ bytes: fc.uint8Array({ maxLength: 40 }) }),
  fc.record({ prefixed: fc.uint8Array({ maxLength: 40 }) }),
);

function concatenated(parts: readonly Part[]): Buffer {
  return Buffer.concat(
    parts.flatMap((p) => {
      if ('text' in p) return lengthPrefixed(p.text);
      if ('u64' in p) return [u64le(p.u64)];
      if ('bytes' in p) return [Buffer.from(p.bytes)];
      const length = Buffer.alloc(4);
      length.writeUInt32LE(p.prefixed.length);
      return [length, Buffer.from(p.prefixed)];
    }),
  );
}

function sizeOf(p: Part): number {
  if ('text' in p) return prefixedSize(p.text);
  if ('u64' in p) return 8;
  return 'bytes' in p ? p.bytes.length : 4 + p.prefixed.length;
}

describe('FieldWriter', () => {
  it('writes the same bytes as the concatenated parts, into a buffer of the size prefixedSize gives', () => {
    fc.assert(
      fc.property(fc.array(part, { maxLength: 8 }), (parts) => {
        const buffer = Buffer.alloc(parts.reduce((sum, p) => sum + sizeOf(p), 0));
        const writer = new FieldWriter(buffer);
        for (const p of parts) {
          if ('text' in p) writer.text(p.text);
          else if ('u64' in p) writer.u64(p.u64);
          else if ('bytes' in p) writer.bytes(p.bytes);
          else writer.prefixedBytes(p.prefixed);
        }
        expect(writer.written).toBe(buffer.length);
        expect(buffer.equals(concatenated(parts))).toBe(true);
      }),
      { numRuns: 2_000 },
    );
  });
});

describe('isCanonicalBase64url', () => {
  const byRoundTrip = (s: string): boolean => /^[A-Za-z0-9_-]*$/.test(s) && s.length % 4 !== 1 && Buffer.from(s, 'base64url').toString('base64url') === s;

  it('agrees with decoding and encoding again, on encodings, their one-character edits and any text', () => {
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    const edited = fc
      .tuple(fc.uint8Array({ maxLength: 40 }), fc.nat(), fc.constantFrom(...alphabet, '=', '+', '/', ' ', 'é'))
      .map(([bytes, at, char]) => {
        const text = Buffer.from(bytes).toString('base64url');
        if (text.length === 0) return char;
        const i = at % text.length;
        return text.slice(0, i) + char + text.slice(i + 1);
      });
    const texts = fc.oneof(fc.uint8Array({ maxLength: 40 }).map((b) => Buffer.from(b).toString('base64url')), edited, fc.string({ maxLength: 12 }));
    fc.assert(
      fc.property(texts, (text) => {
        expect(isCanonicalBase64url(text)).toBe(byRoundTrip(text));
      }),
      { numRuns: 5_000 },
    );
    // Every last character after one and two bytes: only those with the unused bits zero.
    for (const head of ['A', 'AA']) for (const last of alphabet) expect(isCanonicalBase64url(head + last)).toBe(byRoundTrip(head + last));
  });
});
