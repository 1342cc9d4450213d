/**
 * Groups: the messages this identity sent to several recipients, and one group's panel —
 * per recipient, where its copy is and what it answered (its first terminal answer; later
 * ones as duplicates). Recipients' text is shown as text (html.ts `shown`). Pure.
 */
import type { PanelLine, PanelMessage } from '../../agent/group-views.js';
import { OUTCOMES } from '../../agent/groups.js';
import type { GroupRow } from './groups.js';
import { html, shown, timeTag, type Html } from './html.js';
import { empty } from './layout.js';

const OUTCOME_WORDS: Record<string, string> = {
  result: 'answered',
  failed: 'failed',
  canceled: 'canceled',
  needs_input: 'asks a question',
  waiting: 'waiting',
  refused: 'refused',
  not_sent: 'not sent',
};

function counts(row: GroupRow): Html {
  const parts = OUTCOMES.filter((o) => row.panel.counts[o] > 0).map((o) => `${row.panel.counts[o]} ${OUTCOME_WORDS[o]}`);
  return html`${parts.join(', ')}`;
}

/** The list on the Conversations page. */
export function groupsList(groups: readonly GroupRow[]): Html {
  if (groups.length === 0) return empty('No message sent to several recipients in the last 48 hours.');
  return html`<ul class="groups">${groups.map(
    (g) =>
      html`<li><a href="/conversations/groups/${g.panel.group_id}">${shown(g.text)}</a> <span class="muted">${g.panel.task_id === undefined ? '' : html`task <code>${shown(g.panel.task_id)}</code> · `}${g.panel.recipients.length} recipient${g.panel.recipients.length === 1 ? '' : 's'} · ${timeTag(g.panel.sent_at)}</span> · ${counts(g)}${g.panel.settled ? '' : html` · <strong>open</strong>`}</li>`,
  )}</ul>`;
}

function said(m: PanelMessage | undefined, label: string): Html {
  if (m === undefined) return html``;
  return html`<div class="said"><p class="meta">${label}${m.status === undefined ? '' : html` <span class="status">${m.status}</span>`} · ${timeTag(m.ts)} · <code class="id">${m.msg_id}</code></p>${m.text === undefined ? '' : html`<pre class="text">${shown(m.text)}${m.text_truncated === true ? '…' : ''}</pre>`}</div>`;
}

function line(l: PanelLine): Html {
  const delivery = l.delivery === undefined ? html`<span class="muted">${shown(l.error?.message ?? '')}</span>` : html`<span class="state" data-state="${l.delivery}">${l.delivery}</span>`;
  const duplicates = l.duplicates === undefined ? '' : html`<p class="muted">${l.duplicates.length} later answer${l.duplicates.length === 1 ? '' : 's'} (not counted): ${l.duplicates.map((d) => html`<code>${d.msg_id}</code> `)}</p>`;
  return html`<tr><th scope="row">${shown(l.to)}</th><td><strong class="outcome" data-outcome="${l.outcome}">${OUTCOME_WORDS[l.outcome] ?? l.outcome}</strong></td><td>${delivery}${l.session === undefined ? '' : html` <span class="muted">session <code>${shown(l.session)}</code></span>`}</td><td>${said(l.answer, 'Answer')}${duplicates}${said(l.latest, 'Latest')}</td></tr>`;
}

/** One group's panel. */
export function groupBody(row: GroupRow): Html {
  const p = row.panel;
  return html`<p>Sent from session <code>${shown(row.session)}</code> ${timeTag(p.sent_at)}${p.task_id === undefined ? '' : html` as task <code>${shown(p.task_id)}</code>`} to ${p.recipients.length} recipient${p.recipients.length === 1 ? '' : 's'}, one signed copy each; group <code class="id">${p.group_id}</code>. ${p.settled ? 'Every recipient has answered or cannot.' : 'Some recipients have not answered yet.'} This page follows new answers and states as they come.</p>
<p class="counts">${counts(row)}</p>
<pre class="text">${shown(row.text)}</pre>
<table aria-label="Recipients">
<thead><tr><th scope="col">Recipient</th><th scope="col">Outcome</th><th scope="col">Delivery</th><th scope="col">What it said</th></tr></thead>
<tbody>${p.recipients.map(line)}</tbody>
</table>
<p><a href="/conversations">All conversations</a></p>`;
}
