/**
 * Pairing by people (DESIGN.md, "Pairing"): one session's side of the flow.
 *
 *   request_pair  → an open request and its signed pair_request, durable before it returns
 *   (the stranger's gate admits the pair_request as a pairing notice only)
 *   accept_pair   → the requester joins peers.json, then a signed pair_accept is queued
 *   (the requester's gate admits the pair_accept only if it answers an open request)
 *   → the accepter joins the requester's peers.json; or, when the requester picked the
 *     target by a roster name, after its person compared the code and ran confirm_pair
 *
 * Both sides show the same verification code (code.ts) for people to compare. Control
 * messages leave through their own durable queue, re-signed with a fresh timestamp at
 * every offer and keeping their msg_id, until a relay accepts them.
 */
import { newMsgId, type Envelope } from '../envelope/envelope.js';
import { formatRoute } from '../envelope/route.js';
import { InterlinkError, messageOf } from '../errors.js';
import type { OutstandingRequest } from '../gate/decide.js';
import { normalizeFingerprint, type Identity } from '../identity/identity.js';
import { addPeer, checkNotAudience, checkNotLookalike, checkPetname, loadPeers, removePeer } from '../peers/peers.js';
import type { RelayClient } from '../link/client.js';
import { verificationCode } from './code.js';
import { ControlOutbox } from './control.js';
import { fingerprintOfKey, PairingInbound } from './inbound.js';
import type { PairingNotice } from './notices.js';
import { checkControlRoom, clearDropped, closeOutgoing, commitAccept, findIncoming, planRequest, reject, type ControlJob, type Dropped, type PairingData } from './rules.js';
import { siblingSessions, siblingStorePath } from './siblings.js';
import { PairingStore } from './store.js';
import { resolveTarget, targetQuery, type RosterView } from './target.js';
import type { RosterQuery } from '../wire/frames.js';
import { pairingView } from './view.js';

export { shownName } from './inbound.js';
export type { PairingNotice } from './notices.js';

export interface PairingOptions {
  identity: Identity;
  session: string;
  store: PairingStore;
  peersPath: string;
  relays: readonly RelayClient[];
  /** The verified sessions a pairing target (a key, a fingerprint, a name) finds on the relays (target.ts `targetQuery`). */
  lookup: (query: RosterQuery) => Promise<RosterView[]>;
  /** The name this session announces: the requester's claimed name in its requests. */
  name: string;
  now?: () => number;
}

/**
 * The petname a new peer gets when the person gave none: never a name the other side
 * chose (it would speak in every later notice), but one made from its fingerprint.
 */
export function defaultPetname(fingerprint: string): string {
  return `peer-${fingerprint.slice(0, 9)}`;
}

export class Pairing {
  private readonly control: ControlOutbox;
  private readonly inbound: PairingInbound;

  constructor(private readonly options: PairingOptions) {
    const route = formatRoute({ key: options.identity.key, session: options.session });
    this.control = new ControlOutbox({ identity: options.identity, route, store: options.store, relays: options.relays });
    this.inbound = new PairingInbound({ ...options, now: () => this.now });
  }

  /** Where pairing notices go (the host sink); none yet means they are only logged. */
  set notify(sink: ((notice: PairingNotice) => Promise<void>) | undefined) {
    this.inbound.notify = sink;
  }

  private get now(): number {
    return (this.options.now ?? Date.now)();
  }

  /** The session whose pairing state this is. */
  get session(): string {
    return this.options.session;
  }

  start(): void {
    this.control.start();
  }

  stop(): void {
    this.control.stop();
    this.inbound.close();
  }

  /** Requests this session has open, for the gate (which pair_accept it may admit). */
  async outstanding(): Promise<OutstandingRequest[]> {
    return (await this.options.store.read()).outgoing.map((o) => ({ to: o.to, msg_id: o.request_id }));
  }

