import { InterlinkError } from '../errors.js';

const ALPHABET = /^[A-Za-z0-9_-]*$/;

/** base64url without padding, as every key and signature on the wire is written. */
export function encodeBase64url(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64url');
}

/**
 * Strict decoding: only the base64url alphabet, no padding, the exact length, and the
 * canonical form (re-encoding gives the same text), so one value has one spelling.
 */
export function decodeBase64url(text: string, byteLength: number, what: string): Buffer {
  const expectedChars = Math.ceil((byteLength * 4) / 3);
  if (text.length !== expectedChars || !ALPHABET.test(text)) {
    throw new InterlinkError('bad_key', `${what} must be ${byteLength} bytes of base64url without padding (${expectedChars} characters)`);
  }
  const bytes = Buffer.from(text, 'base64url');
  if (bytes.length !== byteLength || bytes.toString('base64url') !== text) {
    throw new InterlinkError('bad_key', `${what} is not canonical base64url`);
  }
  return bytes;
}

/** The value of a base64url character, or -1. */
function sextet(code: number): number {
  if (code >= 65 && code <= 90) return code - 65; // A-Z
  if (code >= 97 && code <= 122) return code - 71; // a-z
  if (code >= 48 && code <= 57) return code + 4; // 0-9
  if (code === 45) return 62; // -
  if (code === 95) return 63; // _
  return -1;
}

/**
 * Whether `text` is base64url without padding in its one canonical spelling — what
 * `decodeBase64url` accepts, without decoding: only the alphabet, not a length that leaves
 * a single character over, and zeros in the bits of the last character that hold no byte
 * (4 of them after 2 characters, 2 after 3). Any other spelling of the same bytes differs
 * in exactly those bits.
 */
export function isCanonicalBase64url(text: string): boolean {
  const over = text.length % 4;
  if (over === 1 || !ALPHABET.test(text)) return false;
  if (over === 0) return true;
  return (sextet(text.charCodeAt(text.length - 1)) & (over === 2 ? 0x0f : 0x03)) === 0;
}

export function isBase64urlOfLength(text: string, byteLength: number): boolean {
  try {
    decodeBase64url(text, byteLength, 'value');
    return true;
  } catch {
    return false;
  }
}
