/**
 * Pairing: incoming requests with the verification code to compare (accept, reject),
 * this identity's open requests (confirm after comparing, cancel), a form to ask someone,
 * and the peers (revoke, after a page that asks first). Pure.
 */
import { html, shown, timeTag, type Html } from './html.js';
import { actionForm, empty, type Frame } from './layout.js';

export interface Incoming {
  fingerprint: string;
  claimed_name: string;
  code: string;
  received_at: number;
  already_peer?: string;
}

export interface Outgoing {
  fingerprint: string;
  petname: string;
  code: string;
  state: 'accepted_confirm_needed' | 'accepted_with_conflict' | 'waiting_for_relay' | 'sent';
  conflict?: string;
}

export interface PeerRow {
  petname: string;
  fingerprint: string;
}

export interface PairingData {
  incoming: Incoming[];
  outgoing: Outgoing[];
  peers: PeerRow[];
}

const OUTGOING_STATE: Record<Outgoing['state'], string> = {
  accepted_confirm_needed: 'accepted by them: compare the code, then confirm',
  accepted_with_conflict: 'accepted by them, not added here',
  waiting_for_relay: 'waiting for a relay to take the request',
  sent: 'sent: waiting for them to accept',
};

function code(text: string): Html {
  return html`<strong class="code">${text}</strong>`;
}

function incomingList(frame: Frame, incoming: readonly Incoming[]): Html {
  if (incoming.length === 0) return empty('No incoming pairing requests.');
  return html`<ul class="requests">${incoming.map(
    (i) => html`<li>
<p>Fingerprint <code>${i.fingerprint}</code> claims to be <q>${shown(i.claimed_name)}</q> (a claim, not a fact), asked ${timeTag(i.received_at)}.${i.already_peer !== undefined ? html` Already your peer <strong>${shown(i.already_peer)}</strong>: it asks again, probably because it removed you.` : ''}</p>
<p>Verification code ${code(i.code)}: compare it with the other person over another channel (phone, in person) before accepting. A code that differs means someone in between substituted a key: reject.</p>
<form method="post" action="/pairing/accept" class="inline">
<input type="hidden" name="page_token" value="${frame.pageToken}">
<input type="hidden" name="fingerprint" value="${i.fingerprint}">
<label>Petname <input name="petname" autocomplete="off" spellcheck="false" placeholder="optional"></label>
<button type="submit">Accept: the codes match</button>
</form>
${actionForm(frame, '/pairing/reject', 'Reject', { fingerprint: i.fingerprint }, { danger: true })}
</li>`,
  )}</ul>`;
}

function outgoingList(frame: Frame, outgoing: readonly Outgoing[]): Html {
  if (outgoing.length === 0) return empty('No open requests of yours.');
  return html`<ul class="requests">${outgoing.map(
    (o) => html`<li>
<p><strong>${shown(o.petname)}</strong> <code>${o.fingerprint}</code>: ${OUTGOING_STATE[o.state]}${o.conflict !== undefined ? html` (${shown(o.conflict)})` : ''}. Verification code ${code(o.code)}.</p>
${o.state === 'accepted_confirm_needed' ? actionForm(frame, '/pairing/confirm', 'Confirm: the codes match', { fingerprint: o.fingerprint }) : ''}
${actionForm(frame, '/pairing/cancel', 'Withdraw', { fingerprint: o.fingerprint }, { danger: true })}
</li>`,
  )}</ul>`;
}

function requestForm(frame: Frame): Html {
  return html`<form method="post" action="/pairing/request" class="stacked">
<input type="hidden" name="page_token" value="${frame.pageToken}">
<label>Whom: a name on the relay rosters, a public key or a fingerprint <input name="target" required autocomplete="off" spellcheck="false"></label>
<label>Petname for them here <input name="petname" autocomplete="off" spellcheck="false" placeholder="optional"></label>
<button type="submit">Ask to pair</button>
</form>`;
}

function peersList(peers: readonly PeerRow[]): Html {
  if (peers.length === 0) return empty('No peers yet.');
  return html`<table>
<caption>Peers (peers.json)</caption>
<thead><tr><th scope="col">Petname</th><th scope="col">Fingerprint</th><th scope="col"><span class="visually-hidden">Action</span></th></tr></thead>
<tbody>${peers.map((p) => html`<tr><th scope="row">${shown(p.petname)}</th><td><code>${p.fingerprint}</code></td><td><a href="/pairing/revoke?petname=${encodeURIComponent(p.petname)}">Revoke…</a></td></tr>`)}</tbody>
</table>`;
}

export function pairingBody(frame: Frame, data: PairingData): Html {
  return html`<section aria-labelledby="incoming"><h2 id="incoming">Incoming requests</h2>${incomingList(frame, data.incoming)}</section>
<section aria-labelledby="outgoing"><h2 id="outgoing">Your requests</h2>${outgoingList(frame, data.outgoing)}${requestForm(frame)}</section>
<section aria-labelledby="peers"><h2 id="peers">Peers</h2>${peersList(data.peers)}</section>`;
}

/** The page that asks before a revoke. */
export function revokeBody(frame: Frame, peer: PeerRow): Html {
  return html`<p>Revoke <strong>${shown(peer.petname)}</strong> (fingerprint <code>${peer.fingerprint}</code>)? Every running session of this identity stops admitting its messages at once, and sending to it is refused. Messages already in mailboxes stay. To talk again, pair again.</p>
${actionForm(frame, '/pairing/revoke', 'Revoke this peer', { petname: peer.petname }, { danger: true })}
<p><a href="/pairing">Keep it and go back</a></p>`;
}