  async request(target: string, options: { petname?: string; session?: string } = {}) {
    const me = this.options.identity.key;
    const resolved = resolveTarget(target, await this.options.lookup(targetQuery(target)), me, options.session);
    const { table } = await loadPeers(this.options.peersPath);
    const existing = table.petnameOf(resolved.key);
    if (existing !== undefined) throw new InterlinkError('already_peer', `that identity is already your peer ${existing}`);
    // The name the person typed, or one made from the fingerprint: never the name the target announces.
    // The same rules peers.json applies ("self" is reserved, no look-alike), so the accept can be recorded.
    const petname = checkPetname(options.petname ?? (resolved.by === 'name' ? target : defaultPetname(fingerprintOfKey(resolved.key))));
    const other = table.keyOf(petname);
    if (other !== undefined) throw new InterlinkError('peer_conflict', `petname ${petname} already names another key; pass another petname`);
    checkNotLookalike(petname, table.peers.map((p) => p.petname));
    await checkNotAudience(this.options.peersPath, petname);
    const requestId = newMsgId();
    const { outgoing, repeated, resent } = await this.options.store.update((data) =>
      planRequest(data, {
        request_id: requestId,
        to: resolved.key,
        session: resolved.session,
        petname,
        created_at: this.now,
        code: verificationCode(me, resolved.key, requestId),
        by_name: resolved.by === 'name',
        text: this.options.name,
      }),
    );
    this.kick();
    return {
      request_id: outgoing.request_id,
      to: outgoing.to,
      fingerprint: fingerprintOfKey(outgoing.to),
      session: outgoing.session,
      petname: outgoing.petname,
      code: outgoing.code,
      repeated,
      /** An open request queued again by this call: the other side may have dropped it (a full list). */
      resent,
      state: 'pending' as const,
      /** Picked by a roster name: the acceptance waits for a person's confirm_pair. */
      confirm_needed: outgoing.by_name === true,
      next:
        `Compare the code with the other person (not through the agents). They accept with \`interlink-mcp pair accept ${this.options.identity.fingerprint}\`` +
        (resolved.by === 'name' ? `; then, once the codes match, confirm here with \`interlink-mcp pair confirm ${fingerprintOfKey(resolved.key)}\`.` : '; then they become your peer here too.'),
    };
  }

  async list() {
    const data = await this.options.store.read();
    const { table } = await loadPeers(this.options.peersPath);
    return pairingView(data, (key) => table.petnameOf(key));
  }

  /** A person saw this count of dropped requests: it starts again (a later drop stays). */
  async sawDropped(seen: Dropped): Promise<void> {
    await this.options.store.update((data) => clearDropped(data, seen));
  }

  /**
   * Operator action. In this order: find the request and check there is room for the
   * confirmation (nothing changed yet); add the requester to peers.json (trust changes);
   * queue the signed acceptance. If the last step fails the tool says so, and calling it
   * again is safe: the peer is already there, and only the confirmation is queued.
   */
  async accept(fingerprintText: string, options: { petname?: string } = {}) {
    const fingerprint = this.fingerprint(fingerprintText);
    return (await this.holderOf(fingerprint, true)).acceptHere(fingerprint, options);
  }

  private async acceptHere(fingerprint: string, options: { petname?: string }) {
    const data = await this.options.store.read();
    const request = findIncoming(data, fingerprint);
    if (request === undefined) return this.alreadyAccepted(data, fingerprint);
    checkControlRoom(data);
    const { table } = await loadPeers(this.options.peersPath);
    // A peer asking again (it removed this identity on its side) keeps its petname here.
    const current = table.petnameOf(request.from);
    const petname = current ?? (await addPeer(this.options.peersPath, options.petname ?? defaultPetname(fingerprint), request.from)).petname;
    const job: ControlJob = {
      msg_id: newMsgId(),
      kind: 'pair_accept',
      to: request.from,
      session: request.session,
      text: this.options.name,
      in_reply_to: request.request_id,
      created_at: this.now,
    };
    let queued: boolean;
    try {
      ({ queued } = await this.options.store.update((d) => commitAccept(d, request, job, this.now)));
    } catch (err) {
      throw new InterlinkError(
        'confirmation_pending',
        `${current ?? petname} is now your peer, but the confirmation to them could not be queued (${messageOf(err)}); run accept again to queue it`,
      );
    }
    if (!queued) {
      // The request closed meanwhile: another accept (report its confirmation) or a
      // reject or a newer request from the same key (then the peer this call added must
      // not stay without a person's decision on the open request).
      const after = await this.options.store.read();
      const acceptedElsewhere = after.handled.some((h) => h.outcome === 'accepted' && h.from === request.from && h.msg_id === request.request_id);
      if (acceptedElsewhere) return this.alreadyAccepted(after, fingerprint);
      if (current === undefined && (await loadPeers(this.options.peersPath)).table.keyOf(petname) === request.from) {
        await removePeer(this.options.peersPath, petname);
      }
      throw new InterlinkError('unknown_request', `the request from ${fingerprint} changed while it was being accepted (rejected, or replaced by a newer one); nothing was accepted`, undefined, { hint: { tool: 'see list_pair_requests', cli: 'see `interlink-mcp pair list`' } });
    }
    this.kick();
    return { fingerprint, key: request.from, petname: current ?? petname, code: request.code, state: 'accepted' as const, confirmation: 'queued' as const, already_peer: current !== undefined };
  }

