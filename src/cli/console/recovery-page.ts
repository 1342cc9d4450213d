/**
 * Recovery: what failed or waits, and what a person can do about each — Codex notices
 * `codex queue` did not take (read, retry, discard), messages the trust gate refused and
 * senders a mailbox bound refuses (with the reason), messages no relay has accepted yet
 * (drop), and messages a relay holds for a session that ended or has not started. Pure.
 */
import type { Failure } from '../../hosts/codex/failed.js';
import { html, shown, timeTag, type Html } from './html.js';
import { actionForm, empty, type Frame } from './layout.js';
import type { Recovery } from './snapshot.js';

function failedList(frame: Frame, failed: Recovery['failed']): Html {
  if (failed.length === 0) return empty('No failed Codex notices.');
  return html`<p>A notice only points at mail: the messages stay unread in the mailbox whatever happens to it.</p>
<ul class="items">${failed.map(
    (f) => html`<li><p><code>${f.id}</code> thread <code>${shown(f.thread)}</code>: ${f.outcome}, saved ${timeTag(f.at)}, expires ${timeTag(f.expires_at)}. ${shown(f.reason)}</p>
<p><a href="/recovery/failed/${encodeURIComponent(f.id)}">Read the notice</a></p>
${actionForm(frame, '/recovery/retry', 'Retry with codex queue', { id: f.id })}
${actionForm(frame, '/recovery/discard', 'Discard', { id: f.id }, { danger: true })}</li>`,
  )}</ul>`;
}

export function failureBody(frame: Frame, failure: Failure): Html {
  return html`<p><code>${failure.id}</code> for thread <code>${shown(failure.thread)}</code>: ${failure.outcome} after ${failure.attempts} attempts, ${failure.retries} retries. ${shown(failure.reason)}</p>
<h2>The notice</h2>
<pre class="text">${shown(failure.message)}</pre>
${actionForm(frame, '/recovery/retry', 'Retry with codex queue', { id: failure.id })}
${actionForm(frame, '/recovery/discard', 'Discard', { id: failure.id }, { danger: true })}
<p><a href="/recovery">Back to recovery</a></p>`;
}

function rejectedList(rejected: Recovery['rejected']): Html {
  if (rejected.length === 0) return empty('The trust gate refused nothing.');
  return html`<table>
<caption>Refused after a relay had accepted them (the newest 256 per session)</caption>
<thead><tr><th scope="col">When</th><th scope="col">Sender</th><th scope="col">Session</th><th scope="col">Reason</th><th scope="col">Message id</th></tr></thead>
<tbody>${rejected.map((r) => html`<tr><td>${timeTag(r.at)}</td><td>${shown(r.sender)}</td><td><code>${shown(r.session)}</code></td><td><code>${r.code}</code>: ${shown(r.reason)}</td><td><code>${r.msg_id}</code></td></tr>`)}</tbody>
</table>`;
}

function refusingList(refusing: Recovery['refusing']): Html {
  if (refusing.length === 0) return empty('No mailbox bound refuses anyone.');
  return html`<ul class="items">${refusing.map((r) => html`<li>Session <code>${shown(r.session)}</code>: ${shown(r.text)}</li>`)}</ul>`;
}

function pendingList(frame: Frame, pending: Recovery['pending']): Html {
  if (pending.length === 0) return empty('Nothing waits for a relay.');
  return html`<ul class="items">${pending.map(
    (p) => html`<li><p>To ${shown(p.to)} from session <code>${shown(p.session)}</code>, signed ${timeTag(p.record.envelope.ts)}: <code>${p.record.envelope.msg_id}</code></p>
<pre class="text">${shown(p.record.envelope.text)}</pre>
${actionForm(frame, '/recovery/drop', 'Drop (never offered again)', { msg_id: p.record.envelope.msg_id }, { danger: true })}</li>`,
  )}</ul>`;
}

function awaitingList(awaiting: Recovery['awaiting']): Html {
  if (awaiting.length === 0) return empty('No sent message waits for an absent session.');
  return html`<ul class="items">${awaiting.map(
    (a) => html`<li>To ${shown(a.to)} / <code>${shown(a.awaiting.session)}</code>, since ${timeTag(a.awaiting.since_at)}: <code>${a.record.envelope.msg_id}</code>. ${a.awaiting.note}.</li>`,
  )}</ul>`;
}

export function recoveryBody(frame: Frame, data: Recovery): Html {
  return html`${data.damaged.length > 0 ? html`<p class="flash failed" role="alert">Damaged files, left as they are: ${data.damaged.map((d) => html`<code>${shown(d)}</code> `)}</p>` : ''}
<section aria-labelledby="failed"><h2 id="failed">Codex notices that failed</h2>${failedList(frame, data.failed)}</section>
<section aria-labelledby="rejected"><h2 id="rejected">Refused by the trust gate</h2>${rejectedList(data.rejected)}</section>
<section aria-labelledby="refusing"><h2 id="refusing">Refused by a mailbox bound</h2>${refusingList(data.refusing)}</section>
<section aria-labelledby="pending"><h2 id="pending">Not yet accepted by a relay (outbox)</h2>${pendingList(frame, data.pending)}</section>
<section aria-labelledby="awaiting"><h2 id="awaiting">Waiting for a session that ended or has not started</h2>${awaitingList(data.awaiting)}</section>`;
}
