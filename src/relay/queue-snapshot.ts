/**
 * The relay's snapshot (`<db>/queues.json`) written and read line by line (store/journal.ts
 * `SnapshotLines`): a relay holds up to 512 MiB of payload, which as one JSON string would
 * be past V8's longest string (2^29 - 24 characters; twice the bytes once one character
 * is beyond Latin-1), and reading it whole held the text, the parsed objects and the
 * queues at once. The data is the same JSON (`queueDataSchema`), laid out one message per
 * line, so a relay that reads the file whole still reads it:
 *
 *   {"next_id":N,"routes":[
 *   {"route":"<key>#<session>","messages":[
 *   {"id":1,"at":…,"payload":"…","src":"…"}
 *   ,{"id":2,…}
 *   ]}
 *   ,{"route":…,"messages":[
 *   …
 *   ]}
 *   ]}
 *
 * JSON.stringify never writes a newline inside a string, so every line is one of these.
 * The reader checks what `queueDataSchema` checks (ids increase within a route and stay
 * below `next_id`, routes are unique, none is empty) as it goes, and loads each message
 * as soon as it is read.
 */
import { z } from 'zod';
import { routeText } from '../envelope/route.js';
import { parseJsonWith } from '../json.js';
import type { SnapshotLines, SnapshotReader } from '../store/journal.js';
import { queueDataSchema, queuedSchema } from './queue-ops.js';
import type { RelayQueueState } from './queues.js';

const routeHeadSchema = z.object({ route: routeText, messages: z.array(z.never()).max(0) });

function* lines(state: RelayQueueState): Generator<string> {
  yield `{"next_id":${state.nextId},"routes":[`;
  let firstRoute = true;
  for (const [route, messages] of state.entries()) {
    yield `${firstRoute ? '' : ','}{"route":${JSON.stringify(route)},"messages":[`;
    firstRoute = false;
    let first = true;
    for (const m of messages) {
      const src = m.src === undefined ? '' : `,"src":${JSON.stringify(m.src)}`;
      yield `${first ? '' : ','}{"id":${m.id},"at":${m.at},"payload":${JSON.stringify(m.payload)}${src}}`;
      first = false;
    }
    yield ']}';
  }
  yield ']}';
}

type Place = 'start' | 'routes' | 'route' | 'messages' | 'done';

/** Reads the lines `lines` writes into a state made by `start(next_id)`. */
class QueueSnapshotReader implements SnapshotReader<RelayQueueState> {
  private place: Place = 'start';
  private state: RelayQueueState | undefined;
  private nextId = 0;
  private route = '';
  private lastId = -1;
  private readonly routes = new Set<string>();

  constructor(private readonly start: (nextId: number) => RelayQueueState) {}

  line(text: string): string | undefined {
    switch (this.place) {
      case 'start': {
        const head = parseJsonWith(queueDataSchema, `${text}]}`);
        if (!head.ok) return `does not start with next_id and routes (${head.reason})`;
        if (head.value.routes.length > 0) return 'has routes on its first line';
        this.nextId = head.value.next_id;
        this.state = this.start(this.nextId);
        this.place = 'routes';
        return undefined;
      }
      case 'routes':
      case 'messages': {
        if (text === ']}') {
          if (this.place === 'routes') this.place = 'done';
          else this.place = 'routes';
          return undefined;
        }
        return this.place === 'routes' ? this.routeHead(text) : this.message(text);
      }
      case 'route':
        return text === ']}' ? 'has a route with no message' : this.message(text);
      case 'done':
        return 'has lines after its end';
    }
  }

  private routeHead(text: string): string | undefined {
    const body = this.routes.size === 0 ? text : text.startsWith(',') ? text.slice(1) : undefined;
    if (body === undefined) return 'lacks a comma between routes';
    const head = parseJsonWith(routeHeadSchema, `${body}]}`);
    if (!head.ok) return `has a route that is not one (${head.reason})`;
    if (this.routes.has(head.value.route)) return 'names a route twice';
    this.routes.add(head.value.route);
    this.route = head.value.route;
    this.lastId = -1;
    this.place = 'route';
    return undefined;
  }

  /** `place` is 'route' before a route's first message (no comma, and no end yet), 'messages' after it. */
  private message(text: string): string | undefined {
    const first = this.place === 'route';
    const body = first ? text : text.startsWith(',') ? text.slice(1) : undefined;
    if (body === undefined) return 'lacks a comma between messages';
    const message = parseJsonWith(queuedSchema, body);
    if (!message.ok) return `has a message that is not one (${message.reason})`;
    const { id } = message.value;
    if (id <= this.lastId || id >= this.nextId) return 'has message ids that do not increase within a route or reach next_id';
    this.lastId = id;
    this.state!.restore(this.route, message.value);
    this.place = 'messages';
    return undefined;
  }

  end(): { state: RelayQueueState } | { damage: string } {
    if (this.place !== 'done') return { damage: 'ends before its data does' };
    return { state: this.state! };
  }
}

/** The relay's `SnapshotLines`: `start` makes the state the messages load into, from the snapshot's `next_id`. */
export function queueSnapshotLines(start: (nextId: number) => RelayQueueState): SnapshotLines<RelayQueueState> {
  return { write: lines, reader: () => new QueueSnapshotReader(start) };
}