  /** Whether the confirmation of an accepted request still waits for a relay (`queued`) or one took it (`sent`). */
  async confirmation(fingerprintText: string): Promise<'queued' | 'sent'> {
    const fingerprint = this.fingerprint(fingerprintText);
    const holder = await this.holderOf(fingerprint, true);
    return (await holder.alreadyAccepted(await holder.options.store.read(), fingerprint)).confirmation;
  }

  private async alreadyAccepted(data: Awaited<ReturnType<PairingStore['read']>>, fingerprint: string) {
    // The latest acceptance of that key (it may have been accepted, removed and accepted again).
    const done = data.handled.findLast((h) => h.outcome === 'accepted' && fingerprintOfKey(h.from) === fingerprint);
    if (done === undefined) throw new InterlinkError('unknown_request', `no open pairing request from ${fingerprint}`, undefined, { hint: { tool: 'see list_pair_requests', cli: 'see `interlink-mcp pair list`' } });
    const { table } = await loadPeers(this.options.peersPath);
    const petname = table.petnameOf(done.from);
    return {
      fingerprint,
      key: done.from,
      petname: petname ?? '',
      /** Accepted before: a peer already, unless a person removed it since. */
      already_peer: petname !== undefined,
      code: verificationCode(done.from, this.options.identity.key, done.msg_id),
      state: 'accepted' as const,
      confirmation: data.control.some((c) => c.kind === 'pair_accept' && c.in_reply_to === done.msg_id) ? ('queued' as const) : ('sent' as const),
    };
  }

  /**
   * Operator action, after the person compared the verification code: the identity that
   * accepted a request made by roster name becomes a peer, under the request's petname.
   */
  async confirm(fingerprintText: string) {
    const fingerprint = this.fingerprint(fingerprintText);
    let waiting = false;
    // Whichever session of this identity holds the accepted request (an agent's or the CLI's).
    for (const holder of [this, ...(await this.otherSessions())]) {
      const open = (await holder.options.store.read()).outgoing.filter((o) => fingerprintOfKey(o.to) === fingerprint);
      const accepted = open.find((o) => o.accepted !== undefined);
      waiting ||= open.length > 0;
      if (accepted === undefined) continue;
      const { table } = await loadPeers(this.options.peersPath);
      if (table.petnameOf(accepted.to) === undefined) await addPeer(this.options.peersPath, accepted.petname, accepted.to);
      await holder.options.store.update((data) => closeOutgoing(data, [accepted.request_id]));
      return { fingerprint, key: accepted.to, petname: table.petnameOf(accepted.to) ?? accepted.petname, code: accepted.code, state: 'confirmed' as const };
    }
    if (waiting) throw new InterlinkError('unknown_request', `${fingerprint} has not accepted your request yet; \`interlink-mcp pair list\` shows its state`);
    throw new InterlinkError('unknown_request', `no open pairing request of yours to ${fingerprint}; \`interlink-mcp pair list\` shows them`);
  }

