/**
 * The relay's frame text: reading a raw frame before it is validated (enough to name its
 * `ref` in a refusal and to spare a reader's acks the frame budget), and writing the two
 * frames that carry stored text without parsing it again (docs/PROTOCOL.md "Relay
 * frames": "Refusal codes", "Delivery and acknowledgement", "Presence: announce, goodbye,
 * roster"). The schemas themselves are in `wire/frames.ts`.
 */
import type WebSocket from 'ws';
import { MAX_FRAME_BYTES, PROTOCOL_VERSION } from '../wire/frames.js';
import type { RosterEntry } from './roster.js';

export const NOT_JSON = Symbol('not JSON');

export function frameText(data: WebSocket.RawData): string {
  if (Array.isArray(data)) return Buffer.concat(data).toString('utf8');
  if (data instanceof ArrayBuffer) return Buffer.from(data).toString('utf8');
  return data.toString('utf8');
}

export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return NOT_JSON;
  }
}

/** The `ref` of a frame that failed validation, if it has a usable one, so the refusal can name it. */
export function refOf(data: unknown): string | undefined {
  if (typeof data !== 'object' || data === null || !('ref' in data)) return undefined;
  const ref = data.ref;
  return typeof ref === 'string' && ref.length >= 1 && ref.length <= 64 ? ref : undefined;
}

/** Anything shaped like a `hello`, valid or not. */
export function isHello(data: unknown): boolean {
  return typeof data === 'object' && data !== null && 'type' in data && data.type === 'hello';
}

/** The route of anything shaped like an `ack` or a `defer` (a reader's frames), valid or not. */
export function ackRouteOf(data: unknown): string | undefined {
  if (typeof data !== 'object' || data === null || !('type' in data) || !('route' in data)) return undefined;
  return (data.type === 'ack' || data.type === 'defer') && typeof data.route === 'string' ? data.route : undefined;
}

/** The deliver frame, with the stored payload text spliced in unparsed. */
export function deliverText(route: string, id: number, payload: string): string {
  return `{"v":${PROTOCOL_VERSION},"type":"deliver","route":${JSON.stringify(route)},"id":${id},"payload":${payload}}`;
}

/**
 * Payloads from this size on are delivered in three fragments around the stored bytes,
 * which every reader's send buffer then shares (a relay holds up to 512 MiB of them);
 * smaller ones are copied into one frame, one write instead of three.
 */
const SHARED_FROM_BYTES = 64 * 1024;
const CLOSE = Buffer.from('}');

/** The deliver frame around the stored payload's UTF-8 bytes, never decoded: one part, or three that share the bytes. */
export function deliverParts(route: string, id: number, utf8: Buffer): (string | Buffer)[] {
  const head = `{"v":${PROTOCOL_VERSION},"type":"deliver","route":${JSON.stringify(route)},"id":${id},"payload":`;
  if (utf8.length < SHARED_FROM_BYTES) return [Buffer.concat([Buffer.from(head, 'utf8'), utf8, CLOSE])];
  return [head, utf8, '}'];
}

/** A roster frame's `entries`: the first of `entries` (most recently heard first) that fit in one frame. */
export function rosterEntriesText(entries: Iterable<RosterEntry>): string {
  const budget = MAX_FRAME_BYTES - 1024;
  const parts: string[] = [];
  let size = 0;
  for (const entry of entries) {
    // The announcement's JSON as it was stored, when kept: a reply of 256 entries copies strings instead of serializing objects.
    const text = entry.text === undefined ? JSON.stringify({ announcement: entry.announcement, age_ms: entry.age_ms }) : `{"announcement":${entry.text},"age_ms":${entry.age_ms}}`;
    size += Buffer.byteLength(text, 'utf8') + 1;
    if (size > budget) break;
    parts.push(text);
  }
  return `[${parts.join(',')}]`;
}

/** The roster frame answering `ref`, in three parts around `entries` from `rosterEntriesText`. */
export function rosterMessage<T extends string | Buffer>(ref: string, entries: T): [string, T, string] {
  return [`{"v":${PROTOCOL_VERSION},"type":"roster","ref":${JSON.stringify(ref)},"entries":`, entries, '}'];
}
