/**
 * One simulated session: what a `serve` process does on the wire, without its stores,
 * host or MCP. It keeps one connection through the session's own relay client
 * (link/client.ts: the handshake with the welcome verified against the pinned relay key,
 * `auth` proving its route), announces itself as sessions do (a signed version 3
 * announcement whose details are sealed to itself and its pair), sends sealed, signed
 * envelopes to its pair, judges every delivery with the real trust gate, answers messages
 * with signed receipts on the sessions' schedule, and acknowledges what it read.
 *
 * Nothing is written to disk: a session's mailbox commit is not what this run measures,
 * the relay is.
 */
import { performance } from 'node:perf_hooks';
import { ANNOUNCE_INTERVAL_MS } from '../../src/agent/presence.js';
import { RECEIPT_DELAY_MS, RECEIPT_ENTRIES_SENT, RECEIPT_INTERVAL_MS, RECEIPT_JITTER } from '../../src/agent/receipts.js';
import { parseEnvelope, replyToSession, wireOf, type WireEnvelope } from '../../src/envelope/envelope.js';
import { openEnvelope } from '../../src/envelope/open.js';
import { formatRoute } from '../../src/envelope/route.js';
import { offerable, signEnvelope } from '../../src/envelope/sign.js';
import { messageOf } from '../../src/errors.js';
import { decide } from '../../src/gate/decide.js';
import type { SigningKey } from '../../src/identity/ed25519.js';
import { RelayClient, type Delivery } from '../../src/link/client.js';
import type { SendOutcome } from '../../src/link/sends.js';
import { signAnnouncementV2, signAnnouncementV3 } from '../../src/presence/announcement.js';
import { nameBucket, sealDetails } from '../../src/presence/private.js';
import { parseReceiptText, RECEIPT_KIND, receiptDue, receiptText, type ReceiptEntry } from '../../src/receipts/receipts.js';
import { findPeers, type Findings } from './findable.js';
import type { Traffic } from './traffic.js';

/**
 * Why connection attempts failed, with counts, across the sessions of this process (the
 * relay client says it once per outage: a session that retries for a while counts once).
 */
export const troubles = new Map<string, number>();

/** The text of every message: about what an agent's short note weighs (the relay benchmarks use 1 KiB too). */
const MESSAGE_TEXT = `capacity run: ${'x'.repeat(1000)}`;

export interface Peer {
  key: string;
  session: string;
}

export interface SessionSpec {
  key: SigningKey;
  session: string;
  /** The relay URL, its key pinned (`#key=`): the welcome must prove that key. */
  relayUrl: string;
  peer: Peer;
}

/** Receipt entries waiting for the pair, and when they go (receipts/receipts.ts `receiptDue`, as agent/receipts.ts). */
interface ReceiptBatch {
  session: string;
  entries: ReceiptEntry[];
  due: number;
}

export class SimSession {
  readonly client: RelayClient;
  readonly route: string;
  readonly keyText: string;
  /** When the next announcement is due (ANNOUNCE_INTERVAL_MS after the last). */
  nextAnnounce = Number.POSITIVE_INFINITY;
  disconnects = 0;
  /** The relay proved its key on the connection open now. */
  private trusted = false;
  private readonly peerRoute: string;
  private readonly peers: ReadonlyMap<string, string>;
  /** msg_ids admitted: the gate's replay check (every sender here is the pair). */
  private readonly seen = new Set<string>();
  private batch: ReceiptBatch | undefined;
  private lastReceipt: { at: number; gap: number } | undefined;
  private sentCount = 0;

  constructor(
    private readonly spec: SessionSpec,
    private readonly traffic: Traffic,
  ) {
    this.keyText = spec.key.publicKey.toString('base64url');
    this.route = formatRoute({ key: this.keyText, session: spec.session });
    this.peerRoute = formatRoute(spec.peer);
    this.peers = new Map([[spec.peer.key, 'pair']]);
    this.client = new RelayClient({ url: spec.relayUrl, key: spec.key, routes: [this.route], logOutages: false });
    // As agent/presence.ts: announced after every (re)connection.
    this.client.on('connected', () => {
      this.trusted = true;
      this.announce();
    });
    // A connection that was up and dropped; attempts that never got that far are troubles.
    this.client.on('disconnected', () => {
      if (this.trusted) this.disconnects++;
      this.trusted = false;
    });
    this.client.on('unreachable', (why: string) => troubles.set(why, (troubles.get(why) ?? 0) + 1));
    this.client.on('delivery', (delivery: Delivery) => this.onDelivery(delivery));
  }

  /** Connects; true once the route is authenticated, false at the deadline. */
  async start(timeoutMs: number): Promise<boolean> {
    this.client.start();
    return this.client.ready(timeoutMs);
  }

  close(): void {
    this.client.close();
  }

