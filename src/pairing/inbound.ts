/**
 * Pairing messages the gate admitted (DESIGN.md, "Pairing"): a knock (`pair_request`,
 * from a stranger or a peer asking again) goes into the store as a request for a person;
 * an acceptance (`pair_accept`) of an open request of this session either completes it or,
 * when the target was picked by a roster name, holds it until a person confirms. Both
 * are durable before the relay is acknowledged: these methods throw only when the store
 * cannot be written, so the relay keeps the message and delivers it again.
 */
import { replyToSession, type Envelope } from '../envelope/envelope.js';
import { isInterlinkError, messageOf } from '../errors.js';
import { fingerprintOf, parsePublicKey, type Identity } from '../identity/identity.js';
import { log } from '../log.js';
import { addPeer, loadPeers } from '../peers/peers.js';
import { verificationCode } from './code.js';
import { KnockNotices, noticeId, type PairingNotice } from './notices.js';
import { admitRequest, commitAccepted, holdAccepted, matchAccept, wasHandled, type Incoming } from './rules.js';
import type { PairingStore } from './store.js';

const MAX_SHOWN_NAME = 128;

/** A claimed name as it may be shown: no control characters, at most 128 characters. */
export function shownName(text: string): string {
  // eslint-disable-next-line no-control-regex
  const clean = text.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\u061c]/g, ' ').trim();
  return clean.length > MAX_SHOWN_NAME ? `${clean.slice(0, MAX_SHOWN_NAME)}…` : clean;
}

export function fingerprintOfKey(key: string): string {
  return fingerprintOf(parsePublicKey(key));
}

export interface PairingInboundOptions {
  identity: Identity;
  session: string;
  store: PairingStore;
  peersPath: string;
  now: () => number;
}

export class PairingInbound {
  /** Where pairing notices go (the host sink); none yet means they are only logged. */
  notify: ((notice: PairingNotice) => Promise<void>) | undefined;
  private readonly knocks: KnockNotices;

  constructor(private readonly options: PairingInboundOptions) {
    this.knocks = new KnockNotices(
      () => this.openKnocks(),
      (notice) => this.send(notice),
      options.now,
    );
  }

  close(): void {
    this.knocks.close();
  }

  async handle(envelope: Envelope, admission: 'pair_request' | 'pair_accept'): Promise<void> {
    if (admission === 'pair_request') await this.receiveRequest(envelope);
    else await this.receiveAccept(envelope);
  }

  private async openKnocks() {
    const [data, { table }] = await Promise.all([this.options.store.read(), loadPeers(this.options.peersPath)]);
    return data.incoming.map((i) => {
      const peer = table.petnameOf(i.from);
      return { fingerprint: i.fingerprint, code: i.code, ...(peer !== undefined && { peer }) };
    });
  }

  private async receiveRequest(envelope: Envelope): Promise<void> {
    const session = replyToSession(envelope);
    if (session === undefined) {
      log.warn('pair_request_dropped', { from: envelope.from, reason: 'no return session of the sender in reply_to' });
      return;
    }
    const now = this.options.now();
    const request: Incoming = {
      request_id: envelope.msg_id,
      from: envelope.from,
      fingerprint: fingerprintOfKey(envelope.from),
      claimed_name: shownName(envelope.text),
      session,
      received_at: now,
      code: verificationCode(envelope.from, this.options.identity.key, envelope.msg_id),
      // Signed: only a newer request from the same key replaces an open one (rules.ts).
      ts: envelope.ts,
    };
    // Peers asking again are kept over strangers when the list is full (rules.ts).
    const { table } = await loadPeers(this.options.peersPath);
    const known = new Set(table.peers.map((p) => p.key));
    const outcome = await this.options.store.update((data) => admitRequest(data, request, now, known));
    if (outcome === 'evicted') log.warn('pair_request_evicted', { from: envelope.from, reason: 'too many open requests: the oldest from an unknown key was dropped (counted for pair list and status)' });
    // A newer request from the same key replaces the open one quietly (the person sees it in the list).
    if (outcome === 'stored' || outcome === 'evicted') this.knocks.knock();
  }

  private async receiveAccept(envelope: Envelope): Promise<void> {
    const data = await this.options.store.read();
    if (wasHandled(data, envelope.from, envelope.msg_id, this.options.now())) return;
    const request = matchAccept(data, envelope.from, envelope.in_reply_to);
    if (request === undefined || request.accepted !== undefined) return; // a copy, after the first was handled
    const fingerprint = fingerprintOfKey(envelope.from);
    const code = request.code;
    const already = (await loadPeers(this.options.peersPath)).table.petnameOf(envelope.from);
    if (request.by_name === true && already === undefined) {
      // Picked by a name on the roster, which a relay could have lied about: a person compares the code first.
      const held = await this.commitOnce(envelope, (d) => holdAccepted(d, request, envelope.msg_id, this.options.now()));
      if (!held) return;
      await this.send({
        id: noticeId(),
        text:
          `Interlink: the identity you asked to pair as ${request.petname} (fingerprint ${fingerprint}) accepted. It is not a peer yet: ` +
          `a person compares the verification code ${code} with them over another channel, and if it matches runs \`interlink-mcp pair confirm ${fingerprint}\`.`,
      });
      return;
    }
    let conflict: string | undefined;
    try {
      if (already === undefined) await addPeer(this.options.peersPath, request.petname, envelope.from);
    } catch (err) {
      // A petname taken meanwhile, or one peers.json refuses: recorded for a person, never retried
      // (a storage failure is not an InterlinkError of these kinds and is retried).
      if (!isInterlinkError(err, 'peer_conflict') && !isInterlinkError(err, 'bad_name')) throw err;
      conflict = err.message;
    }
    const committed = await this.commitOnce(envelope, (d) => commitAccepted(d, request, envelope.msg_id, conflict, this.options.now()).next);
    if (!committed) return;
    await this.send({
      id: noticeId(),
      text:
        conflict === undefined
          ? `Interlink: ${already ?? request.petname} (fingerprint ${fingerprint}) accepted the pairing request; it is ${already === undefined ? 'now' : 'already'} a peer.`
          : `Interlink: the identity with fingerprint ${fingerprint} accepted the pairing request, but it was not added: ${conflict}. A person can add it with \`interlink-mcp peers add <petname> ${envelope.from}\`.`,
    });
  }

  /**
   * Applies `change` under the store's lock unless the acceptance was handled meanwhile:
   * the same pair_accept, carried by two relays, may be handled twice at once, and only
   * one of them closes the request and tells the host.
   */
  private commitOnce(envelope: Envelope, change: (d: Awaited<ReturnType<PairingStore['read']>>) => Awaited<ReturnType<PairingStore['read']>> | undefined): Promise<boolean> {
    return this.options.store.update((d) => {
      const open = matchAccept(d, envelope.from, envelope.in_reply_to);
      if (wasHandled(d, envelope.from, envelope.msg_id, this.options.now()) || open === undefined || open.accepted !== undefined) return { next: undefined, result: false };
      return { next: change(d), result: true };
    });
  }

  async send(notice: PairingNotice): Promise<void> {
    log.info('pairing_notice', { session: this.options.session, id: notice.id });
    if (this.notify === undefined) return;
    await this.notify(notice).catch((err: unknown) => log.warn('pairing_notice_failed', { id: notice.id, error: messageOf(err) }));
  }
}
