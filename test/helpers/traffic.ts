/**
 * Traffic between `serve` processes for the fault tests (load-faults, postgres-failover):
 * each sender `a<i>` sends numbered texts to its receiver `b<i>`, one call at a time,
 * retried under its idempotency key until answered; each receiving agent reads as an agent
 * does — `receive_messages` pages, acknowledged as read — through every restart of its
 * server. What the checks need is counted as it happens:
 * - `answered`: every message `send_message` answered, per sender;
 * - per reader: the msg_ids each text was read under (two ids: stored twice), a msg_id
 *   shown again (the documented re-show after a receiver kill), a message read after a
 *   later one of its sender (`late`: relays may reorder, the mailbox orders what is
 *   unread), and any page that lists a sender's messages out of order.
 */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createIdentity } from '../../src/identity/identity.js';
import { addPeer } from '../../src/peers/peers.js';
import type { Peer } from './mcp.js';

/** How long a reader waits after an empty page; 32 readers polling every 50 ms took a core of the 2-core machine. */
export const IDLE_POLL_MS = 250;

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A temp root holding alice and bob (config under `<root>/<name>/config`), each the other's peer, as after pairing. */
export async function pairedRoot(prefix: string): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), prefix));
  const alice = await createIdentity(join(root, 'alice', 'config', 'id.key'));
  const bob = await createIdentity(join(root, 'bob', 'config', 'id.key'));
  await addPeer(join(root, 'alice', 'config', 'peers.json'), 'bob', bob.key);
  await addPeer(join(root, 'bob', 'config', 'peers.json'), 'alice', alice.key);
  return root;
}

export interface TrafficReader {
  session: string;
  peer: Peer | undefined;
  /** text → msg_ids it was read under */
  read: Map<string, Set<string>>;
  /** msg_id → when first read (test clock) */
  firstSeen: Map<string, number>;
  reshown: number;
  late: number;
  highest: number;
  pageOrderBroken: string[];
}

export interface TrafficReport {
  messages_answered: number;
  lost: number;
  stored_twice: number;
  page_order_broken: number;
  late_arrivals: number;
  reshown_after_receiver_kill: number;
  sends_refused_then_retried: number;
  latency_ms: { p50: number; p99: number; max: number };
  send_phase_s: number;
  drain_s: number;
  throughput_per_s: number;
}

export class Traffic {
  readonly answered: { msgId: string; text: string; at: number }[][];
  readonly readers: TrafficReader[];
  refusedCalls = 0;
  sending = true;
  private stopReading = false;
  private times = { started: 0, sent: 0, finished: 0 };

  constructor(
    readonly pairs: number,
    readonly messages: number,
    /** the petname senders address */
    private readonly to: string,
  ) {
    this.answered = Array.from({ length: pairs }, () => []);
    this.readers = Array.from({ length: pairs }, (_, i) => ({ session: `b${i}`, peer: undefined, read: new Map(), firstSeen: new Map(), reshown: 0, late: 0, highest: -1, pageOrderBroken: [] }));
  }

  get answeredCount(): number {
    return this.answered.reduce((sum, list) => sum + list.length, 0);
  }

  /** Resolves once this share of all messages was answered (or sending stopped). */
  async progress(share: number): Promise<void> {
    while (this.sending && this.answeredCount < share * this.pairs * this.messages) await sleep(20);
  }

  /**
   * Waits until every message answered so far has been read, within `deadlineMs`; resolves
   * with how long that took. A session cut off from every relay it can use fails it.
   */
  async untilRead(deadlineMs: number): Promise<number> {
    const start = Date.now();
    const due = this.answered.map((list, i) => list.map((m) => ({ i, msgId: m.msgId, text: m.text }))).flat();
    for (;;) {
      const unread = due.filter((m) => !this.readers[m.i]!.firstSeen.has(m.msgId));
      if (unread.length === 0) return Date.now() - start;
      if (Date.now() - start > deadlineMs) throw new Error(`${unread.length} of ${due.length} messages answered earlier were not read within ${deadlineMs} ms, e.g. ${unread.slice(0, 3).map((m) => m.text).join(', ')}`);
      await sleep(50);
    }
  }

  /** One sender: one message in flight, retried under its idempotency key until answered. */
  private async send(i: number, sender: Peer): Promise<void> {
    for (let n = 0; n < this.messages; n++) {
      const text = `load ${i} ${n}`;
      const at = Date.now();
      for (let attempt = 0; ; attempt++) {
        try {
          const { msg_id } = await sender.call<{ msg_id: string }>('send_message', { to: this.to, session: `b${i}`, text, idempotency_key: `k-${i}-${n}` });
          this.answered[i]!.push({ msgId: msg_id, text, at });
          break;
        } catch (err) {
          // Before the receiver's first announcement reaches this sender, a send to it has no route.
          this.refusedCalls++;
          if (attempt > 600) throw err;
          await sleep(100);
        }
      }
    }
  }

