/**
 * Writes test/vectors/envelope-v2.json, envelope-v3.json and envelope-v4.json: envelope
 * test vectors from fixed seeds, timestamps, msg_ids and (version 4) seal nonces, so every
 * run produces the same files (Ed25519 signing is deterministic). The version 2 file is
 * the Rust Interlink's layout and does not change.
 *
 *   npm run build && node dist/scripts/gen-vectors.js
 *
 * The invalid vectors that break a strict rule are built so the verification equation
 * still holds: a verifier that skips the rule accepts them, which is what they catch. That
 * takes raw scalar arithmetic, done here with BigInt and SHA-512 from node:crypto.
 */
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { wireOf, type Envelope, type SealedWire } from '../src/envelope/envelope.js';
import { signEnvelope } from '../src/envelope/sign.js';
import { signedBytes } from '../src/envelope/signed-bytes.js';
import { bodyBytes, directionKey, montgomeryPublicKey, openBody, sealPlaintext, type SealedBody } from '../src/envelope/seal.js';
import { encodeBase64url } from '../src/identity/base64url.js';
import { signBytes as signBytesWith, signingKeyFromSeed, type SigningKey } from '../src/identity/ed25519.js';

export interface Vector {
  name: string;
  valid: boolean;
  seed_b64url?: string;
  envelope: WireEnvelope;
  signed_bytes_hex: string;
  /** Version 4: what the recipient gets when it opens the body (see docs/PROTOCOL.md "Sealing"). */
  seal?: SealVector;
}

export interface SealVector {
  /** The recipient's Ed25519 seed: with `seed_b64url`, both ends of the seal. */
  recipient_seed_b64url: string;
  /** Whether the body opens for the recipient and holds valid fields. */
  opens: boolean;
  x25519_sender_public_hex: string;
  x25519_recipient_public_hex: string;
  /** HKDF-SHA256 of the X25519 secret, for this direction. */
  direction_key_hex: string;
  /** The padded plaintext, when it opens. */
  plaintext_hex?: string;
  body?: SealedBody;
}

/** An envelope as written on the wire: `kind` may be left out and then means "message". */
export type WireEnvelope = (Omit<Envelope, 'kind'> & { kind?: string }) | SealedWire;

/** The group order L. */
const L = 2n ** 252n + 27742317777372353535851937790883648493n;

/** The identity point (0, 1): of order 1, so it is one of the eight small-order points. */
const IDENTITY_POINT = Buffer.concat([Buffer.of(1), Buffer.alloc(31)]);

const TS = 1_767_225_600_000; // 2026-01-01T00:00:00Z
const MSG_ID = '000102030405060708090a0b0c0d0e0f';
const IN_REPLY_TO = 'f0e0d0c0b0a090807060504030201000';
const GROUP_ID = '9f8e7d6c5b4a39281706f5e4d3c2b1a0';

/** Seeds are SHA-256 of a label, so anyone can rebuild them without this file. */
function seedFor(label: string): Buffer {
  return createHash('sha256').update(`interlink-v2 test vector seed: ${label}`).digest();
}

function leToBigInt(bytes: Uint8Array): bigint {
  return BigInt(`0x${Buffer.from(bytes).reverse().toString('hex') || '0'}`);
}

function bigIntToLe32(n: bigint): Buffer {
  return Buffer.from(n.toString(16).padStart(64, '0'), 'hex').reverse();
}

/** The clamped secret scalar RFC 8032 derives from a seed, reduced mod L. */
function secretScalar(seed: Uint8Array): bigint {
  const head = createHash('sha512').update(seed).digest().subarray(0, 32);
  head[0] = head[0]! & 248;
  head[31] = (head[31]! & 127) | 64;
  return leToBigInt(head) % L;
}

/** k = SHA-512(R || A || M) mod L. */
function challenge(r: Uint8Array, publicKey: Uint8Array, message: Uint8Array): bigint {
  return leToBigInt(createHash('sha512').update(r).update(publicKey).update(message).digest()) % L;
}

function withSig<T extends { sig: string }>(envelope: T, signature: Uint8Array): T {
  return { ...envelope, sig: encodeBase64url(signature) };
}

function sigBytes(envelope: { sig: string }): Buffer {
  return Buffer.from(envelope.sig, 'base64url');
}

