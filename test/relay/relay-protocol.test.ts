/**
 * docs/PROTOCOL.md "Relay frames" says what the code does: the worked authentication
 * example is recomputed from the layout the document gives.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { signingKeyFromSeed } from '../../src/identity/ed25519.js';
import { AUTH_DOMAIN, signAuth, signWelcome, verifyAuth, verifyWelcome } from '../../src/wire/auth.js';
import { DEFAULT_FRAME_BURST, DEFAULT_FRAME_RATE, DEFAULT_HEARTBEAT_MS } from '../../src/relay/connection.js';
import { DEFAULT_DELIVERY_WINDOW } from '../../src/relay/delivery.js';
import { MAX_FRAME_BYTES, MAX_PAYLOAD_BYTES } from '../../src/wire/frames.js';
import { DEFAULT_QUEUE_LIMITS } from '../../src/relay/limits.js';

const doc = readFileSync(new URL('../../docs/PROTOCOL.md', import.meta.url), 'utf8');
const section = doc.slice(doc.indexOf('## Relay frames'));

function documentedBytes(): Buffer {
  const block = /<!-- relay-auth-example:start -->\n```text\n([\s\S]*?)```/.exec(section)?.[1] ?? '';
  const hex = block.split('\n').flatMap((line) => line.slice(0, 47).match(/[0-9a-f]{2}/g) ?? []);
  return Buffer.from(hex.join(''), 'hex');
}

describe('relay protocol document', () => {
  it('gives auth signed bytes, a signature and a welcome that the code reproduces', () => {
    const key = signingKeyFromSeed(createHash('sha256').update('interlink relay auth example').digest());
    const relay = signingKeyFromSeed(createHash('sha256').update('interlink relay key example').digest());
    const publicKey = encodeBase64url(key.publicKey);
    const relayKey = encodeBase64url(relay.publicKey);
    const nonceBytes = Buffer.from(Array.from({ length: 32 }, (_, i) => i));
    const nonce = encodeBase64url(nonceBytes);
    const clientNonce = encodeBase64url(Buffer.from(Array.from({ length: 32 }, (_, i) => 32 + i)));
    const route = `${publicKey}#main`;
    const length = Buffer.alloc(4);
    length.writeUInt32LE(Buffer.byteLength(route), 0);
    const expected = Buffer.concat([Buffer.from('interlink-relay-auth-v2\0', 'utf8'), relay.publicKey, nonceBytes, length, Buffer.from(route, 'utf8')]);

    expect(AUTH_DOMAIN).toBe('interlink-relay-auth-v2\0');
    expect(documentedBytes().toString('hex')).toBe(expected.toString('hex'));
    for (const text of [publicKey, relayKey, nonce, clientNonce]) expect(section).toContain(text);
    const sig = signAuth(key, relayKey, nonce, route);
    expect(section).toContain(sig);
    expect(verifyAuth(relayKey, nonce, route, sig)).toBe(true);
    expect(verifyAuth(relayKey, encodeBase64url(Buffer.alloc(32)), route, sig)).toBe(false);
    expect(verifyAuth(publicKey, nonce, route, sig)).toBe(false);
    const welcome = signWelcome(relay, nonce, clientNonce);
    expect(section).toContain(welcome);
    expect(verifyWelcome(relayKey, nonce, clientNonce, welcome)).toBe(true);
  });

  it('states the limits the relay enforces', () => {
    const figures = [
      MAX_PAYLOAD_BYTES.toLocaleString('en-US'),
      MAX_FRAME_BYTES.toLocaleString('en-US'),
      DEFAULT_QUEUE_LIMITS.routeMessages.toLocaleString('en-US'),
      DEFAULT_QUEUE_LIMITS.messages.toLocaleString('en-US'),
      DEFAULT_QUEUE_LIMITS.bytes.toLocaleString('en-US'),
      String(DEFAULT_DELIVERY_WINDOW),
      `${DEFAULT_FRAME_RATE.toLocaleString('en-US')} per second sustained, bursts of ${DEFAULT_FRAME_BURST.toLocaleString('en-US')}`,
      `every ${DEFAULT_HEARTBEAT_MS / 1000} seconds`,
    ];
    for (const figure of figures) expect(section, figure).toContain(figure);
  });
});
