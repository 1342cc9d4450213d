/**
 * The rule that keeps names chosen by users or peers (session ids, petnames) from
 * escaping their directory. Where files live is layout.ts.
 */
import { InterlinkError } from '../errors.js';

export const MAX_NAME_BYTES = 128;

/**
 * Session ids and petnames become path components. Anything that could name another
 * directory, hide in a terminal or overflow a file name is refused.
 */
export function checkSafeName(name: string, what: 'session id' | 'petname'): string {
  const reason = unsafeNameReason(name);
  if (reason !== undefined) {
    throw new InterlinkError('bad_name', `${what} ${JSON.stringify(name.slice(0, 40))} is not allowed: ${reason}`);
  }
  return name;
}

export function unsafeNameReason(name: string): string | undefined {
  if (name.length === 0) return 'it is empty';
  if (Buffer.byteLength(name, 'utf8') > MAX_NAME_BYTES) return `it is longer than ${MAX_NAME_BYTES} bytes`;
  if (name === '.' || name === '..' || name.includes('..')) return 'it contains ".."';
  if (name.includes('/') || name.includes('\\')) return 'it contains a path separator';
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f-\u009f]/.test(name)) return 'it contains a control character';
  if (name.trim() !== name) return 'it starts or ends with white space';
  if (!isWellFormedUnicode(name)) return 'it is not well-formed Unicode';
  return undefined;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * False for strings with unpaired UTF-16 surrogates. UTF-8 encoding turns each into
 * U+FFFD, so two different strings would share one encoding (and one signature).
 */
export function isWellFormedUnicode(text: string): boolean {
  return !LONE_SURROGATE.test(text);
}
