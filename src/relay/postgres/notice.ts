/**
 * The notices relays of one PostgreSQL database send each other: of commits, on the own
 * channel of each relay process that reads the route; of roster changes, on the channel
 * they all hear (DESIGN.md "The relay": "Where the queues live"). A notice is news, never
 * the record: a relay that misses one, or cannot trust one, finds the same messages by
 * reading the store.
 *
 * Text, one NOTIFY payload (at most `NOTICE_BYTES`):
 *
 *     <instance of the relay that sent it>
 *     t <tag>                        HMAC-SHA256, hex, of everything after this line
 *     q <route>                      messages were committed to this route
 *     m <follows|-> <id> <length>    …one of them, after its route's `q` line, in id order:
 *     <payload>                      the route's newest id queued before it (`-`: none), its
 *                                    id, and its payload, `length` UTF-16 code units long
 *     r <route>                      the roster entry of this route changed
 *
 * A route's `m` entries are all the messages of that route the notice tells of, or there
 * are none and its `q` line says to read the store. Any role that can connect to the
 * database can NOTIFY on any channel, so the entries count only under a tag made with the
 * key the relays share in `relay_meta`; without it the notice is a wake-up like the `q`
 * lines. Relays of the previous release read the `q` and `r` lines only.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

/** NOTIFY payloads stop at 8,000 bytes; notices are cut below that. */
export const NOTICE_BYTES = 7_000;

/** A message a relay committed, as a notice carries it. */
export interface NoticedMessage {
  route: string;
  /** The route's newest id queued before this one; null: none was. */
  follows: number | null;
  id: number;
  payload: string;
}

export interface Notice {
  from: string;
  /** Routes to read: messages were committed that the notice does not carry. */
  queues: string[];
  /** Messages the notice carries, route by route, each route's in id order. */
  messages: NoticedMessage[];
  roster: string[];
}

/** What one relay has to tell: per route, the messages it committed; roster entries that changed. */
export interface NoticeNews {
  queues: ReadonlyMap<string, readonly NoticedMessage[]>;
  roster: ReadonlySet<string>;
}

function tagOf(key: Buffer, body: string): string {
  return createHmac('sha256', key).update(body).digest('hex');
}

const bytesOf = (text: string): number => Buffer.byteLength(text, 'utf8');

/** The tag line, `\nt ` and 64 hex digits, in every notice beside its sender. */
const TAG_LINE_BYTES = 67;

/**
 * The notices that tell `news` (pure): as few as fit, each under `NOTICE_BYTES`. A route
 * whose messages do not fit in one notice is told as a `q` line alone.
 */
export function formatNotices(from: string, key: Buffer, news: NoticeNews): string[] {
  const chunks: string[] = [];
  for (const [route, messages] of news.queues) {
    const line = `\nq ${route}`;
    const carried = [...messages].sort((a, b) => a.id - b.id).map((m) => `\nm ${m.follows ?? '-'} ${m.id} ${m.payload.length}\n${m.payload}`).join('');
    chunks.push(carried !== '' && bytesOf(from) + TAG_LINE_BYTES + bytesOf(line) + bytesOf(carried) <= NOTICE_BYTES ? line + carried : line);
  }
  for (const route of news.roster) chunks.push(`\nr ${route}`);
  const notices: string[] = [];
  let body = '';
  const flush = () => {
    if (body !== '') notices.push(`${from}\nt ${tagOf(key, body)}${body}`);
    body = '';
  };
  for (const chunk of chunks) {
    if (bytesOf(from) + TAG_LINE_BYTES + bytesOf(body) + bytesOf(chunk) > NOTICE_BYTES) flush();
    body += chunk;
  }
  flush();
  return notices;
}

const TAG_LINE = /^t ([0-9a-f]{64})$/;
const MESSAGE_LINE = /^m (-|0|[1-9][0-9]{0,15}) ([1-9][0-9]{0,15}) (0|[1-9][0-9]{0,6})$/;

/** Whether `tag` is the HMAC of `body` under `key`, compared in constant time. */
function tagged(key: Buffer, tag: string, body: string): boolean {
  return timingSafeEqual(Buffer.from(tagOf(key, body), 'hex'), Buffer.from(tag, 'hex'));
}

/**
 * Reads a notice (pure). Undefined when it names no sender. Carried messages count only
 * under a good tag; a message entry that does not parse, or runs past the end, makes its
 * route one to read, and the rest of the notice is read for its `q` and `r` lines only.
 */
export function parseNotice(text: string, key: Buffer): Notice | undefined {
  const lines = text.split('\n', 2);
  const from = lines[0]!;
  if (from === '') return undefined;
  const tag = lines[1] === undefined ? null : TAG_LINE.exec(lines[1]);
  let at = from.length + 1;
  let trusted = false;
  if (tag !== null) {
    at += lines[1]!.length;
    trusted = tagged(key, tag[1]!, text.slice(at));
    at += 1;
  }
  const routes: string[] = [];
  const carried = new Map<string, NoticedMessage[]>();
  const roster: string[] = [];
  let route: string | undefined;
  while (at < text.length) {
    const next = text.indexOf('\n', at);
    const end = next < 0 ? text.length : next;
    const line = text.slice(at, end);
    at = end + 1;
    if (line.startsWith('q ')) {
      route = line.slice(2);
      routes.push(route);
    } else if (line.startsWith('r ')) roster.push(line.slice(2));
    else if (line.startsWith('m ') && trusted) {
      const fields = MESSAGE_LINE.exec(line);
      const length = fields === null ? 0 : Number(fields[3]);
      const payload = text.slice(at, at + length);
      const after = at + length;
      if (route === undefined || fields === null || payload.length !== length || (after < text.length && text[after] !== '\n')) {
        trusted = false;
        if (route !== undefined) carried.delete(route);
        continue;
      }
      carried.set(route, [...(carried.get(route) ?? []), { route, follows: fields[1] === '-' ? null : Number(fields[1]), id: Number(fields[2]), payload }]);
      at = after + 1;
    }
  }
  return { from, queues: routes.filter((r) => !carried.has(r)), messages: routes.flatMap((r) => carried.get(r) ?? []), roster };
}