  /** One receiving agent: reads pages, checks each, acknowledges them; survives its server's restarts. */
  private async read(i: number): Promise<void> {
    const reader = this.readers[i]!;
    const expectedAll = () => !this.sending && this.answered[i]!.every((m) => reader.firstSeen.has(m.msgId));
    while (!this.stopReading && !expectedAll()) {
      const peer = reader.peer;
      if (peer === undefined) {
        await sleep(50);
        continue;
      }
      let page: { messages: { msg_id: string; text: string; to_session?: string; receipt: unknown }[] };
      try {
        page = await peer.call('receive_messages', { limit: 100 });
      } catch {
        await sleep(50);
        continue;
      }
      const now = Date.now();
      const previous = new Map<TrafficReader, number>();
      for (const m of page.messages) {
        // Mail a killed receiver's session left is read by the live session that took it
        // (DESIGN.md "When a session ends"): counted for the session it was written to.
        const owner = m.to_session === undefined ? reader : (this.readers.find((r) => r.session === m.to_session) ?? reader);
        const n = Number(m.text.split(' ')[2]);
        if (n <= (previous.get(owner) ?? -1)) owner.pageOrderBroken.push(`${previous.get(owner)} then ${n}`);
        previous.set(owner, n);
        const ids = owner.read.get(m.text) ?? new Set<string>();
        if (ids.has(m.msg_id)) owner.reshown++;
        else {
          if (n < owner.highest) owner.late++;
          owner.highest = Math.max(owner.highest, n);
          ids.add(m.msg_id);
          owner.read.set(m.text, ids);
          owner.firstSeen.set(m.msg_id, now);
        }
      }
      if (page.messages.length > 0) {
        await peer.call('acknowledge_messages', { messages: page.messages.map((m) => m.receipt) }).catch(() => undefined);
      } else await sleep(IDLE_POLL_MS);
    }
  }

  /**
   * Runs every reader, `faults`, and every sender to the end; then lets the readers drain
   * for at most `drainMs` once the faults are over.
   */
  async run(senders: readonly Peer[], faults: () => Promise<void>, drainMs: number): Promise<void> {
    this.times.started = Date.now();
    const reading = this.readers.map((_, i) => this.read(i));
    const faulting = faults();
    try {
      await Promise.all(senders.map((sender, i) => this.send(i, sender)));
    } finally {
      this.sending = false;
    }
    await faulting;
    this.times.sent = Date.now();
    const drained = Promise.all(reading);
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((r) => (timer = setTimeout(r, drainMs)));
    await Promise.race([drained, deadline]);
    clearTimeout(timer);
    this.stopReading = true;
    await drained;
    this.times.finished = Date.now();
  }

  /** The messages answered and never read, as their texts. */
  lost(): string[] {
    return this.answered.flatMap((list, i) => list.filter((m) => !this.readers[i]!.firstSeen.has(m.msgId)).map((m) => m.text));
  }

  /** Texts read under two msg_ids. */
  storedTwice(): string[] {
    return this.readers.flatMap((r) => [...r.read].filter(([, ids]) => ids.size > 1).map(([text, ids]) => `${text} as ${[...ids].join(', ')}`));
  }

  pageOrderBroken(): string[] {
    return this.readers.flatMap((r) => r.pageOrderBroken.map((b) => `${r.session}: ${b}`));
  }

  report(): TrafficReport {
    const latencies = this.answered
      .flatMap((list, i) => list.flatMap((m) => (this.readers[i]!.firstSeen.has(m.msgId) ? [this.readers[i]!.firstSeen.get(m.msgId)! - m.at] : [])))
      .sort((a, b) => a - b);
    const at = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? NaN;
    const total = this.answeredCount;
    const { started, sent, finished } = this.times;
    return {
      messages_answered: total,
      lost: this.lost().length,
      stored_twice: this.storedTwice().length,
      page_order_broken: this.pageOrderBroken().length,
      late_arrivals: this.readers.reduce((s, r) => s + r.late, 0),
      reshown_after_receiver_kill: this.readers.reduce((s, r) => s + r.reshown, 0),
      sends_refused_then_retried: this.refusedCalls,
      latency_ms: { p50: at(0.5), p99: at(0.99), max: latencies.at(-1) ?? NaN },
      send_phase_s: (sent - started) / 1000,
      drain_s: (finished - sent) / 1000,
      throughput_per_s: Math.round((total * 1000) / Math.max(1, finished - started)),
    };
  }
}
