/**
 * test/vectors/envelope-v2.json, envelope-v3.json and envelope-v4.json: the committed
 * vectors are what the generator produces, each vector's signed bytes match, and each
 * verdict matches both `verifyEnvelope` and the noble oracle; for version 4, the X25519
 * keys, the direction key and the opened body match what node:crypto computes on its own.
 * Another implementation can run the same files.
 */
import { createPrivateKey, createPublicKey, diffieHellman, hkdfSync } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { buildV3Vectors, buildV4Vectors, buildVectors } from '../../scripts/gen-vectors.js';
import { envelopeFields, isSealed, parseEnvelope, sealedWireSchema } from '../../src/envelope/envelope.js';
import { openEnvelope } from '../../src/envelope/open.js';
import { signEnvelope, verifyEnvelope } from '../../src/envelope/sign.js';
import { signedBytes } from '../../src/envelope/signed-bytes.js';
import { montgomeryPublicKey, montgomerySecretKey } from '../../src/envelope/seal.js';
import { InterlinkError } from '../../src/errors.js';
import { signBytes, signingKeyFromSeed } from '../../src/identity/ed25519.js';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { fingerprintOf } from '../../src/identity/identity.js';
import { verificationCode } from '../../src/pairing/code.js';
import { equationHoldsLeniently, nobleVerify, strictVerdict } from '../helpers/noble-oracle.js';

const vectorSchema = z.object({
  name: z.string().min(1),
  valid: z.boolean(),
  seed_b64url: z.string().optional(),
  envelope: z.record(z.string(), z.unknown()),
  signed_bytes_hex: z.string().regex(/^([0-9a-f]{2})+$/),
  seal: z
    .object({
      recipient_seed_b64url: z.string(),
      opens: z.boolean(),
      x25519_sender_public_hex: z.string(),
      x25519_recipient_public_hex: z.string(),
      direction_key_hex: z.string(),
      plaintext_hex: z.string().optional(),
      body: z.record(z.string(), z.string()).optional(),
    })
    .optional(),
});

const VECTORS_URL = new URL('../vectors/envelope-v2.json', import.meta.url);
const V3_URL = new URL('../vectors/envelope-v3.json', import.meta.url);
const vectors = z.array(vectorSchema).parse(JSON.parse(readFileSync(VECTORS_URL, 'utf8')));
const v3Vectors = z.array(vectorSchema).parse(JSON.parse(readFileSync(V3_URL, 'utf8')));
const V4_URL = new URL('../vectors/envelope-v4.json', import.meta.url);
const v4Vectors = z.array(vectorSchema).parse(JSON.parse(readFileSync(V4_URL, 'utf8')));
const unsignedSchema = envelopeFields.omit({ sig: true });

/** The raw wire values, decoded without any strictness beyond base64url. */
function rawParts(envelope: Record<string, unknown>): { from: Buffer; sig: Buffer } {
  const text = z.object({ from: z.string(), sig: z.string() }).parse(envelope);
  return { from: Buffer.from(text.from, 'base64url'), sig: Buffer.from(text.sig, 'base64url') };
}

function parses(envelope: unknown): boolean {
  try {
    parseEnvelope(envelope);
    return true;
  } catch (err) {
    if (err instanceof InterlinkError) return false;
    throw err;
  }
}

function accepted(envelope: unknown): boolean {
  try {
    return verifyEnvelope(parseEnvelope(envelope));
  } catch (err) {
    if (err instanceof InterlinkError) return false;
    throw err;
  }
}

