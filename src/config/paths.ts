/**
 * The rules for names chosen by users or peers (session ids, petnames): none may escape
 * its directory (every name, stored ones too), and a new name may not hide characters
 * from the person reading it (name-characters.ts). Where files live is layout.ts.
 */
import { InterlinkError } from '../errors.js';
import { hiddenCharacterReason, notNfcReason, visibleName } from './name-characters.js';

export const MAX_NAME_BYTES = 128;

/**
 * Where a session id or petname enters (the command line, a tool's arguments, the
 * environment): normalised to NFC, then refused if it could name another directory,
 * hide in a terminal or overflow a file name. Returns the name to use.
 */
export function checkSafeName(name: string, what: 'session id' | 'petname' | 'audience name'): string {
  const normal = name.normalize('NFC');
  const reason = unsafeNameReason(normal);
  if (reason !== undefined) throw badName(name, what, reason);
  return normal;
}

/** A name a file already holds (a stored session's file): only the path rule applies. */
export function checkPathName(name: string, what: 'session id' | 'petname' | 'audience name'): string {
  const reason = unsafePathReason(name);
  if (reason !== undefined) throw badName(name, what, reason);
  return name;
}

function badName(name: string, what: string, reason: string): InterlinkError {
  return new InterlinkError('bad_name', `${what} ${JSON.stringify(visibleName(name.slice(0, 40)))} is not allowed: ${reason}`);
}

/**
 * The whole rule, for names that enter now and names in signed envelopes and
 * announcements: the path rule, no hidden character (named as U+XXXX), and NFC.
 */
export function unsafeNameReason(name: string): string | undefined {
  return hiddenCharacterReason(name) ?? unsafePathReason(name) ?? notNfcReason(name);
}

/**
 * The path rule alone: what files written before the hidden-character rule (peers.json,
 * session files) are read with, so an upgrade neither moves aside nor hides what they
 * hold; views print such names made visible (visibleName).
 */
export function unsafePathReason(name: string): string | undefined {
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
