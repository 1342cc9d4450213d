/**
 * The opening of a relay connection, for fake relays in tests: the challenge naming the
 * relay's key, and the welcome that signs the client's hello nonce (docs/PROTOCOL.md
 * "Challenge and authentication"), so the real client trusts the fake relay's key.
 */
import type { WebSocket } from 'ws';
import { newNonce, signWelcome } from '../../src/wire/auth.js';
import { helloFrame, parseFrame, PROTOCOL_VERSION } from '../../src/wire/frames.js';
import { freshRelayKey, type RelayKey } from '../../src/relay/relay-key.js';

/** Sends the challenge and answers the client's hello; returns the nonce of the challenge. */
export function greet(socket: WebSocket, relayKey: RelayKey = freshRelayKey()): string {
  const nonce = newNonce();
  socket.send(JSON.stringify({ v: PROTOCOL_VERSION, type: 'challenge', nonce, key: relayKey.key }));
  const onHello = (data: WebSocket.RawData, isBinary: boolean) => {
    const hello = isBinary ? undefined : parseFrame(helloFrame, data.toString());
    if (hello === undefined) return;
    socket.off('message', onHello);
    socket.send(JSON.stringify({ v: PROTOCOL_VERSION, type: 'welcome', sig: signWelcome(relayKey.signingKey, nonce, hello.nonce) }));
  };
  socket.on('message', onHello);
  return nonce;
}