function vector(name: string, valid: boolean, envelope: WireEnvelope, key?: SigningKey): Vector {
  const { sig: _sig, ...unsigned } = envelope;
  return {
    name,
    valid,
    ...(key !== undefined && { seed_b64url: encodeBase64url(key.seed) }),
    envelope,
    signed_bytes_hex: signedBytes({ ...unsigned, kind: unsigned.kind ?? 'message' } as Parameters<typeof signedBytes>[0]).toString('hex'),
  };
}

/** The nonce of a version 4 vector: SHA-256 of a label, first 12 bytes. */
function nonceFor(label: string): Buffer {
  return createHash('sha256').update(`interlink-v4 test vector nonce: ${label}`).digest().subarray(0, 12);
}

function parties() {
  const alice = signingKeyFromSeed(seedFor('alice'));
  const bob = signingKeyFromSeed(seedFor('bob'));
  const carol = signingKeyFromSeed(seedFor('carol'));
  return { alice, bob, carol, aliceKey: encodeBase64url(alice.publicKey), bobKey: encodeBase64url(bob.publicKey), carolKey: encodeBase64url(carol.publicKey) };
}

/**
 * The three honest envelopes both files start from: a minimal message, one with every
 * optional field, and a pairing request. With `sessions`, each is version 3 for that session.
 */
function baseEnvelopes(sessions?: { minimal: string; full: string; pairRequest: string }, version: 3 | 4 = 3) {
  const { alice, bob, carol, aliceKey, bobKey, carolKey } = parties();
  const to = (session: string | undefined) =>
    session === undefined ? {} : version === 3 ? { to_session: session, version } : { to_session: session, seal_nonce: nonceFor(session) };
  const minimal = signEnvelope(alice, { to: bobKey, ...to(sessions?.minimal), text: 'hello', ts: TS, msg_id: MSG_ID });
  const full = signEnvelope(bob, {
    to: aliceKey,
    ...to(sessions?.full),
    text: 'Grüße 👋 — 你好\nsecond line, "quoted", tab\there',
    ts: TS + 1,
    msg_id: 'a1a2a3a4a5a6a7a8a9aaabacadaeafb0',
    task_id: 'task-42',
    status: 'needs_input',
    in_reply_to: IN_REPLY_TO,
    reply_to: `${bobKey}#session-β`,
  });
  const pairRequest = signEnvelope(carol, {
    to: aliceKey,
    ...to(sessions?.pairRequest),
    kind: 'pair_request',
    text: 'carol would like to pair',
    ts: TS + 2,
    msg_id: 'c0c1c2c3c4c5c6c7c8c9cacbcccdcecf',
    reply_to: `${carolKey}#laptop`,
  });
  return { minimal, full, pairRequest };
}