function checkVector(v: z.infer<typeof vectorSchema>): void {
  const unsigned = v.envelope.v === 4 ? sealedWireSchema.omit({ sig: true }).parse(v.envelope) : unsignedSchema.safeParse(v.envelope).data;
  if (unsigned !== undefined) expect(signedBytes(unsigned).toString('hex')).toBe(v.signed_bytes_hex);
  else expect(v.valid).toBe(false);
  expect(accepted(v.envelope)).toBe(v.valid);

  const message = Buffer.from(v.signed_bytes_hex, 'hex');
  const { from, sig } = rawParts(v.envelope);
  const verdict = strictVerdict(from, message, sig);
  if (v.valid) {
    expect(verdict).toBe('valid');
    expect(nobleVerify(from, message, sig)).toBe(true);
  } else if (parses(v.envelope)) {
    expect(verdict).not.toBe('valid');
  }

  if (v.seed_b64url !== undefined && v.valid) {
    // Signing is deterministic: the seed re-creates the key and the exact signature.
    const key = signingKeyFromSeed(Buffer.from(v.seed_b64url, 'base64url'));
    const envelope = parseEnvelope(v.envelope);
    expect(key.publicKey.toString('base64url')).toBe(envelope.from);
    if (isSealed(envelope)) {
      // The sealed body is random (its nonce); over the same ciphertext the signature is not.
      const { sig: _sig, ...unsigned } = envelope;
      expect(signBytes(key, signedBytes(unsigned)).toString('base64url')).toBe(envelope.sig);
    } else {
      const { sig: _sig, from: _from, v: version, ...fields } = envelope;
      expect(signEnvelope(key, { ...fields, ...(version === 3 && { version }) }).sig).toBe(envelope.sig);
    }
  }
}

describe('envelope-v2 vectors', () => {
  it('the committed file is exactly what scripts/gen-vectors.ts produces', () => {
    expect(JSON.parse(JSON.stringify(buildVectors()))).toEqual(JSON.parse(readFileSync(VECTORS_URL, 'utf8')));
  });

  it('cover the required cases', () => {
    const names = vectors.map((v) => v.name);
    for (const needed of [
      'valid: minimal message',
      'valid: every optional field, reply_to and non-ASCII text',
      'valid: pair_request from a stranger',
      'invalid: one bit of S flipped',
      'invalid: public key is the small-order identity point (equation holds)',
      'invalid: R is the small-order identity point (equation holds)',
      'invalid: non-canonical S (S + L)',
      'invalid: text changed after signing',
      'invalid: non-canonical base64url signature (trailing bits set)',
    ]) {
      expect(names).toContain(needed);
    }
    expect(new Set(names).size).toBe(names.length);
  });

  it.each(vectors.map((v) => [v.name, v] as const))('%s', (_name, v) => checkVector(v));

  it('the small-order and S + L vectors fail only through the strict rules', () => {
    const byName = new Map(vectors.map((v) => [v.name, v]));
    const expectations: [string, string][] = [
      ['invalid: public key is the small-order identity point (equation holds)', 'small_order_a'],
      ['invalid: R is the small-order identity point (equation holds)', 'small_order_r'],
      ['invalid: non-canonical S (S + L)', 'non_canonical_s'],
    ];
    for (const [name, reason] of expectations) {
      const v = byName.get(name);
      expect(v).toBeDefined();
      if (v === undefined) continue;
      const message = Buffer.from(v.signed_bytes_hex, 'hex');
      const { from, sig } = rawParts(v.envelope);
      expect(strictVerdict(from, message, sig)).toBe(reason);
      expect(equationHoldsLeniently(from, message, sig)).toBe(true);
    }
  });

  it('the non-canonical base64url vector fails only through its spelling', () => {
    const v = vectors.find((x) => x.name === 'invalid: non-canonical base64url signature (trailing bits set)');
    expect(v).toBeDefined();
    if (v === undefined) return;
    expect(parses(v.envelope)).toBe(false);
    const { from, sig } = rawParts(v.envelope);
    expect(strictVerdict(from, Buffer.from(v.signed_bytes_hex, 'hex'), sig)).toBe('valid');
  });

  it('the worked example in docs/PROTOCOL.md is the minimal vector, byte for byte', () => {
    const doc = readFileSync(new URL('../../docs/PROTOCOL.md', import.meta.url), 'utf8');
    const block = /<!-- worked-example:start -->\s*```text\n([\s\S]*?)```\s*<!-- worked-example:end -->/.exec(doc)?.[1];
    expect(block).toBeDefined();
    const hex = (block ?? '')
      .split('\n')
      .map((line) => line.split('  ')[0]!.replace(/\s+/g, ''))
      .join('');
    const minimal = vectors.find((v) => v.name === 'valid: minimal message');
    expect(hex).toBe(minimal?.signed_bytes_hex);
    const { from, sig } = rawParts(minimal?.envelope ?? {});
    expect(doc).toContain(`has fingerprint \`${fingerprintOf(from)}\``);
    expect(doc).toContain(sig.toString('base64url'));
  });
});