  /**
   * Operator action: withdraw this identity's open request to `fingerprint`, whichever of
   * its sessions sent it. Nothing changes in peers.json; a late acceptance is refused.
   */
  async cancel(fingerprintText: string) {
    const fingerprint = this.fingerprint(fingerprintText);
    const closed: Awaited<ReturnType<PairingStore['read']>>['outgoing'] = [];
    // Every session's request to that identity: a person who withdraws means all of them.
    for (const holder of [this, ...(await this.otherSessions())]) {
      const open = (await holder.options.store.read()).outgoing.filter((o) => fingerprintOfKey(o.to) === fingerprint);
      if (open.length > 0) closed.push(...(await holder.options.store.update((data) => closeOutgoing(data, open.map((o) => o.request_id)))));
    }
    const [first] = closed;
    if (first === undefined) throw new InterlinkError('unknown_request', `no open pairing request of yours to ${fingerprint}; \`interlink-mcp pair list\` shows them`);
    return { fingerprint, key: first.to, petname: first.petname, state: 'canceled' as const, requests: closed.length };
  }

  /**
   * Closes this session's open requests to keys that are peers already (added by hand, or
   * through another session's pairing): nothing is left to wait for. Returns them.
   */
  async closeMoot() {
    const { table } = await loadPeers(this.options.peersPath);
    const moot = (await this.options.store.read()).outgoing.filter((o) => o.conflict === undefined && table.has(o.to));
    if (moot.length === 0) return [];
    const closed = await this.options.store.update((data) => closeOutgoing(data, moot.map((o) => o.request_id)));
    return closed.map((o) => ({ fingerprint: fingerprintOfKey(o.to), key: o.to, petname: table.petnameOf(o.to) ?? o.petname }));
  }

  async reject(fingerprintText: string) {
    const fingerprint = this.fingerprint(fingerprintText);
    const holder = await this.holderOf(fingerprint, false);
    const request = await holder.options.store.update((data) => reject(data, fingerprint, this.now));
    return { fingerprint, key: request.from, state: 'rejected' as const };
  }

  /**
   * The other sessions of this identity that keep pairing state (siblings.ts), each as a
   * Pairing that sends through this session's relays with its own route.
   */
  async otherSessions(): Promise<Pairing[]> {
    const sessions = await siblingSessions(this.options.store.path, this.options.session);
    return sessions.map((session) => new Pairing({ ...this.options, session, store: new PairingStore(siblingStorePath(this.options.store.path, session)) }));
  }

  /**
   * The session whose store holds the open request from `fingerprint`: this one first,
   * else another session of this identity; with `accepted`, then one that already
   * accepted it (accepting again is idempotent). Else this one, which says it has none.
   */
  private async holderOf(fingerprint: string, accepted: boolean): Promise<Pairing> {
    const own = await this.options.store.read();
    if (findIncoming(own, fingerprint) !== undefined) return this;
    const others = await this.otherSessions();
    const data = new Map<Pairing, PairingData>([[this, own]]);
    for (const other of others) data.set(other, await other.options.store.read());
    const open = others.find((other) => findIncoming(data.get(other)!, fingerprint) !== undefined);
    if (open !== undefined) return open;
    if (!accepted) return this;
    const done = [this, ...others].find((p) => data.get(p)!.handled.some((h) => h.outcome === 'accepted' && fingerprintOfKey(h.from) === fingerprint));
    return done ?? this;
  }

  private fingerprint(text: string): string {
    const fingerprint = normalizeFingerprint(text);
    if (fingerprint === undefined) throw new InterlinkError('usage', `${JSON.stringify(text.slice(0, 40))} is not a fingerprint (xxxx-xxxx-xxxx-xxxx)`);
    return fingerprint;
  }

  /** A pairing message the gate admitted (inbound.ts). */
  handle(envelope: Envelope, admission: 'pair_request' | 'pair_accept'): Promise<void> {
    return this.inbound.handle(envelope, admission);
  }

  /** Offers every queued control message to every connected relay soon. */
  kick(): void {
    this.control.kick();
  }

  /** Waits (bounded) until every queued control message was accepted by a relay; returns how many are left. */
  flush(timeoutMs: number): Promise<number> {
    return this.control.flush(timeoutMs);
  }
}