/** Version 2: the Rust Interlink's layout (no signed session). */
export function buildVectors(): Vector[] {
  const { alice, bob, carol, bobKey, carolKey } = parties();
  const { minimal, full, pairRequest } = baseEnvelopes();
  const { kind: _kind, ...minimalWithoutKind } = minimal;

  const flipped = sigBytes(minimal);
  flipped[32] = flipped[32]! ^ 0x01;

  // S + L: the same scalar mod L, spelled with a value of at least L.
  const minimalSig = sigBytes(minimal);
  const sPlusL = Buffer.concat([minimalSig.subarray(0, 32), bigIntToLe32(leToBigInt(minimalSig.subarray(32)) + L)]);

  // A = identity: [S]B - [k]A = [S]B, so R = [s]B (an honest public key) with S = s verifies
  // under the cofactorless equation; only the small-order rule refuses it.
  const nonceSeed = seedFor('nonce');
  const nonceKey = signingKeyFromSeed(nonceSeed);
  const smallOrderFrom: Envelope = { ...minimal, from: encodeBase64url(IDENTITY_POINT), msg_id: '101112131415161718191a1b1c1d1e1f' };
  const smallOrderA = withSig(smallOrderFrom, Buffer.concat([nonceKey.publicKey, bigIntToLe32(secretScalar(nonceSeed))]));

  // R = identity with S = k·a: [S]B - [k]A = identity = R, so again only the small-order rule refuses it.
  const smallOrderRUnsigned: Envelope = { ...minimal, msg_id: '20212223242526272829202a2b2c2d2e', sig: '' };
  const k = challenge(IDENTITY_POINT, alice.publicKey, signedBytes(smallOrderRUnsigned));
  const smallOrderR = withSig(smallOrderRUnsigned, Buffer.concat([IDENTITY_POINT, bigIntToLe32((k * secretScalar(alice.seed)) % L)]));

  // The last of the 86 characters carries 2 bits of the signature and 4 zero bits; a set
  // zero bit decodes to the same bytes, so only the canonical-spelling rule refuses it.
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  const lastChar = alphabet[alphabet.indexOf(minimal.sig.slice(-1)) + 1]!;

  return [
    vector('valid: minimal message', true, minimal, alice),
    vector('valid: kind omitted, read as "message" (same signature as the minimal message)', true, minimalWithoutKind, alice),
    vector('valid: every optional field, reply_to and non-ASCII text', true, full, bob),
    vector('valid: reply_to changed after signing (reply_to is not signed)', true, { ...full, reply_to: `${bobKey}#another-session` }, bob),
    vector('valid: pair_request from a stranger', true, pairRequest, carol),
    vector('invalid: one bit of S flipped', false, withSig(minimal, flipped), alice),
    vector('invalid: text changed after signing', false, { ...minimal, text: 'hellp' }, alice),
    vector('invalid: task_id added after signing', false, { ...minimal, task_id: 'task-1' }, alice),
    vector('invalid: to changed after signing', false, { ...minimal, to: carolKey }, alice),
    vector('invalid: public key is the small-order identity point (equation holds)', false, smallOrderA),
    vector('invalid: R is the small-order identity point (equation holds)', false, smallOrderR, alice),
    vector('invalid: non-canonical S (S + L)', false, withSig(minimal, sPlusL), alice),
    vector('invalid: non-canonical base64url signature (trailing bits set)', false, { ...minimal, sig: minimal.sig.slice(0, -1) + lastChar }, alice),
  ];
}

/** Version 3: the target session and the reply session are signed. */
export function buildV3Vectors(): Vector[] {
  const { alice, bob, carol, bobKey, carolKey } = parties();
  const { minimal, full, pairRequest } = baseEnvelopes({ minimal: 'main', full: 'sessión-α', pairRequest: 'cli' });
  const { v: _v, to_session: _toSession, ...downgraded } = minimal;
  const v2 = buildVectors()[0]!.envelope as Envelope;
  return [
    vector('valid: minimal message for session "main"', true, minimal, alice),
    vector('valid: every optional field, a non-ASCII session, reply_to and non-ASCII text', true, full, bob),
    vector('valid: pair_request from a stranger to the session "cli"', true, pairRequest, carol),
    vector('invalid: to_session changed after signing (a relay moving it to another session)', false, { ...minimal, to_session: 'other' }, alice),
    vector('invalid: reply_to session changed after signing', false, { ...full, reply_to: `${bobKey}#another-session` }, bob),
    vector('invalid: reply_to naming another key than from', false, { ...full, reply_to: `${carolKey}#session-β` }, bob),
    vector('invalid: v and to_session removed (read as version 2, whose domain differs)', false, downgraded, alice),
    vector('invalid: a version 2 signature with v and to_session added', false, { ...v2, v: 3, to_session: 'main' }, alice),
    vector('invalid: text changed after signing', false, { ...minimal, text: 'hellp' }, alice),
  ];
}

/** A version 4 vector, with what its recipient computes when it opens the body. */
function sealedVector(name: string, valid: boolean, envelope: SealedWire, sender: SigningKey, recipient: SigningKey): Vector {
  const header = { to_session: envelope.to_session, ts: envelope.ts, kind: envelope.kind, msg_id: envelope.msg_id };
  const from = Buffer.from(envelope.from, 'base64url');
  const to = Buffer.from(envelope.to, 'base64url');
  const key = directionKey(recipient, envelope.from, envelope.to);
  let opened: SealedBody | undefined;
  try {
    opened = openBody(recipient, envelope.from, envelope.to, header, Buffer.from(envelope.sealed, 'base64url'));
  } catch {
    opened = undefined;
  }
  return {
    ...vector(name, valid, envelope, sender),
    seal: {
      recipient_seed_b64url: encodeBase64url(recipient.seed),
      opens: opened !== undefined,
      x25519_sender_public_hex: montgomeryPublicKey(from).toString('hex'),
      x25519_recipient_public_hex: montgomeryPublicKey(to).toString('hex'),
      direction_key_hex: key.toString('hex'),
      ...(opened !== undefined && { plaintext_hex: bodyBytes(opened).toString('hex'), body: opened }),
    },
  };
}

