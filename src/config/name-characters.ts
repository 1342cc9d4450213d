/**
 * The characters a petname or session id may not hold because a person would not see them
 * as written: control characters, format characters (bidirectional controls that reorder
 * the text on screen, zero-width characters that hide inside it) and the line and
 * paragraph separators. Unicode general categories Cc, Cf, Zl and Zp, all of them: a name
 * needs none, and a rule by category also covers the ones added in later Unicode versions.
 * Names are kept in NFC, so two spellings of one accented letter are one name.
 */

/** Every code point of the categories a name may not hold. */
const HIDDEN = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u;
const HIDDEN_ALL = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu;

const BIDI = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/u;
const ZERO_WIDTH = /[\u200b-\u200d\u2060\ufeff]/u;

/** `U+202E`: how an error names a character, so the message itself shows nothing hidden. */
export function codePointName(char: string): string {
  return `U+${char.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`;
}

function kindOf(char: string): string {
  if (BIDI.test(char)) return 'a bidirectional control character, which reorders text on screen';
  if (ZERO_WIDTH.test(char)) return 'a zero-width character, invisible on screen';
  if (char === '\u2028' || char === '\u2029') return 'a line or paragraph separator';
  if (/\p{Cc}/u.test(char)) return 'a control character';
  return 'an invisible format character';
}

/** Why `name` holds a character no name may hold (the first one, as U+XXXX), or undefined. */
export function hiddenCharacterReason(name: string): string | undefined {
  const found = HIDDEN.exec(name);
  if (found === null) return undefined;
  return `it contains ${codePointName(found[0])} (${kindOf(found[0])})`;
}

/** Why `name` is not in NFC, or undefined. The entry points normalise; stored and signed names are checked. */
export function notNfcReason(name: string): string | undefined {
  return name.normalize('NFC') === name ? undefined : 'it is not in Unicode normalisation form NFC';
}

/**
 * A name as it may be quoted in a message or printed on a terminal: each hidden
 * character shown as `\u{202e}`. Names stored before this rule can still hold them.
 */
export function visibleName(name: string): string {
  return name.replace(HIDDEN_ALL, (c) => `\\u{${c.codePointAt(0)!.toString(16)}}`);
}
