/** Building blocks of signed byte strings: fixed-width integers and length-prefixed text. */

/** A u32 little-endian byte length, then the UTF-8 bytes; absent is the empty string. */
export function lengthPrefixed(value: string | undefined): Buffer[] {
  const bytes = Buffer.from(value ?? '', 'utf8');
  const length = Buffer.allocUnsafe(4);
  length.writeUInt32LE(bytes.length, 0);
  return [length, bytes];
}

export function u64le(value: number): Buffer {
  const bytes = Buffer.allocUnsafe(8);
  bytes.writeBigUInt64LE(BigInt(value), 0);
  return bytes;
}
