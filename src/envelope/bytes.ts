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

/** How many bytes `FieldWriter.text(value)` writes: the u32 length and the UTF-8. */
export function prefixedSize(value: string | undefined): number {
  return 4 + (value === undefined ? 0 : Buffer.byteLength(value, 'utf8'));
}

/**
 * Writes the same layout as `lengthPrefixed` and `u64le` into one buffer sized in advance
 * (with `prefixedSize`), instead of allocating a buffer per part and concatenating them:
 * the per-message byte strings (a seal's plaintext and associated data, the signed bytes
 * of a sealed envelope) are built once, in place.
 */
export class FieldWriter {
  private at = 0;

  constructor(readonly buffer: Buffer) {}

  /** A u32 little-endian byte length, then the UTF-8 bytes; absent is the empty string. */
  text(value: string | undefined): this {
    const length = value === undefined ? 0 : this.buffer.write(value, this.at + 4, 'utf8');
    this.buffer.writeUInt32LE(length, this.at);
    this.at += 4 + length;
    return this;
  }

  /** A u32 little-endian byte length, then the bytes. */
  prefixedBytes(bytes: Uint8Array): this {
    this.buffer.writeUInt32LE(bytes.length, this.at);
    return this.bytes(bytes, this.at + 4);
  }

  u64(value: number): this {
    this.buffer.writeBigUInt64LE(BigInt(value), this.at);
    this.at += 8;
    return this;
  }

  bytes(bytes: Uint8Array, at = this.at): this {
    this.buffer.set(bytes, at);
    this.at = at + bytes.length;
    return this;
  }

  /** Bytes written so far. */
  get written(): number {
    return this.at;
  }
}