describe('envelope-v3 vectors', () => {
  it('the committed file is exactly what scripts/gen-vectors.ts produces', () => {
    expect(JSON.parse(JSON.stringify(buildV3Vectors()))).toEqual(JSON.parse(readFileSync(V3_URL, 'utf8')));
  });

  it('cover the session cases', () => {
    const names = v3Vectors.map((v) => v.name);
    for (const needed of [
      'valid: minimal message for session "main"',
      'invalid: to_session changed after signing (a relay moving it to another session)',
      'invalid: reply_to session changed after signing',
      'invalid: v and to_session removed (read as version 2, whose domain differs)',
      'invalid: a version 2 signature with v and to_session added',
    ]) {
      expect(names).toContain(needed);
    }
    expect(new Set(names).size).toBe(names.length);
  });

  it.each(v3Vectors.map((v) => [v.name, v] as const))('%s', (_name, v) => checkVector(v));

  it('signs the session between the keys and the time, and the reply session last', () => {
    const minimal = v3Vectors.find((v) => v.name === 'valid: minimal message for session "main"')!;
    const bytes = Buffer.from(minimal.signed_bytes_hex, 'hex');
    expect(bytes.subarray(0, 13).toString('latin1')).toBe('interlink-v3\0');
    expect(bytes.subarray(77, 81).readUInt32LE(0)).toBe(4);
    expect(bytes.subarray(81, 85).toString('utf8')).toBe('main');
    expect(bytes.subarray(bytes.length - 4).readUInt32LE(0)).toBe(0);
  });
});

