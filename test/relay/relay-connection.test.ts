/**
 * One relay connection against a fake socket: the frame budget (token bucket), the
 * backpressure on every send, and the heartbeat (DESIGN.md "The relay", "Bounded by
 * construction"). relay.test.ts covers the same over real sockets.
 */
import { describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { EventEmitter } from 'node:events';
import { ConnectionSet, HIGH_WATER_BYTES, MAX_BUFFERED_BYTES, TokenBucket } from '../../src/relay/connection.js';
import { relayFrame } from '../../src/wire/frames.js';
import { FakeSocket, fakeConnection as connection } from '../helpers/fake-relay-socket.js';

function takes(bucket: TokenBucket, now: number, count: number): number {
  let taken = 0;
  for (let i = 0; i < count; i++) if (bucket.take(now)) taken++;
  return taken;
}

describe('token bucket', () => {
  it('allows a burst, then the rate, and never more than a burst after idling', () => {
    const bucket = new TokenBucket(10, 20, 1_000);
    expect(takes(bucket, 1_000, 25)).toBe(20);
    expect(takes(bucket, 1_100, 5)).toBe(1);
    expect(takes(bucket, 1_600, 10)).toBe(5);
    expect(takes(bucket, 1_000_000, 50)).toBe(20);
  });

  it('adds nothing when the clock steps back', () => {
    const bucket = new TokenBucket(10, 1, 5_000);
    expect(bucket.take(5_000)).toBe(true);
    expect(bucket.take(1_000)).toBe(false);
    expect(bucket.take(1_050)).toBe(false);
    expect(bucket.take(1_100)).toBe(true);
  });
});

describe('connection', () => {
  it('pauses deliveries past the high-water mark and resumes once a send callback finds the buffer drained', () => {
    const socket = new FakeSocket();
    const { conn, seen } = connection(socket);
    conn.sendText('x'.repeat(HIGH_WATER_BYTES));
    expect(conn.blocked).toBe(false);
    conn.sendText('y');
    expect(conn.blocked).toBe(true);
    expect(seen.peak).toBe(HIGH_WATER_BYTES + 1);

    socket.drain(HIGH_WATER_BYTES + 1);
    expect([conn.blocked, seen.drained]).toEqual([true, 0]);
    conn.sendText('z');
    socket.drain(HIGH_WATER_BYTES);
    expect([conn.blocked, seen.drained]).toEqual([false, 1]);
    socket.drain(0);
    expect(seen.drained).toBe(1);
  });

  it('cuts off a peer past the buffer bound and sends nothing on a closed socket', () => {
    const socket = new FakeSocket();
    const { conn } = connection(socket);
    conn.sendText('x'.repeat(MAX_BUFFERED_BYTES));
    expect(socket.terminated).toBe(false);
    conn.sendText('y');
    expect(socket.terminated).toBe(true);
    expect(conn.open).toBe(false);
    conn.sendText('z');
    expect(socket.sent).toHaveLength(2);
  });

  it('sends refusals as valid frames, with a ref only when there is one', () => {
    const socket = new FakeSocket();
    const { conn } = connection(socket);
    conn.refuse('r1', 'queue_full', 'full');
    conn.refuse(undefined, 'bad_frame', 'not JSON');
    const frames = socket.sent.map((text) => relayFrame.parse(JSON.parse(text)));
    expect(frames).toEqual([
      { v: 1, type: 'refused', ref: 'r1', code: 'queue_full', message: 'full' },
      { v: 1, type: 'refused', code: 'bad_frame', message: 'not JSON' },
    ]);
  });

  it('pings on each heartbeat and terminates a peer that missed the last pong', () => {
    const socket = new FakeSocket();
    const { conn } = connection(socket);
    conn.beat();
    conn.alive = true;
    conn.beat();
    expect([socket.pings, socket.terminated]).toEqual([2, false]);
    conn.beat();
    expect([socket.pings, socket.terminated]).toEqual([2, true]);
  });
});

describe('a frame handler that throws', () => {
  /** Enough of a ws socket for ConnectionSet.add: events, close and the send surface. */
  class EventSocket extends EventEmitter {
    readyState: number = WebSocket.OPEN;
    bufferedAmount = 0;
    closed: { code: number; reason: string } | undefined;
    send(): void {}
    ping(): void {}
    terminate(): void {}
    close(code: number, reason: string): void {
      this.closed = { code, reason };
    }
  }

  it('closes only the connection the frame came from (1011), and the next frame on another is handled', () => {
    const handled: number[] = [];
    const set = new ConnectionSet({ frameRate: 10, frameBurst: 20 }, () => 0, {
      frame: (conn) => {
        if (conn.id === 1) throw new RangeError('Maximum call stack size exceeded');
        handled.push(conn.id);
      },
      drained: () => undefined,
      closed: () => undefined,
    });
    const [bad, good] = [new EventSocket(), new EventSocket()];
    set.add(bad as unknown as WebSocket);
    set.add(good as unknown as WebSocket);
    expect(() => bad.emit('message', Buffer.from('{}'), false)).not.toThrow();
    good.emit('message', Buffer.from('{}'), false);
    expect(bad.closed).toEqual({ code: 1011, reason: 'internal error' });
    expect(good.closed).toBeUndefined();
    expect(handled).toEqual([2]);
  });
});
