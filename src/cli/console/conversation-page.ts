/**
 * Conversations: the peers (and `self`) with their message counts, and one peer's
 * conversation by task, both directions, oldest first, each message with its delivery
 * states and their times. Peer text is shown as text (html.ts `shown`). Pure.
 */
import { byTask, type ConversationMessage } from './conversation.js';
import { html, shown, timeTag, type Html } from './html.js';
import { empty } from './layout.js';

export interface PeerEntry {
  petname: string;
  fingerprint: string;
  received: number;
  unread: number;
}

export function peersBody(peers: readonly PeerEntry[]): Html {
  if (peers.length === 0) return empty('No peers yet: pair with someone on the Pairing page.');
  return html`<ul class="peers">${peers.map(
    (p) =>
      html`<li><a href="/conversations/${encodeURIComponent(p.petname)}">${shown(p.petname)}</a> <span class="muted">${p.fingerprint}</span> · ${p.received} received${p.unread > 0 ? html`, <strong>${p.unread} unread</strong>` : ''}</li>`,
  )}</ul>`;
}

function history(m: ConversationMessage): Html {
  return html`<ol class="history" aria-label="Delivery states">${m.history.map(
    (s) => html`<li><span class="state">${s.state}</span> ${timeTag(s.at)}${s.reported === true ? html` <span class="muted">(reported by the receiver, its clock)</span>` : ''}</li>`,
  )}</ol>`;
}

/** A sent copy links to its group's panel; a received one says it is one of a group. */
function group(m: ConversationMessage): Html | string {
  if (m.group === undefined) return '';
  return m.direction === 'sent' ? html` · <a href="/conversations/groups/${m.group}">one copy of a message to several</a>` : html` · one of a group <code>${m.group}</code>`;
}

function message(m: ConversationMessage, petname: string): Html {
  const who = m.direction === 'sent' ? html`to ${shown(petname)}${m.their_session !== undefined ? html` / <code>${shown(m.their_session)}</code>` : ''}` : html`from ${shown(petname)}${m.their_session !== undefined ? html` / <code>${shown(m.their_session)}</code>` : ''}`;
  const task = m.status !== undefined ? html` <span class="status">${m.status}</span>` : '';
  return html`<li class="message ${m.direction}" data-msg-id="${m.msg_id}">
<p class="meta"><span class="direction">${m.direction === 'sent' ? 'Sent' : 'Received'}</span> ${who} · session <code>${shown(m.session)}</code> · ${timeTag(m.ts)}${task}${m.in_reply_to !== undefined ? html` · reply to <code>${m.in_reply_to}</code>` : ''}${group(m)}</p>
<pre class="text">${shown(m.text)}</pre>
<p class="current">State: <strong class="state" data-state="${m.state}">${m.state}</strong>${m.superseded === true ? ' (superseded by a newer message of this task)' : ''} · <code class="id">${m.msg_id}</code></p>
${history(m)}
</li>`;
}

export function conversationBody(petname: string, fingerprint: string, messages: readonly ConversationMessage[]): Html {
  const threads = byTask(messages);
  return html`<p>With <strong>${shown(petname)}</strong> <span class="muted">(fingerprint ${fingerprint})</span>. Oldest first; this page follows new messages and states as they come. Sent messages are listed until 48 hours after a relay accepted them.</p>
${
  threads.length === 0
    ? empty('No messages with this peer yet.')
    : threads.map(
        (t) => html`<section class="thread"><h2>${t.task_id === undefined ? 'Messages outside tasks' : html`Task <code>${shown(t.task_id)}</code>`}</h2>
<ol class="messages">${t.messages.map((m) => message(m, petname))}</ol></section>`,
      )
}
<p><a href="/conversations">All conversations</a></p>`;
}