describe('envelope-v4 vectors', () => {
  it('the committed file is exactly what scripts/gen-vectors.ts produces', () => {
    expect(JSON.parse(JSON.stringify(buildV4Vectors()))).toEqual(JSON.parse(readFileSync(V4_URL, 'utf8')));
  });

  it.each(v4Vectors.map((v) => [v.name, v] as const))('%s', (_name, v) => {
    checkVector(v);
    if (v.seal === undefined) return;
    const sender = signingKeyFromSeed(Buffer.from(v.seed_b64url!, 'base64url'));
    const recipient = signingKeyFromSeed(Buffer.from(v.seal.recipient_seed_b64url, 'base64url'));
    // Each side's X25519 key from its Ed25519 one: the public key by the birational map must
    // be what node:crypto derives from the clamped scalar on its own.
    const x25519Public = (seed: Buffer): Buffer =>
      createPublicKey(createPrivateKey({ key: Buffer.concat([Buffer.from('302e020100300506032b656e04220420', 'hex'), montgomerySecretKey(seed)]), format: 'der', type: 'pkcs8' }))
        .export({ format: 'der', type: 'spki' })
        .subarray(12);
    const from = Buffer.from(v.envelope.from as string, 'base64url');
    const to = Buffer.from(v.envelope.to as string, 'base64url');
    expect(montgomeryPublicKey(from).toString('hex')).toBe(v.seal.x25519_sender_public_hex);
    expect(montgomeryPublicKey(to).toString('hex')).toBe(v.seal.x25519_recipient_public_hex);
    if (from.equals(sender.publicKey)) expect(x25519Public(sender.seed).toString('hex')).toBe(v.seal.x25519_sender_public_hex);
    if (to.equals(recipient.publicKey)) {
      expect(x25519Public(recipient.seed).toString('hex')).toBe(v.seal.x25519_recipient_public_hex);
      // The direction key, from the recipient's side, by the documented HKDF.
      const privateKey = createPrivateKey({ key: Buffer.concat([Buffer.from('302e020100300506032b656e04220420', 'hex'), montgomerySecretKey(recipient.seed)]), format: 'der', type: 'pkcs8' });
      const publicKey = createPublicKey({ key: Buffer.concat([Buffer.from('302a300506032b656e032100', 'hex'), Buffer.from(v.seal.x25519_sender_public_hex, 'hex')]), format: 'der', type: 'spki' });
      const shared = diffieHellman({ privateKey, publicKey });
      expect(Buffer.from(hkdfSync('sha256', shared, 'interlink-seal-v4', Buffer.concat([from, to]), 32)).toString('hex')).toBe(v.seal.direction_key_hex);
    }
    let opened: Record<string, unknown> | undefined;
    try {
      const wire = parseEnvelope(v.envelope);
      if (isSealed(wire) && verifyEnvelope(wire)) opened = openEnvelope(recipient, wire);
    } catch (err) {
      expect(err).toBeInstanceOf(InterlinkError);
    }
    expect(opened !== undefined).toBe(v.seal.opens && v.valid);
    if (opened !== undefined && v.seal.body !== undefined) {
      const { reply_session, ...fields } = v.seal.body;
      expect(opened).toMatchObject({ ...fields, ...(reply_session !== undefined && { reply_to: `${v.envelope.from as string}#${reply_session}` }) });
    }
  });

  it('signs the header and then the sealed bytes, and seals to a size class', () => {
    const minimal = v4Vectors.find((v) => v.name === 'valid: minimal message for session "main"')!;
    const bytes = Buffer.from(minimal.signed_bytes_hex, 'hex');
    expect(bytes.subarray(0, 13).toString('latin1')).toBe('interlink-v4\0');
    const sealed = Buffer.from(minimal.envelope.sealed as string, 'base64url');
    expect(bytes.subarray(bytes.length - sealed.length).equals(sealed)).toBe(true);
    expect(bytes.readUInt32LE(bytes.length - sealed.length - 4)).toBe(sealed.length);
    // 12-byte nonce, the smallest class (256 bytes), 16-byte tag: "hello" is not told by its length.
    expect(sealed.length).toBe(12 + 256 + 16);
    expect(Buffer.from(minimal.seal!.plaintext_hex!, 'hex').length).toBe(256);
  });
});

describe('test/vectors/pair-code-v1.json', () => {
  const codeVectorSchema = z.object({
    name: z.string(),
    requester_seed_hex: z.string(),
    accepter_seed_hex: z.string(),
    requester: z.string(),
    accepter: z.string(),
    request_id: z.string(),
    code: z.string(),
  });
  const codeVectors = z.array(codeVectorSchema).parse(JSON.parse(readFileSync(new URL('../vectors/pair-code-v1.json', import.meta.url), 'utf8')));

  it.each(codeVectors.map((v) => [v.name, v] as const))('%s', (_name, v) => {
    // The keys follow from the seeds, and the code from the keys and the request id.
    expect(encodeBase64url(signingKeyFromSeed(Buffer.from(v.requester_seed_hex, 'hex')).publicKey)).toBe(v.requester);
    expect(encodeBase64url(signingKeyFromSeed(Buffer.from(v.accepter_seed_hex, 'hex')).publicKey)).toBe(v.accepter);
    expect(verificationCode(v.requester, v.accepter, v.request_id)).toBe(v.code);
  });
});
