/**
 * The name rule of issue 37 (config/name-characters.ts, config/paths.ts), over generated
 * names: a petname or session id holding any character of Unicode category Cc, Cf, Zl or
 * Zp is refused with that character named as U+XXXX; names people really use (ASCII,
 * accented letters, CJK, in NFC or NFD) are taken, in NFC; and a refused name quoted in
 * an error or a listing shows no hidden character.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { codePointName, hiddenCharacterReason, visibleName } from '../../src/config/name-characters.js';
import { checkSafeName, unsafeNameReason, unsafePathReason } from '../../src/config/paths.js';
import { InterlinkError } from '../../src/errors.js';

/** The characters the issue names, each a case of its own. */
const NAMED = [
  ...range(0x202a, 0x202e), ...range(0x2066, 0x2069), 0x200e, 0x200f, 0x061c, // bidirectional controls
  0x2028, 0x2029, // line and paragraph separators
  0x200b, 0x200c, 0x200d, 0x2060, 0xfeff, // zero-width
  0x00ad, 0x0000, 0x001b, 0x007f, 0x0085, // a soft hyphen, NUL, ESC, DEL, C1
].map((c) => String.fromCodePoint(c));

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}

const HIDDEN = /^[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]$/u;
/** Every hidden code point of the BMP and the planes above (tags, U+E0001…). */
const hiddenChar = fc.integer({ min: 0, max: 0x10ffff }).map((c) => String.fromCodePoint(c)).filter((c) => HIDDEN.test(c));
const letters = fc.constantFrom('alice', 'bob', 'José', 'Zoë', 'Ærøskøbing', '山田', '김민준', 'Ørsted-2', 'peer-1a2b3c4d5', 'claude_42', 'Мария', 'Σοφία');

describe('the name rule', () => {
  it.each(NAMED)('refuses a name holding %j, naming it as U+XXXX', (char) => {
    for (const name of [`ali${char}ce`, `${char}bob`, `bob${char}`]) {
      const reason = unsafeNameReason(name);
      expect(reason, JSON.stringify(name)).toContain(codePointName(char));
      expect(() => checkSafeName(name, 'petname')).toThrow(expect.objectContaining({ code: 'bad_name', message: expect.stringContaining(codePointName(char)) }));
    }
  });

  it('refuses every hidden character anywhere in a usable name, and quotes the name with none left', () => {
    fc.assert(
      fc.property(letters, hiddenChar, fc.nat(), (name, char, at) => {
        const cut = at % (name.length + 1);
        const bad = name.slice(0, cut) + char + name.slice(cut);
        expect(hiddenCharacterReason(bad)).toContain(codePointName(char));
        let thrown: unknown;
        try {
          checkSafeName(bad, 'session id');
        } catch (err) {
          thrown = err;
        }
        expect(thrown).toBeInstanceOf(InterlinkError);
        expect((thrown as InterlinkError).code).toBe('bad_name');
        expect(/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u.test((thrown as InterlinkError).message)).toBe(false);
        expect(/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u.test(visibleName(bad))).toBe(false);
      }),
    );
  });

  it('takes names people use, in NFC whichever form they were typed in', () => {
    fc.assert(
      fc.property(letters, fc.constantFrom('NFC', 'NFD') as fc.Arbitrary<'NFC' | 'NFD'>, (name, form) => {
        const typed = name.normalize(form);
        expect(checkSafeName(typed, 'petname')).toBe(name.normalize('NFC'));
        expect(unsafeNameReason(name.normalize('NFC'))).toBeUndefined();
      }),
    );
    for (const name of ['a', 'A-Z_0.9', 'crème brûlée', '東京-会議', 'ελληνικά', '😀']) expect(unsafeNameReason(name), name).toBeUndefined();
  });

  it('refuses a stored or signed name that is not in NFC, and the path rule alone still takes it', () => {
    const nfd = 'José'.normalize('NFD');
    expect(unsafeNameReason(nfd)).toContain('NFC');
    expect(unsafePathReason(nfd)).toBeUndefined();
    // A name stored before the rule: the path rule reads it, the whole rule would refuse it.
    expect(unsafePathReason('bob\u202e')).toBeUndefined();
    expect(unsafePathReason('bob\u200b')).toBeUndefined();
  });

  it('shows only hidden characters as escapes, leaving every other one as it is', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme', maxLength: 20 }), (text) => {
        if (!/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u.test(text)) expect(visibleName(text)).toBe(text);
      }),
    );
    expect(visibleName('b\u202eob\u200b')).toBe('b\\u{202e}ob\\u{200b}');
  });
});
