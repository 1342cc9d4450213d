/**
 * Text that others wrote (a message body, a claimed name), made safe to print on a
 * terminal: control characters (ESC, BEL, C1), and the bidi and line-separator characters
 * that can make text on screen read differently from its bytes, are shown as visible
 * `\u{…}` escapes. Newlines and tabs stay. JSON output needs none of this: it is data.
 */
// eslint-disable-next-line no-control-regex
const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

export function forTerminal(text: string): string {
  return text.replace(UNSAFE, (c) => `\\u{${c.codePointAt(0)!.toString(16)}}`);
}