  /** A signed announcement as sessions make it (version 3 to a revision 4 relay), details sealed to this identity and its pair (the readers a session with one peer has). */
  announce(): void {
    const ts = Date.now();
    const details = { name: this.spec.session, cwd: '/capacity', git_root: '', summary: '' };
    const sealed = sealDetails(this.spec.key, this.spec.session, ts, details, [this.keyText, this.spec.peer.key]);
    const fields = { session: this.spec.session, ts, ...sealed };
    this.client.announce(this.client.queriesRoster ? signAnnouncementV3(this.spec.key, { ...fields, name_bucket: nameBucket(details.name) }) : signAnnouncementV2(this.spec.key, fields));
    // The first renewal at a random point of the interval: sessions that started over hours
    // renew spread over it, not in the burst a ramp of seconds would make 30 s later.
    const first = this.nextAnnounce === Number.POSITIVE_INFINITY;
    this.nextAnnounce = performance.now() + (first ? Math.random() : 1) * ANNOUNCE_INTERVAL_MS;
  }

  /** Whether the pair is on the relay's roster; undefined when the relay did not answer. */
  findPair(measure: boolean): Promise<Findings | undefined> {
    return findPeers(this.client, [this.spec.peer.key], measure);
  }

  /** One sealed, signed message to the pair, offered as the outbound loop offers one (envelope/sign.ts `offerable`). */
  sendMessage(): void {
    const envelope = signEnvelope(this.spec.key, { to: this.spec.peer.key, to_session: this.spec.peer.session, text: `${++this.sentCount} ${MESSAGE_TEXT}`, reply_to: this.route });
    const wire = offerable(this.spec.key, envelope);
    const msgId = envelope.msg_id;
    this.traffic.sending(msgId, performance.now());
    const answer = (outcome: SendOutcome) => this.traffic.answered(msgId, outcome, performance.now());
    void this.client.send(this.peerRoute, wire, { late: answer }).then((outcome) => {
      this.traffic.offerSettled();
      answer(outcome);
    });
  }

  /** Sends the waiting receipt entries when they are due; `force` sends them now (the drain). */
  flushReceipts(now: number, force = false): void {
    const batch = this.batch;
    if (batch === undefined || (!force && batch.due > now)) return;
    this.batch = undefined;
    for (let i = 0; i < batch.entries.length; i += RECEIPT_ENTRIES_SENT) {
      const entries = batch.entries.slice(i, i + RECEIPT_ENTRIES_SENT);
      const wire = wireOf(signEnvelope(this.spec.key, { to: this.spec.peer.key, to_session: batch.session, kind: RECEIPT_KIND, text: receiptText(entries) }));
      this.traffic.receiptOffered();
      void this.client.send(formatRoute({ key: this.spec.peer.key, session: batch.session }), wire).then((outcome) => this.traffic.receiptAnswered(outcome));
    }
    this.lastReceipt = { at: now, gap: RECEIPT_INTERVAL_MS * (1 + Math.random() * RECEIPT_JITTER) };
  }

  /** Every delivery goes through the trust gate, as agent/inbound.ts does, and is then acknowledged. */
  private onDelivery(delivery: Delivery): void {
    const at = performance.now();
    try {
      this.judge(delivery.payload, at);
    } catch (err) {
      this.traffic.rejectedDelivery(`unreadable: ${messageOf(err)}`);
    }
    this.client.ack(delivery.route, [delivery.id]);
  }

  private judge(payload: Record<string, unknown>, at: number): void {
    let wire: WireEnvelope;
    try {
      wire = parseEnvelope(payload);
    } catch {
      return this.traffic.rejectedDelivery('bad_envelope');
    }
    const verdict = decide(wire, {
      me: this.keyText,
      session: this.spec.session,
      peers: this.peers,
      outstandingRequests: [],
      now: Date.now(),
      seen: (_sender, msgId) => this.seen.has(msgId),
      open: (sealed) => openEnvelope(this.spec.key, sealed),
    });
    if (!verdict.ok) return verdict.code === 'replay' ? this.traffic.duplicate() : this.traffic.rejectedDelivery(verdict.code);
    this.seen.add(verdict.envelope.msg_id);
    if (verdict.kind === 'receipt') {
      this.traffic.receiptDelivered(parseReceiptText(verdict.envelope.text).map((e) => e.msg_id));
      return;
    }
    if (verdict.kind !== 'message') return this.traffic.rejectedDelivery(`unexpected_${verdict.kind}`);
    this.traffic.deliveredMessage(verdict.envelope.msg_id, at);
    const session = replyToSession(verdict.envelope);
    if (session !== undefined) this.noteReceipt(session, { msg_id: verdict.envelope.msg_id, state: 'receiver_stored', at: Date.now() });
  }

  private noteReceipt(session: string, entry: ReceiptEntry): void {
    if (this.batch === undefined || this.batch.session !== session) {
      if (this.batch !== undefined) this.flushReceipts(performance.now(), true);
      this.batch = { session, entries: [], due: receiptDue(performance.now(), this.lastReceipt?.at, RECEIPT_DELAY_MS, this.lastReceipt?.gap ?? RECEIPT_INTERVAL_MS) };
    }
    this.batch.entries.push(entry);
  }

  /** Receipt entries noted and not yet offered. */
  get receiptsWaiting(): boolean {
    return this.batch !== undefined;
  }
}
