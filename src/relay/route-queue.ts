/**
 * One route's queue in the relay's memory (`RelayQueueState`, queues.ts): its messages in
 * id order, each payload kept as its exact UTF-8 bytes. No I/O.
 *
 * Why bytes and not the JSON text as a JS string: a relay holds up to 512 MiB of payload
 * (DESIGN.md "Bounded by construction": "What the 512 MiB payload cap means in memory").
 * A string lives on V8's heap, two bytes per character once it holds one character
 * beyond Latin-1, and a heap of that size is collected late and given back to the system
 * later still; a Buffer of its own is outside that heap, one byte per UTF-8 byte, and
 * freed when its message goes. Delivery sends the bytes as they are (delivery.ts).
 */

/** A queued message as the relay's readers see it. */
export interface QueuedMessage {
  readonly id: number;
  /** relay clock when it was accepted */
  readonly at: number;
  /** the JSON text of the payload object, exactly as it arrived */
  readonly payload: string;
  /** UTF-8 bytes of `payload`: the unit of the byte bound */
  readonly bytes: number;
  /** the payload's UTF-8 bytes, when the store keeps them so: sent as they are, never decoded */
  readonly utf8?: Buffer;
  /** the sender's address (`src`), if known */
  readonly src?: string;
  /** the share holder it counts against (queue-store.ts `Origin`), in this run of the relay only */
  readonly connection?: string;
}

/**
 * The payload's UTF-8 bytes in a buffer of their own: `Buffer.from` puts a short text in
 * a shared 8 KiB slab, which one kept message would keep alive whole.
 */
export function ownBytes(text: string, bytes: number): Buffer {
  const buffer = Buffer.allocUnsafeSlow(bytes);
  buffer.write(text, 'utf8');
  return buffer;
}

/** A message in memory: the payload text is decoded only when someone asks for it (a snapshot, `relay migrate`). */
export class StoredMessage implements QueuedMessage {
  constructor(
    readonly id: number,
    readonly at: number,
    readonly utf8: Buffer,
    readonly src: string | undefined,
    readonly connection: string | undefined,
  ) {}

  get payload(): string {
    return this.utf8.toString('utf8');
  }

  get bytes(): number {
    return this.utf8.length;
  }
}

export class RouteQueue {
  /** Increasing ids, including some already removed, which are swept out lazily. */
  private order: number[] = [];
  private readonly byId = new Map<number, StoredMessage>();

  get size(): number {
    return this.byId.size;
  }

  has(id: number): boolean {
    return this.byId.has(id);
  }

  push(message: StoredMessage): void {
    this.order.push(message.id);
    this.byId.set(message.id, message);
  }

  remove(id: number): StoredMessage | undefined {
    const message = this.byId.get(id);
    if (message === undefined) return undefined;
    this.byId.delete(id);
    // Sweeping once removed ids outnumber live ones keeps `order` within twice the queue.
    if (this.order.length > 64 && this.order.length > 2 * this.byId.size) this.order = this.order.filter((i) => this.byId.has(i));
    return message;
  }

  /** The first message with `after` < id < `below`. */
  nextAfter(after: number, below: number): StoredMessage | undefined {
    let lo = 0;
    let hi = this.order.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.order[mid]! > after) hi = mid;
      else lo = mid + 1;
    }
    for (let i = lo; i < this.order.length; i++) {
      const id = this.order[i]!;
      if (id >= below) return undefined;
      const message = this.byId.get(id);
      if (message !== undefined) return message;
    }
    return undefined;
  }

  *messages(): IterableIterator<StoredMessage> {
    for (const id of this.order) {
      const message = this.byId.get(id);
      if (message !== undefined) yield message;
    }
  }
}
