/**
 * Writes test/vectors/relay-auth.json: the two proofs of a relay connection (wire/auth.ts,
 * docs/PROTOCOL.md "Challenge and authentication") from fixed seeds and nonces, so every
 * run produces the same file (Ed25519 signing is deterministic).
 *
 *   npm run build && node dist/scripts/gen-relay-vectors.js
 */
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { lengthPrefixed } from '../src/envelope/bytes.js';
import { encodeBase64url } from '../src/identity/base64url.js';
import { signBytes, signingKeyFromSeed, type SigningKey } from '../src/identity/ed25519.js';
import { authBytes, welcomeBytes } from '../src/wire/auth.js';

export interface RelayAuthVector {
  name: string;
  /** `auth`: a route's proof to a relay; `welcome`: a relay's proof of its own key. */
  proof: 'auth' | 'welcome';
  valid: boolean;
  /** The seed of the key that signed (the route's key for `auth`, the relay's for `welcome`). */
  seed_b64url: string;
  relay_key: string;
  relay_nonce: string;
  client_nonce?: string;
  route?: string;
  signed_bytes_hex: string;
  sig: string;
}

function seeded(name: string): { seed: Buffer; key: SigningKey; public: string } {
  const seed = createHash('sha256').update(`interlink relay vector seed: ${name}`).digest();
  const key = signingKeyFromSeed(seed);
  return { seed, key, public: encodeBase64url(key.publicKey) };
}

const counting = (from: number) => encodeBase64url(Buffer.from(Array.from({ length: 32 }, (_, i) => from + i)));

export function buildRelayAuthVectors(): RelayAuthVector[] {
  const alice = seeded('alice');
  const relay = seeded('relay');
  const forwarder = seeded('forwarder');
  const relayNonce = counting(0);
  const clientNonce = counting(32);
  const route = `${alice.public}#main`;
  const auth = (name: string, valid: boolean, relayKey: string, routeText: string, signed: Buffer): RelayAuthVector => ({
    name,
    proof: 'auth',
    valid,
    seed_b64url: encodeBase64url(alice.seed),
    relay_key: relayKey,
    relay_nonce: relayNonce,
    route: routeText,
    signed_bytes_hex: authBytes(relayKey, relayNonce, routeText).toString('hex'),
    sig: encodeBase64url(signBytes(alice.key, signed)),
  });
  const welcome = (name: string, valid: boolean, signed: Buffer): RelayAuthVector => ({
    name,
    proof: 'welcome',
    valid,
    seed_b64url: encodeBase64url(relay.seed),
    relay_key: relay.public,
    relay_nonce: relayNonce,
    client_nonce: clientNonce,
    signed_bytes_hex: welcomeBytes(relay.public, relayNonce, clientNonce).toString('hex'),
    sig: encodeBase64url(signBytes(relay.key, signed)),
  });
  const session = `${alice.public}#régie`;
  const v1Bytes = Buffer.concat([Buffer.from('interlink-relay-auth-v1\0', 'utf8'), Buffer.from(relayNonce, 'base64url'), ...lengthPrefixed(route)]);
  return [
    auth('valid: auth for route main', true, relay.public, route, authBytes(relay.public, relayNonce, route)),
    auth('valid: auth for a non-ASCII session', true, relay.public, session, authBytes(relay.public, relayNonce, session)),
    welcome("valid: welcome signing the client's nonce", true, welcomeBytes(relay.public, relayNonce, clientNonce)),
    auth('invalid: a proof made for another relay (a forwarder) presented to this one', false, relay.public, route, authBytes(forwarder.public, relayNonce, route)),
    auth('invalid: the version 1 proof, which names no relay', false, relay.public, route, v1Bytes),
    welcome("invalid: a welcome for another client's nonce (played back)", false, welcomeBytes(relay.public, relayNonce, counting(64))),
  ];
}

function main(): void {
  const path = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', 'test', 'vectors', 'relay-auth.json');
  const vectors = buildRelayAuthVectors();
  writeFileSync(path, JSON.stringify(vectors, null, 2) + '\n');
  process.stdout.write(`wrote ${vectors.length} vectors to ${path}\n`);
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main();