function resign(key: SigningKey, envelope: SealedWire): SealedWire {
  const { sig: _sig, ...unsigned } = envelope;
  return { ...unsigned, sig: encodeBase64url(signBytesWith(key, signedBytes(unsigned))) };
}

/** Version 4: the body sealed to the recipient; the signature covers the ciphertext. */
export function buildV4Vectors(): Vector[] {
  const { alice, bob, carol, carolKey } = parties();
  const { minimal, full, pairRequest } = baseEnvelopes({ minimal: 'main', full: 'sessión-α', pairRequest: 'cli' }, 4);
  const [m, f, p] = [minimal, full, pairRequest].map((e) => wireOf(e) as SealedWire) as [SealedWire, SealedWire, SealedWire];
  const { v: _v, ...unversioned } = m;

  const flipped = Buffer.from(m.sealed, 'base64url');
  flipped[12] = flipped[12]! ^ 0x01;

  // Signed by alice, but the body was sealed to carol: the signature holds, the seal does not open for bob.
  const toCarol = wireOf(signEnvelope(alice, { to: carolKey, to_session: 'main', text: 'hello', ts: m.ts, msg_id: m.msg_id, seal_nonce: nonceFor('spliced') })) as SealedWire;
  const spliced = resign(alice, { ...m, sealed: toCarol.sealed });
  // The same sealed body under a header with another ts, signed again: the AEAD refuses it.
  const retimed = resign(alice, { ...m, ts: m.ts + 1 });
  // Authentic, but the padding after the fields is not zero.
  const padded = bodyBytes({ text: 'hello' });
  padded[padded.length - 1] = 1;
  const badPadding = resign(alice, {
    ...m,
    sealed: encodeBase64url(sealPlaintext(alice, m.to, { to_session: m.to_session, ts: m.ts, kind: m.kind, msg_id: m.msg_id }, padded, nonceFor('padding'))),
  });

  // One copy of a task sent to several recipients: the sixth body field, the group id.
  const grouped = wireOf(
    signEnvelope(alice, { to: m.to, to_session: 'main', text: 'review PR 42', task_id: 'pr-42', group: GROUP_ID, ts: TS + 3, msg_id: 'd0d1d2d3d4d5d6d7d8d9dadbdcdddedf', seal_nonce: nonceFor('group') }),
  ) as SealedWire;

  return [
    sealedVector('valid: minimal message for session "main"', true, m, alice, bob),
    sealedVector('valid: every optional field, a non-ASCII session, reply_to and non-ASCII text', true, f, bob, alice),
    sealedVector('valid: pair_request from a stranger to the session "cli"', true, p, carol, alice),
    sealedVector('invalid: to_session changed after signing (a relay moving it to another session)', false, { ...m, to_session: 'other' }, alice, bob),
    sealedVector('invalid: to changed after signing (a relay re-targeting it)', false, { ...m, to: carolKey }, alice, carol),
    sealedVector('invalid: one bit of the sealed body flipped', false, { ...m, sealed: encodeBase64url(flipped) }, alice, bob),
    sealedVector('invalid: the sealed body of another message spliced in', false, { ...m, sealed: f.sealed }, alice, bob),
    sealedVector('valid signature, does not open: a body sealed to someone else, signed for bob', true, spliced, alice, bob),
    sealedVector('valid signature, does not open: ts changed and signed again (the header is sealed with the body)', true, retimed, alice, bob),
    sealedVector('valid signature, does not open: padding that is not zero', true, badPadding, alice, bob),
    vector('invalid: v removed (read as version 2, which has no sealed field)', false, unversioned as unknown as WireEnvelope, alice),
    sealedVector('valid: one copy of a message to several recipients, its group id in the sealed body', true, grouped, alice, bob),
  ];
}

function main(): void {
  const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
  for (const [file, vectors] of [['envelope-v2.json', buildVectors()], ['envelope-v3.json', buildV3Vectors()], ['envelope-v4.json', buildV4Vectors()]] as const) {
    const path = resolve(root, 'test', 'vectors', file);
    writeFileSync(path, JSON.stringify(vectors, null, 2) + '\n');
    process.stdout.write(`wrote ${vectors.length} vectors to ${path}\n`);
  }
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main();
