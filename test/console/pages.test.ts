/**
 * The console's markup (src/cli/console/html.ts and the page modules): whatever text a
 * peer, a relay or a stranger chose — message bodies, claimed names, summaries, session
 * ids, reasons — comes out as text: no tag, no attribute, no entity it did not escape,
 * and no invisible or direction-changing character.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { conversationBody } from '../../src/cli/console/conversation-page.js';
import { groupBody, groupsList } from '../../src/cli/console/groups-page.js';
import { escapeHtml, html, shown } from '../../src/cli/console/html.js';
import { page } from '../../src/cli/console/layout.js';
import { overviewBody } from '../../src/cli/console/overview-page.js';
import { pairingBody } from '../../src/cli/console/pairing-page.js';

const HOSTILE = ['<script>alert(1)</script>', '"><img src=x onerror=alert(1)>', "' onmouseover='x", '&lt;b&gt;', '\u202Eexe.txt', 'a\u2028b', 'zero\u200Bwidth', '\u0007\u001b[31m', '</pre><script>x</script>'];
const frame = { path: '/pairing', title: 'Pairing', fingerprint: 'abcd-ef01-2345-6789', pageToken: 'n.m' };

function unescape(text: string): string {
  return text.replace(/&(amp|lt|gt|quot|#39);/g, (_, e: string) => ({ amp: '&', lt: '<', gt: '>', quot: '"', '#39': "'" })[e]!);
}

const ATTRIBUTES = new Set(['lang', 'charset', 'name', 'content', 'rel', 'href', 'src', 'defer', 'class', 'id', 'role', 'aria-label', 'aria-labelledby', 'aria-current', 'scope', 'datetime', 'data-msg-id', 'data-state', 'data-outcome', 'method', 'action', 'type', 'value', 'autocomplete', 'spellcheck', 'placeholder', 'required']);

/** The markup has no tag or attribute but the page's own, and no character a person cannot see. */
function inert(markup: string, allowedTags: RegExp): void {
  for (const [, tag, attributes] of markup.matchAll(/<\/?([a-zA-Z][a-zA-Z0-9-]*)([^>]*)>/g)) {
    expect(`<${tag}`).toMatch(allowedTags);
    for (const [, name] of attributes!.replace(/"[^"]*"/g, "\"\"").matchAll(/\s([^\s=]+)(?==|\s|$)/g)) expect(ATTRIBUTES, `attribute ${name} on <${tag}>`).toContain(name);
  }
  expect(markup).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/);
}

describe('html', () => {
  it('escapes every interpolated string, and unescaping gives it back', () => {
    fc.assert(
      fc.property(fc.string(), (text) => {
        const out = html`<p title="${text}">${text}</p>`.text;
        const inner = out.slice(out.indexOf('>') + 1, out.lastIndexOf('</p>'));
        expect(inner).not.toMatch(/[<>"']/);
        expect(unescape(inner)).toBe(text);
        expect(escapeHtml(text)).toBe(inner);
      }),
    );
  });

  it('shows control, bidi and line-separator characters as visible escapes', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary' }), (text) => {
        inert(shown(text).text, /^$/);
      }),
    );
    expect(shown('\u202Egnp.exe').text).toBe('\\u{202e}gnp.exe');
    expect(shown('a\nb\tc').text).toBe('a\nb\tc');
  });

  it('never takes a string for markup: only html`` makes it', () => {
    const text = '<b>bold</b>';
    expect(html`${text}`.text).toBe('&lt;b&gt;bold&lt;/b&gt;');
    expect(html`${html`<b>${text}</b>`}`.text).toBe('<b>&lt;b&gt;bold&lt;/b&gt;</b>');
    expect(html`${[text, 1, undefined, null, false]}`.text).toBe('&lt;b&gt;bold&lt;/b&gt;1');
  });
});

const PAGE_TAGS = /^<\/?(caption|html|head|meta|title|link|script|body|header|p|span|code|nav|ul|li|a|main|h1|h2|section|table|thead|tbody|tr|th|td|time|strong|ol|pre|q|form|input|button|label|div)$/;

describe('pages with hostile text everywhere', () => {
  it('the conversation page', () => {
    for (const text of HOSTILE) {
      const messages = [
        { direction: 'received' as const, msg_id: 'm1', ts: 1, session: text, their_session: text, task_id: text, status: 'update', text, state: 'receiver_stored', history: [{ state: 'receiver_stored', at: 1 }] },
        { direction: 'sent' as const, msg_id: 'm2', ts: 2, session: 's', text, state: 'receiver_acknowledged', history: [{ state: 'pending', at: 1 }, { state: 'receiver_acknowledged', at: 2, reported: true }] },
      ];
      const markup = page({ ...frame, title: text }, conversationBody(text, 'abcd', messages)).text;
      inert(markup.replace(/<script src="\/assets\/console.js" defer><\/script>/, ''), PAGE_TAGS);
      expect(markup.match(/<script/g)).toHaveLength(1);
    }
  });

  it('the group pages', () => {
    for (const text of HOSTILE) {
      const row = {
        session: text,
        text,
        panel: {
          group_id: 'a'.repeat(32),
          sent_at: 1,
          task_id: text,
          counts: { result: 1, failed: 0, canceled: 0, needs_input: 1, waiting: 0, refused: 0, not_sent: 1 },
          settled: false,
          recipients: [
            { to: text, key: 'k1', outcome: 'result' as const, msg_id: 'b'.repeat(32), session: text, delivery: 'receiver_acknowledged', answer: { msg_id: 'c'.repeat(32), status: 'result', ts: 2, text }, duplicates: [{ msg_id: 'd'.repeat(32), ts: 3 }] },
            { to: text, key: 'k2', outcome: 'needs_input' as const, msg_id: 'e'.repeat(32), session: text, delivery: 'receiver_stored', latest: { msg_id: 'f'.repeat(32), status: 'needs_input', ts: 2, text, text_truncated: true as const } },
            { to: text, key: 'k3', outcome: 'not_sent' as const, error: { code: 'no_route', message: text } },
          ],
        },
      };
      inert(page({ ...frame, title: text }, groupBody(row)).text.replace(/<script src="\/assets\/console.js" defer><\/script>/, ''), PAGE_TAGS);
      inert(groupsList([row]).text, PAGE_TAGS);
    }
  });

  it('the pairing and overview pages', () => {
    for (const text of HOSTILE) {
      const pairing = pairingBody(frame, {
        incoming: [{ fingerprint: 'abcd', claimed_name: text, code: '1-2-3-4', received_at: 1, already_peer: text }],
        outgoing: [{ fingerprint: 'abcd', petname: text, code: '1-2-3-4', state: 'accepted_with_conflict', conflict: text }],
        peers: [{ petname: text, fingerprint: 'abcd' }],
      }).text;
      inert(pairing, PAGE_TAGS);
      const overview = overviewBody({
        identity: { key: 'k', fingerprint: 'f' },
        sessions: [{ session: text, state: 'live', summary: text, cwd: text, unread: 1, stored: 1, pending: 0, awaiting: 0, failed: 0, rejected: 0, pair_requests: 0, refusing: [text] }],
        relays: [{ url: 'ws://127.0.0.1:1', connected: false, tls: false, key: { pinned: null, recorded: null }, trouble: { text, since: 1 } }],
        pairRequests: 0,
      }).text;
      inert(overview, PAGE_TAGS);
    }
  });
});
