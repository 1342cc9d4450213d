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

export function isBase64urlOfLength(text: string, byteLength: number): boolean {
  try {
    decodeBase64url(text, byteLength, 'value');
    return true;
  } catch {
    return false;
  }
}
