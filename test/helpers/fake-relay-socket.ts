/** A fake ws socket for one relay Connection: records what is sent, pinged, paused; drains on demand. */
import WebSocket from 'ws';
import { Connection, TokenBucket, type RelaySocket } from '../../src/relay/connection.js';

export class FakeSocket implements RelaySocket {
  readyState: number = WebSocket.OPEN;
  bufferedAmount = 0;
  readonly sent: string[] = [];
  /** The payload of every ping, in order. */
  readonly pingPayloads: Buffer[] = [];
  paused = false;
  terminated = false;
  private readonly callbacks: (() => void)[] = [];

  get pings(): number {
    return this.pingPayloads.length;
  }

  /** Fragments are joined into the message they make up. */
  private fragments = '';

  send(data: string | Buffer, options: { fin: boolean }, cb?: () => void): void {
    this.fragments += data.toString();
    this.bufferedAmount += Buffer.byteLength(data);
    if (cb !== undefined) this.callbacks.push(cb);
    if (!options.fin) return;
    this.sent.push(this.fragments);
    this.fragments = '';
  }

  ping(data: Buffer): void {
    this.pingPayloads.push(data);
  }

  pause(): void {
    this.paused = true;
  }

  resume(): void {
    this.paused = false;
  }

  terminate(): void {
    this.terminated = true;
    this.readyState = WebSocket.CLOSED;
  }

  close(): void {}

  once(): this {
    return this;
  }

  /** The network took all but `left` bytes; ws then runs the send callbacks. */
  drain(left: number): void {
    this.bufferedAmount = left;
    for (const cb of this.callbacks.splice(0)) cb();
  }
}

/** A Connection on `socket` (10 frames/s, burst 20) that counts drain events and the peak buffer. */
export function fakeConnection(socket: FakeSocket, id = 1) {
  const seen = { drained: 0, peak: 0 };
  const conn = new Connection(id, socket, new TokenBucket(10, 20, 0), {
    drained: () => seen.drained++,
    buffered: (bytes) => (seen.peak = Math.max(seen.peak, bytes)),
  });
  return { conn, seen };
}
