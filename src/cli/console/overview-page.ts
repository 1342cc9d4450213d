/**
 * The overview: this identity, its sessions, its relays, and the counts that need a
 * person, each linked to the page where they are handled. Pure: data in, markup out.
 */
import { html, shown, timeTag, type Html } from './html.js';
import { empty } from './layout.js';
import type { RelayRow, SessionRow } from './snapshot.js';

export interface OverviewData {
  identity: { key: string; fingerprint: string };
  sessions: SessionRow[];
  relays: RelayRow[];
  pairRequests: number;
}

function sessionState(s: SessionRow): Html {
  if (s.state === 'ended') {
    const heir = s.taken_by !== undefined ? html`; its mail goes to <code>${s.taken_by}</code>` : '';
    return html`ended${s.ended_at !== undefined ? html` ${timeTag(s.ended_at)}` : ''}${heir}`;
  }
  return html`${s.state}${s.host !== undefined ? ` (${s.host})` : ''}`;
}

function sessionsTable(sessions: readonly SessionRow[]): Html {
  if (sessions.length === 0) return empty('No session of this identity has run yet.');
  return html`<table aria-labelledby="sessions">
<thead><tr><th scope="col">Session</th><th scope="col">State</th><th scope="col">Summary</th><th scope="col">Directory</th><th scope="col">Unread</th><th scope="col">Not yet on a relay</th></tr></thead>
<tbody>${sessions.map(
    (s) => html`<tr><th scope="row"><code>${shown(s.session)}</code></th><td>${sessionState(s)}</td><td>${s.summary === undefined ? '' : shown(s.summary)}</td><td>${s.cwd === undefined ? '' : html`<code>${shown(s.cwd)}</code>`}</td><td>${s.unread} of ${s.stored}</td><td>${s.pending}</td></tr>`,
  )}</tbody>
</table>`;
}

function relayKey(r: RelayRow): string {
  if (r.key.pinned !== null) return `pinned ${r.key.pinned}`;
  if (r.key.recorded !== null) return `recorded on first use ${r.key.recorded}`;
  return 'not known yet';
}

function relaysTable(relays: readonly RelayRow[]): Html {
  if (relays.length === 0) return empty('No relay is configured.');
  return html`<table aria-labelledby="relays">
<thead><tr><th scope="col">Relay</th><th scope="col">Answers</th><th scope="col">TLS</th><th scope="col">Key</th></tr></thead>
<tbody>${relays.map((r) => {
    const answers = r.connected
      ? 'yes'
      : r.trouble === undefined
        ? 'connecting'
        : html`no: ${shown(r.trouble.text)}${r.trouble.since !== undefined ? html` (since ${timeTag(r.trouble.since)})` : ''}`;
    return html`<tr><th scope="row"><code>${r.url}</code></th><td>${answers}</td><td>${r.tls ? 'yes' : 'no (loopback or a trusted network only)'}</td><td class="key">${relayKey(r)}</td></tr>`;
  })}</tbody>
</table>`;
}

/** The counts a person acts on, each with the page that handles it. */
function attention(data: OverviewData): Html {
  const sum = (pick: (s: SessionRow) => number) => data.sessions.reduce((n, s) => n + pick(s), 0);
  const refusing = data.sessions.reduce((n, s) => n + s.refusing.length, 0);
  const items: [string, number, string][] = [
    ['unread messages', sum((s) => s.unread), '/conversations'],
    ['sent, not yet accepted by a relay (pending)', sum((s) => s.pending), '/recovery#pending'],
    ['sent, waiting on a relay for a session that ended or has not started', sum((s) => s.awaiting), '/recovery#awaiting'],
    ['Codex notices that failed', sum((s) => s.failed), '/recovery#failed'],
    ['messages refused by the trust gate', sum((s) => s.rejected), '/recovery#rejected'],
    ['senders a mailbox bound refuses', refusing, '/recovery#refusing'],
    ['pairing requests waiting for you', data.pairRequests, '/pairing'],
  ];
  return html`<ul class="counts">${items.map(([label, n, href]) => html`<li${n > 0 ? html` class="attention"` : ''}><a href="${href}"><strong>${n}</strong> ${label}</a></li>`)}</ul>`;
}

export function overviewBody(data: OverviewData): Html {
  return html`<section aria-labelledby="who"><h2 id="who">Identity</h2>
<p>Fingerprint <code>${data.identity.fingerprint}</code>; public key <code class="key">${data.identity.key}</code></p>
</section>
<section aria-labelledby="needs"><h2 id="needs">Needs a person</h2>${attention(data)}</section>
<section aria-labelledby="sessions"><h2 id="sessions">Sessions</h2>${sessionsTable(data.sessions)}</section>
<section aria-labelledby="relays"><h2 id="relays">Relays</h2>${relaysTable(data.relays)}</section>`;
}
